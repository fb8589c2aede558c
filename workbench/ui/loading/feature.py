"""The loading feature: export the model the settings name (or reuse the last export), run its fusion timeline,
and hand the snapshots to the controller.

:class:`ModelLoading` runs as the controller's "load" job (the model lane). It reads the settings of the one
:class:`~workbench.ui.state.AppState` and writes ``state.sentences``, ``state.text_line`` and ``state.answers``
(emptied when a new export replaces the text's model) and, while the fusion steps run, the export's graph as the
first snapshot; it gives the engine choice to :class:`~workbench.ui.loading.engine.AutoEngine` (the engine lines, auto's
comparison) and the new timeline and scheduler to :meth:`Controller.adopt <workbench.ui.controller.Controller.adopt>`,
which owns what follows (the snapshots shown, the warm-up, parity).
"""

from __future__ import annotations

import dataclasses
import time

from ...export import export
from ...fusion import Timeline
from ...fusion.scheduler import FusionScheduler
from ...fusion.timeline import likely_engine
from ...models import resolve
from ...viz.summary import ENGINE_TITLES


class ModelLoading:
    """Export (or reuse the cached export) and run the fusion timeline.

    Args:
        app: the controller: its ``state``, ``export_result``, ``text``, ``timings``, ``stop_warming``,
            ``refresh``, ``say``, ``adopt`` and ``auto_engine``.
    """

    def __init__(self, app):
        self.app = app
        self._key = None  # the settings of the export in ``app.export_result``

    def export(self, job) -> None:
        """Export the model the settings name (or reuse the export of the last load)."""
        app, s = self.app, self.app.state
        if self._key == s.export_key() and app.export_result is not None:
            return
        t0 = time.perf_counter()
        job.progress("resolving model", 0.01)
        source = resolve(s.source)
        app.export_result = export(source, s.export_config(), progress=job.progress)
        self._key = s.export_key()
        app.text = None
        s.sentences, s.text_line, s.answers = (), "", ()
        app.timings["export_s"] = time.perf_counter() - t0

    def run(self, job) -> None:
        """The load job: export, fuse, show (the export first on a first open), then say what was loaded."""
        app, s = self.app, self.app.state
        self.export(job)
        src = app.export_result.source
        job.progress(f"fusing with {s.engine}", 0.9)
        t1 = time.perf_counter()
        kw = src.timeline_args()
        app.stop_warming()
        # Under auto, the engine that fuses this exporter's graphs best is shown first; the other runs
        # afterwards in the background (the controller's engine comparison), and auto switches if it fuses more.
        likely = likely_engine(s.exporter, src.model_type) if s.engine == "auto" else None
        plan = s.fusion_plan()
        tl = Timeline(app.export_result.path, dataclasses.replace(plan, engine=likely) if likely else plan, **kw)
        self.show_export_first(tl)
        sch = FusionScheduler(tl)
        snaps = sch.run()
        app.auto_engine.show_first(tl, likely, src.model_type)  # before set_plan below replaces tl's reasons
        if s.engine == "auto" and tl.engine_used and not likely:
            # Keep the engine auto chose: a later toggle must not switch engines (and step lists) under
            # the user. Its snapshots are cached, so this costs nothing.
            snaps = sch.set_plan(dataclasses.replace(tl.plan, engine=tl.engine_used))
        if app.text is not None:
            tl.use_text(app.text)
        app.adopt(tl, sch, snaps, fusion_s=time.perf_counter() - t1)
        last = s.snapshots[-1] if s.snapshots else None
        summary = f"{src.label}: {app.export_result.nodes} nodes exported"
        if last is not None:
            summary += f" → {last.nodes} after fusion ({ENGINE_TITLES.get(tl.engine_used, tl.engine_used)})"
        app.say(summary, "ok")
        if likely:  # after the status line above: a switch says so after it
            app.auto_engine.compare_engines(sch)

    def show_export_first(self, tl) -> None:
        """On a first open, draw the exported graph (``tl``'s input) while the fusion steps run."""
        s = self.app.state
        if not s.snapshots:
            with s.hold_trait_notifications():
                s.snapshots, s.step = (tl.input,), 0
            self.app.refresh(rows=False)


__all__ = ["ModelLoading"]
