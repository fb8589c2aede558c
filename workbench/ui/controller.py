"""The app's actions, and the only writer of its state.

The controller loads a model, toggles and selects steps, checks parity, shows the session layer,
and (through :class:`~workbench.ui.measuring.MeasureActions`) benchmarks, profiles, ablates, checks
answers on real text and runs sweeps. It calls the compute modules and writes what comes back into
the :class:`~workbench.ui.state.AppState`; every piece of background work goes through the
:class:`~workbench.ui.jobs.JobRunner`. It never imports ipywidgets: panels observe the state.
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path
from typing import Any

from ..errors import WorkbenchError
from .engines import EngineActions
from .jobs import Job, JobRunner
from .measuring import MeasureActions
from .reporting import ReportActions
from .rules import RuleActions
from .state import AppState, JobStatus, Status
from .steps import ENGINE_TITLES, default_step, engine_summary, step_near, step_rows
from .views import GraphViews, step_name

#: Jobs whose start clears the last error (background upkeep does not).
_USER_JOBS = {"load", "toggle", "session layer", "netron", "benchmark", "profile", "ablation", "tune", "answers", "sweep"}


class Controller(EngineActions, MeasureActions, ReportActions, RuleActions):
    """Every action of the app; the only writer of ``state``.

    Args:
        state: the app state to write.
        background: run work in background threads (False: in the caller's thread).
        auto_parity: check each snapshot's parity in the background after every run.
    """

    def __init__(self, state: AppState | None = None, *, background: bool = True, auto_parity: bool | None = None):
        self.state = state if state is not None else AppState()
        self.background = background
        self.auto_parity = background if auto_parity is None else bool(auto_parity)
        self.runner = JobRunner(self._on_job, background=background)
        self.views = GraphViews()
        self.export_result = None
        self.timeline = None
        self.text = None  # TextBatches once the user gave sentences
        self.profiles: dict[int, Any] = {}
        self._profiled: dict[int, Any] = {}
        self.session_layer: dict | None = None
        self.timings: dict[str, float] = {}
        self._export_key = None
        self._pending: dict[str, bool] = {}  # toggles clicked whose run has not finished
        self._clicks, self._last_click = 0, {}  # the latest click per step (its pending state stays until that one ran)
        self._chosen: str | None = None  # the step the user looks at, by name
        self._gen = 0  # bumped whenever the snapshots change: parity results for older ones are dropped
        self._netron = None
        self._bench = None
        self._last_series = 0.0
        self.closed = False

    # ----------------------------------------------------------------- status
    def say(self, text: str, kind: str = "info") -> None:
        """Set the status line (an error also becomes ``state.error``)."""
        if kind == "error":
            self.state.error = text
        self.state.status = Status(text, kind)

    def _on_job(self, name: str, st: JobStatus) -> None:
        s = self.state
        if st.state == "running" and not st.stage and name in _USER_JOBS:
            s.error = None
        s.jobs = {**s.jobs, name: st}
        if st.state == "error":
            self.say(st.error or f"{name} failed", "error")
        elif st.state == "running" and st.stage:
            self.say(st.stage, "busy")

    @property
    def last_trace(self) -> str | None:
        return self.runner.last_trace

    @property
    def snapshots(self) -> list:
        return list(self.state.snapshots)

    def wait(self, timeout: float | None = 600) -> None:
        """Block until the model's work (load, toggles, auto's engine comparison) is done."""
        t0 = time.perf_counter()
        self.runner.wait("model", timeout)
        left = None if timeout is None else max(0.0, timeout - (time.perf_counter() - t0))
        self.runner.wait("compare", left)
        self.runner.wait("model", left)  # a switch of engine the comparison started

    # ----------------------------------------------------------------- settings
    def configure(self, **settings: Any) -> None:
        """Change settings that need no new run (benchmark shape, threads, runs, variants, int8, ...)."""
        s = self.state
        unknown = set(settings) - set(s.trait_names())
        if unknown:
            raise WorkbenchError(f"unknown app setting(s): {', '.join(sorted(unknown))}")
        with s.hold_trait_notifications():
            for k, v in settings.items():
                setattr(s, k, v)

    def load_model(self, **settings: Any) -> None:
        """Take new model settings (source, exporter, opset, attention, engine) and load."""
        self.configure(**{k: v for k, v in settings.items() if v is not None or k == "opset"})
        self.load()

    def probe_providers(self) -> None:
        """Offer CUDA where this machine has a GPU and ONNX Runtime can use it."""
        try:
            # Probe CUDA only where a GPU can be: the probe makes ONNX Runtime print library errors elsewhere.
            if Path("/dev/nvidiactl").exists():
                from ..ort.session import cuda_status

                if cuda_status()[0]:
                    self.state.providers = ("cpu", "cuda")
        except Exception:  # no onnxruntime CUDA build: CPU only
            pass

    # ----------------------------------------------------------------- load
    def load(self) -> None:
        """Export (or reuse the cached export) and run the fusion timeline."""
        self.runner.start("load", self._load)

    def _load(self, job: Job) -> None:
        from ..export import export
        from ..fusion import Timeline
        from ..fusion.timeline import likely_engine
        from ..models import resolve

        s = self.state
        t0 = time.perf_counter()
        if self._export_key != s.export_key() or self.export_result is None:
            job.progress("resolving model", 0.01)
            source = resolve(s.source)
            self.export_result = export(source, s.export_config(), progress=job.progress)
            self._export_key = s.export_key()
            self.text = None
            s.sentences, s.text_line, s.answers = (), "", ()
            self.timings["export_s"] = time.perf_counter() - t0
        src = self.export_result.source
        job.progress(f"fusing with {s.engine}", 0.9)
        t1 = time.perf_counter()
        kw = {k: v for k, v in (("num_layers", src.num_layers), ("num_heads", src.num_heads),
                                ("hidden_size", src.hidden_size)) if v}
        if self.timeline is not None:
            self.timeline.stop_warming(wait=False)
        # Under auto, the engine that fuses this exporter's graphs best is shown first; the other runs
        # afterwards in the background (_compare_engines), and auto switches if it fuses more.
        likely = likely_engine(s.exporter, src.model_type) if s.engine == "auto" else None
        plan = s.fusion_plan()
        tl = Timeline(self.export_result.path, dataclasses.replace(plan, engine=likely) if likely else plan, **kw)
        self._show_export_first(tl)
        snaps = tl.run()
        if likely:
            s.engine_note = (f"auto: showing {likely} first (it fuses {s.exporter} exports of "
                             f"{src.model_type or 'this model'} best); "
                             f"the other engine is being compared in the background")
            s.engine_line = f"auto → {ENGINE_TITLES.get(likely, likely)} (comparing with the other engine…)"
        else:
            s.engine_note = tl.engine_note or ""  # the auto run's reasons (set_plan below replaces tl's)
            s.engine_line = engine_summary(s.engine, tl.engine_used,
                                           {e: r[-1].fused for e, r in tl.runs.items() if r})
        if s.engine == "auto" and tl.engine_used and not likely:
            # Keep the engine auto chose: a later toggle must not switch engines (and step lists) under
            # the user. Its snapshots are cached, so this costs nothing.
            snaps = tl.set_plan(dataclasses.replace(tl.plan, engine=tl.engine_used))
        if self.text is not None:
            tl.use_text(self.text)
        self.timeline = tl
        self.profiles, self._profiled = {}, {}
        self._set_snapshots(snaps, parity=False)
        self.timings["fusion_s"] = time.perf_counter() - t1
        # Precompute each single toggle in the background, at low priority: a click is then a lookup.
        # The selected step's own toggle first: the checkbox a user looking at it clicks first.
        tl.warm_first = (self._chosen,) if self._chosen else ()
        tl.start_warming()
        self._kick_auto_parity()  # after the warm-up started: parity holds back until that toggle is ready
        self.runner.every("warm", self._watch_warm)
        last = s.snapshots[-1] if s.snapshots else None
        summary = f"{src.label}: {self.export_result.nodes} nodes exported"
        if last is not None:
            summary += f" → {last.nodes} after fusion ({ENGINE_TITLES.get(tl.engine_used, tl.engine_used)})"
        self.say(summary, "ok")
        if likely:  # after the status line above: a switch says so after it
            self.runner.start("compare engines", lambda job, tl=tl: self._compare_engines(tl), lane="compare")

    def _show_export_first(self, tl) -> None:
        """On a first open, draw the exported graph (``tl``'s input) while the fusion steps run."""
        s = self.state
        if not s.snapshots:
            with s.hold_trait_notifications():
                s.snapshots, s.step = (tl.input,), 0
            self.refresh(rows=False)

    # ----------------------------------------------------------------- toggles and steps
    def toggle(self, name: str, on: bool) -> None:
        """Switch catalog step ``name`` on or off and re-run the timeline (a lookup once warmed)."""
        s = self.state
        s.set_step_enabled(name, on)
        if self.timeline is None:
            return
        self._pending[name] = on
        self._clicks += 1
        click = self._last_click[name] = self._clicks
        self._update_rows()  # the checkbox and the row's look follow the click at once

        def work(job: Job) -> None:
            t0 = time.perf_counter()
            self.say(f"{'enabling' if on else 'disabling'} {name}", "busy")
            try:
                snaps = self.timeline.toggle(name, on)
            finally:
                if self._last_click.get(name) == click:  # a later click of this step still waits its turn
                    self._pending.pop(name, None)
            self._set_snapshots(snaps)
            self.timings["toggle_s"] = time.perf_counter() - t0
            self.say(f"{name} {'on' if on else 'off'}: {s.snapshots[-1].nodes} nodes after fusion "
                     f"({self.timings['toggle_s']:.2f} s)", "ok")

        self.runner.start("toggle", work)

    def _set_snapshots(self, snaps, parity: bool = True) -> None:
        s = self.state
        snaps = list(snaps)
        # Profiles follow their snapshot when a toggle shifts the indices; other ones are dropped.
        where = {id(sn): i for i, sn in enumerate(snaps)}
        moved = {where[id(sn)]: (self.profiles[k], sn) for k, sn in self._profiled.items()
                 if id(sn) in where and k in self.profiles}
        self.profiles = {i: p for i, (p, _) in moved.items()}
        self._profiled = {i: sn for i, (_, sn) in moved.items()}
        self._gen += 1
        names = [step_name(sn.step) for sn in snaps]
        want = step_near(snaps, self.timeline.steps() if self.timeline else [], self._chosen)
        if self._chosen is None and snaps:
            self._chosen = names[want]  # remembered, so switching this step off and on comes back to it
        with s.hold_trait_notifications():
            s.snapshots = tuple(snaps)
            s.step = want
            layers = self.views.table(snaps[0], s.constants).layers if snaps else []
            s.layer_max = max(layers) if layers else 0
        self.refresh()
        if parity:
            self._kick_auto_parity()

    def _update_rows(self) -> None:
        s = self.state
        s.rows = tuple(step_rows(self.timeline, s.snapshots, s.engine, self._pending))

    def step_rows(self) -> list[dict]:
        """The fusion panel's rows as plain data (see :func:`workbench.ui.steps.step_rows`)."""
        return step_rows(self.timeline, self.state.snapshots, self.state.engine, self._pending)

    def default_step(self) -> int:
        return default_step(self.state.snapshots)

    def pair_indices(self) -> tuple[int, int]:
        """The indices of the snapshots before and after the selected step."""
        n = len(self.state.snapshots)
        i = self.state.step if 0 <= self.state.step < n else n - 1
        return max(0, i - 1), i

    def select_step(self, index: int) -> None:
        """Show the snapshot ``index`` (0 = the export) against the one before it."""
        s = self.state
        index = int(index)
        if 0 <= index < len(s.snapshots):
            self._chosen = step_name(s.snapshots[index].step)
            if self.timeline is not None:
                self.timeline.warm_first = (self._chosen,)  # read when the next warm-up starts
        with s.hold_trait_notifications():
            s.step, s.selected = index, None
        self.refresh()

    def select_row(self, name: str) -> None:
        """Select a step by name (a click on its row)."""
        names = [step_name(sn.step) for sn in self.state.snapshots]
        if name in names:
            self.select_step(names.index(name))

    def refresh(self, rows: bool = True) -> None:
        """Recompute what the panes show for the selected step (and the fusion rows)."""
        s = self.state
        if not s.snapshots:
            return
        t0 = time.perf_counter()
        if rows:
            self._update_rows()
        s.pair = self.views.pair(s.snapshots, self.pair_indices()[1], s, self.profiles)
        self.timings["refresh_s"] = time.perf_counter() - t0

    def set_view(self, view: str | None = None, layer: int | None = None, *, constants: bool | None = None,
                 overlay: bool | None = None, expand_all: bool | None = None) -> None:
        """Change what the panes show: "layer" (one encoder layer) or "model" (layers collapsed), and options."""
        s = self.state
        with s.hold_trait_notifications():
            if view is not None:
                s.view = view
            if layer is not None:
                s.layer = int(layer)
            if constants is not None:
                s.constants = bool(constants)
            if overlay is not None:
                s.overlay = bool(overlay)
            if expand_all is not None:
                s.expand_all = bool(expand_all)
        self.refresh(rows=False)

    def click(self, item: str, pane: str = "after") -> None:
        """What a click on a graph item does: expand or fold a collapsed layer, or select a node."""
        s = self.state
        if item.startswith("group:"):
            s.expanded = sorted(set(s.expanded) ^ {item[len("group:"):]})
        elif pane == "after":
            s.selected = None if s.selected == item else item
        else:
            return
        self.refresh(rows=False)

    def set_width(self, width_px: int) -> None:
        """Size the panes for an output area ``width_px`` wide (the width probe calls this)."""
        from .width import pane_sizes

        if width_px:
            self.state.pane_width = pane_sizes(width_px)[0]

    # ----------------------------------------------------------------- parity
    def check_parity(self, wait: bool | None = None) -> None:
        """Check every snapshot against the unfused export; badges turn green or red as results arrive.

        With ``background=False`` (or ``wait=True``) it returns when every badge is filled.
        """
        if self.timeline is None:
            self.say("load a model first", "error")
            return
        if wait if wait is not None else not self.background:
            try:
                self._parity_pass(None, report=True)
            except WorkbenchError as e:
                self.say(f"parity check failed: {e}", "error")
            return
        self.runner.kick("parity", lambda job: self._parity_pass(job, report=True))

    def _kick_auto_parity(self) -> None:
        if self.auto_parity and self.timeline is not None and not self.closed:
            self.runner.kick("parity", lambda job: self._parity_pass(job, report=False))

    def parity_order(self) -> list[int]:
        """Snapshots to check, most useful first: the selected step, the final model, then in order."""
        n = len(self.state.snapshots)
        first = [self.pair_indices()[1], n - 1]
        return [i for i in dict.fromkeys(first + list(range(1, n))) if 0 < i < n]

    def _parity_pass(self, job: Job | None, report: bool = False) -> bool:
        """Fill the parity of the current snapshots; False when they changed under it (a toggle)."""
        tl, snaps, gen = self.timeline, list(self.state.snapshots), self._gen
        if tl is None:
            return True
        texting = tl.text is not None

        def same_as_before(i: int) -> bool:  # the step changed nothing: its outputs are its predecessor's
            return i > 1 and getattr(snaps[i].diff, "empty", False)

        def done(sn) -> bool:
            return sn.parity is not None and (not texting or sn.task_parity is not None)

        def propagate() -> None:
            for i in range(2, len(snaps)):
                if not done(snaps[i]) and same_as_before(i) and done(snaps[i - 1]):
                    snaps[i].parity, snaps[i].task_parity = snaps[i - 1].parity, snaps[i - 1].task_parity

        todo = [i for i in self.parity_order() if not same_as_before(i)]
        todo += [i for i in range(1, len(snaps)) if i not in todo]  # whatever propagation cannot fill
        for i in todo:
            propagate()
            if not report:
                self._yield_to_toggles(job, gen)
            if self._gen != gen or self.closed or (job is not None and job.cancelled):
                return False  # a toggle or reload: start over on the new snapshots
            sn = snaps[i]
            if done(sn):
                continue
            if report:
                self.say(f"parity: checking {step_name(sn.step)} ({i} of {len(snaps) - 1})", "busy")
            if tl.snapshots and i < len(tl.snapshots) and tl.snapshots[i] is sn:
                tl.check_parity(i)
            else:
                sn.check_parity(reference=tl.reference())
            if self._gen == gen:
                self._update_rows()
        propagate()
        if self._gen != gen:
            return False
        self._update_rows()
        if report:
            bad = [step_name(sn.step) for sn in snaps[1:] if sn.parity is not None and not sn.parity.ok]
            self.say("parity: every step within atol 1e-4, rtol 1e-3" if not bad else
                     f"parity: {', '.join(bad)} differ from the unfused model beyond atol 1e-4",
                     "ok" if not bad else "error")
        return True

    def _toggle_first(self) -> bool:
        """Whether background parity should hold back: a toggle is running, or the warm-up has not yet
        computed the toggle of the step the user looks at (the click most likely to come next)."""
        if self._pending:
            return True
        tl = self.timeline
        return bool(tl is not None and tl.warming and self._chosen and not tl.toggle_ready(self._chosen))

    def _yield_to_toggles(self, job: Job | None, gen: int) -> None:
        """Wait (automatic parity only) while :meth:`_toggle_first`: parity on bert-base builds whole
        sessions, and a click that computes its plan beside it took 3 s instead of 1 s."""
        while (self._toggle_first() and self._gen == gen and not self.closed
               and not (job is not None and job.cancelled)):
            time.sleep(0.05)

    def wait_parity(self, timeout: float | None = 600) -> bool:
        """Wait for the background parity checks; True when every badge is filled."""
        self.runner.wait("parity", timeout)
        return all(sn.parity is not None for sn in self.state.snapshots[1:])

    # ----------------------------------------------------------------- session layer and Netron
    def show_session_layer(self, level: str = "all") -> None:
        """Show what ONNX Runtime's session adds on top of the selected snapshot (the second layer)."""
        if self.timeline is None or not self.state.snapshots:
            self.say("load a model first", "error")
            return
        i = self.pair_indices()[1]

        def work(job: Job) -> None:
            snaps = self.state.snapshots
            job.progress(f"asking ONNX Runtime what its session ({level}) does to this snapshot")
            extra = self.timeline.session_layer(i, level)
            self.session_layer = extra
            added = ", ".join(f"{op} {n}" for op, n in sorted(extra["added_ops"].items())) or "nothing new"
            kept = f"; kept off as the plan says: {', '.join(extra['kept_off'])}" if extra.get("kept_off") else ""
            self.state.session_line = (f"ORT session ({level}) on top of {step_name(snaps[i].step)}: "
                                       f"{snaps[i].nodes} → {extra['nodes']} nodes; adds {added}{kept}")
            self.say("session layer shown", "ok")

        self.runner.start("session layer", work)

    def open_netron(self) -> None:
        """Serve the selected snapshot in Netron (private copy, 127.0.0.1) and embed it."""
        if not self.state.snapshots:
            self.say("load a model first", "error")
            return

        def work(job: Job) -> None:
            from ..viz.netron import NetronViewer

            self.close_netron()
            snap = self.state.snapshots[self.pair_indices()[1]]
            job.progress("starting Netron")
            self._netron = NetronViewer(snap.model, name=f"{step_name(snap.step)}.onnx").start()
            self.state.netron_html = self._netron.iframe_html(os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/"))
            self.say(f"Netron is serving {step_name(snap.step)} on {self._netron.url}", "ok")

        self.runner.start("netron", work)

    def close_netron(self) -> None:
        if self._netron is not None:
            self._netron.close()
            self._netron = None
            self.state.netron_html = ""

    # ----------------------------------------------------------------- closing
    def stop_threads(self, timeout: float = 10) -> None:
        """Stop the background parity checks and the toggle warm-up, waiting up to ``timeout`` seconds."""
        self.closed = True
        deadline = time.monotonic() + timeout
        if self.timeline is not None:
            self.timeline.stop_warming(wait=False)
        self.runner.close(max(0.0, deadline - time.monotonic()))
        if self.timeline is not None:
            self.timeline.wait_warm(max(0.0, deadline - time.monotonic()))

    def close(self) -> None:
        """Stop Netron, any running measurement and the background work."""
        self.closed = True
        self.close_netron()
        if self.timeline is not None:
            self.timeline.stop_warming(wait=False)
        if self._bench is not None and not self._bench.done:
            try:
                self._bench.kill()
            except Exception:
                pass
        self.runner.closed = True


__all__ = ["Controller"]
