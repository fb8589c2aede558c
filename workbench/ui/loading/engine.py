"""The engine feature: which fusion engine runs and why, auto's comparison, and the warm-up line.

:class:`AutoEngine` (``controller.auto_engine``) is the only writer of ``state.engine_line`` and
``state.engine_note`` (which engine runs and, under auto, why) and of ``state.warm`` (the line on the background
precomputation of single toggles) of the one :class:`~workbench.ui.state.AppState`. Under auto, a load shows the
engine likely to fuse best first; :meth:`AutoEngine.compare_engines` then runs the other in the job runner's
"compare" lane and switches (through :meth:`Controller.show_snapshots
<workbench.ui.controller.Controller.show_snapshots>`) if it fuses more.
"""

from __future__ import annotations

import dataclasses

from ...fusion.timeline import auto_choice
from ...viz.summary import ENGINE_TITLES
from ..steps.rows import engine_summary


class AutoEngine:
    """``compare_engines``, ``warm_text`` and the engine lines.

    Args:
        app: the controller: its ``state``, ``scheduler``, ``runner``, ``background``, ``closed``, ``say`` and
            ``show_snapshots``.
    """

    def __init__(self, app):
        self.app = app

    def show_first(self, tl, likely: str | None, model_type: str | None) -> None:
        """The engine lines once a load ran ``tl``: under auto, the ``likely`` engine shown first while the other
        is compared; otherwise the engine that ran and its reasons."""
        s = self.app.state
        if likely:
            s.engine_note = (f"auto: showing {likely} first (it fuses {s.exporter} exports of "
                             f"{model_type or 'this model'} best); "
                             f"the other engine is being compared in the background")
            s.engine_line = f"auto → {ENGINE_TITLES.get(likely, likely)} (comparing with the other engine…)"
        else:
            s.engine_note = tl.engine_note or ""  # the auto run's reasons (a later set_plan replaces tl's)
            s.engine_line = engine_summary(s.engine, tl.engine_used,
                                           {e: r[-1].fused for e, r in tl.runs.items() if r})

    def compare_engines(self, sch) -> None:
        """Under auto, run the other engine in the background; auto switches if it fuses more."""
        self.app.runner.start("compare engines", lambda job, sch=sch: self._compare(sch, job), lane="compare")

    def _compare(self, sch, job) -> None:
        """What auto decides on, after the likely engine's timeline is shown: both engines under the
        plan, the engine line and note; a switch (and a status line saying so) if the other fuses more."""
        app = self.app
        # In the app, after the warm-up: an engine step holds the engine turn for up to seconds on
        # bert-base, and the user's first clicks should wait for the warm-up's steps only.
        runs = sch.compare_engines(lambda: job.cancelled or app.closed or sch is not app.scheduler,
                                   after_warm_up=app.background)
        if runs is None or sch is not app.scheduler:
            return
        s = app.state
        winner, note = auto_choice(runs)
        s.engine_note = note
        s.engine_line = engine_summary("auto", winner, {e: r[-1].fused for e, r in runs.items() if r})
        if winner != sch.timeline.plan.engine and sch is app.scheduler:
            app.runner.start("switch engine", lambda job: self._switch(sch, winner))

    def _switch(self, sch, engine: str) -> None:
        app = self.app
        if sch is not app.scheduler:
            return
        was = sch.timeline.plan.engine
        app.show_snapshots(sch.set_plan(dataclasses.replace(sch.timeline.plan, engine=engine)))
        app.say(f"auto switched from {was} to {engine}: it fuses more of this model", "ok")

    # ----------------------------------------------------------------- the warm-up line
    def warm_text(self) -> str:
        """One line on the background precomputation of single toggles (what a click will cost)."""
        sch = self.app.scheduler
        if sch is None:
            return ""
        if sch.warming:
            return "precomputing every toggle in the background… until then a click may take a few seconds"
        if sch.warm_error:
            return f"precomputing toggles stopped: {' '.join(str(sch.warm_error).split())[:160]}"
        if sch.warm_s is not None:
            return f"✔ every single toggle precomputed ({sch.warm_s:.0f} s): a click is a lookup"
        return ""

    def follow_warm_up(self) -> None:
        """Keep ``state.warm`` up to date (twice a second, in the background) until the app closes."""
        self.app.runner.every("warm", self._watch_warm)

    def _watch_warm(self) -> bool:
        self.app.state.warm = self.warm_text()
        return not self.app.closed


__all__ = ["AutoEngine"]
