"""The app's controller: the fusion steps and the views, and the feature objects that do the rest.

The controller toggles and selects steps and writes what the graph panes show (``snapshots``, ``step``,
``rows``, ``pair``, the view settings), the settings a user changes (``configure``), the status line and the
jobs' states into the :class:`~workbench.ui.state.AppState`. Everything else is a feature
object beside it over the same state, each the only writer of its part: ``loading`` (export and fuse),
``auto_engine`` (the engine lines, auto's comparison, the warm-up line), ``parity`` (the rows' badges),
``graph_tools`` (session layer, Netron), ``measuring`` (benchmark, GPU column, operator profile), ``tuning``,
``sweep``, ``text_answers``, ``report`` and ``rules``. Every piece of background work goes through the
:class:`~workbench.ui.jobs.JobRunner`. It never imports ipywidgets: panels observe the state.

A wrong argument raises at the call (:mod:`workbench.ui.arguments`) and changes nothing. ``state.error`` is the
last error of work the user asked for: it clears when new work starts (any job of ``_USER_JOBS``), and a refusal
that only says other work is in the way (:meth:`Controller.refuse`, "a benchmark is already running") clears
when that work ends.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ..errors import WorkbenchError
from ..fusion import BY_NAME
from ..ort.session import cuda_status
from . import arguments as check
from .loading.engine import AutoEngine
from .graph.tools import GraphTools
from .jobs import Job, JobRunner
from .steps.live_rules import LiveRules
from .loading.feature import ModelLoading
from .measuring.feature import Measuring
from .steps.parity import ParityChecks
from .report.feature import Reporting
from .state import VIEWS, AppState, JobStatus, Status
from .steps.rows import default_step, step_near, step_rows
from .sweep.feature import Sweep
from .text.feature import TextAnswers
from .measuring.tuning import Tuning
from .graph.views import GraphViews, step_name

#: Jobs whose start clears the last error (background upkeep does not).
_USER_JOBS = {"load", "toggle", "session layer", "netron", "benchmark", "profile", "ablation", "tune", "answers", "sweep"}


class Controller:
    """The app's steps and views, and its feature objects (each the only writer of its part of ``state``).

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
        #: Runs the timeline's work (a toggle first, the warm-up and auto's comparison behind it).
        self.scheduler = None
        self.text = None  # TextBatches once the user gave sentences
        self.timings: dict[str, float] = {}
        self._pending: dict[str, bool] = {}  # toggles clicked whose run has not finished
        self._clicks, self._last_click = 0, {}  # the latest click per step (its pending state stays until that one ran)
        self._chosen: str | None = None  # the step the user looks at, by name
        self._gen = 0  # bumped whenever the snapshots change: parity results for older ones are dropped
        self.closed = False
        self._refusal: tuple[str, str] | None = None  # (error text, the lane whose work it waits for)
        #: The live rules feature (``app.add_rule``): rules written in a notebook cell, under a time limit.
        self.rules = LiveRules(self)
        #: What else shows the selected snapshot: ONNX Runtime's session layer on top of it, Netron.
        self.graph_tools = GraphTools(self)
        #: Each snapshot checked against the unfused export (the rows' badges), in the background.
        self.parity = ParityChecks(self)
        #: Export (or reuse the export) and run the fusion timeline: the "load" job.
        self.loading = ModelLoading(self)
        #: Which engine runs and why (auto's comparison in the background), and the warm-up line.
        self.auto_engine = AutoEngine(self)
        #: The benchmark, its GPU column and the operator profiles, in the measure lane.
        self.measuring = Measuring(self)
        #: The report feature: everything on screen as plain data (``report_data``) and the HTML file.
        self.report = Reporting(self)
        #: What each fusion buys here (``ablate``) and ``workbench tune`` (``tune``), in the measure lane.
        self.tuning = Tuning(self)
        #: A fleet sweep from the sweep panel (``run_sweep``, ``stop_sweep``), in the measure lane.
        self.sweep = Sweep(self)
        #: Answers checked on real sentences (``use_text``), per step and for int8 / fp16, in the measure lane.
        self.text_answers = TextAnswers(self)

    # ----------------------------------------------------------------- status
    def say(self, text: str, kind: str = "info") -> None:
        """Set the status line (an error also becomes ``state.error``)."""
        if kind == "error":
            self.state.error = text
        self.state.status = Status(text, kind)

    def refuse(self, text: str, lane: str) -> None:
        """Say that an action was refused because work in ``lane`` is in the way; the error clears when a job of
        that lane ends (the state it describes is gone), unless another error replaced it."""
        self.say(text, "error")
        self._refusal = (text, lane)

    def _on_job(self, name: str, st: JobStatus) -> None:
        s, refusal = self.state, self._refusal
        in_the_way = bool(refusal) and self.runner.lane_of(name) == refusal[1]  # this job's lane caused the refusal
        if st.state == "running" and not st.stage and name in _USER_JOBS and not (in_the_way and s.error == refusal[0]):
            s.error = None
        if in_the_way and not st.running:
            if s.error == refusal[0]:
                s.error = None
            self._refusal = None
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
                if cuda_status()[0]:
                    self.state.providers = ("cpu", "cuda")
        except Exception:  # no onnxruntime CUDA build: CPU only
            pass

    # ----------------------------------------------------------------- load
    def load(self) -> None:
        """Export (or reuse the cached export) and run the fusion timeline."""
        self.runner.start("load", self.loading.run)

    def adopt(self, tl, sch, snaps, *, fusion_s: float = 0.0) -> None:
        """Show a new timeline's snapshots (what :class:`~workbench.ui.loading.feature.ModelLoading` ran), then start its
        warm-up, the parity checks and the warm-up line."""
        self.timeline, self.scheduler = tl, sch
        self.measuring.snapshots_changed(snaps, new_model=True)
        self.show_snapshots(snaps, parity=False)
        self.timings["fusion_s"] = fusion_s
        # Precompute each single toggle in the background, at low priority: a click is then a lookup.
        # The selected step's own toggle first: the checkbox a user looking at it clicks first.
        sch.warm_first = (self._chosen,) if self._chosen else ()
        sch.start_warming()
        self.parity.kick_auto()  # after the warm-up started: parity holds back until that toggle is ready
        self.auto_engine.follow_warm_up()

    # ----------------------------------------------------------------- toggles and steps
    @property
    def loaded(self) -> bool:
        """Whether a model was exported (a load finished or is in flight with its export done)."""
        return self.export_result is not None

    @property
    def generation(self) -> int:
        """Bumped whenever the snapshots change: work on older ones is dropped."""
        return self._gen

    def bump_generation(self) -> None:
        """The snapshots' results are stale (new text): parity and work on the older ones are dropped."""
        self._gen += 1

    @property
    def clicks_in_flight(self) -> bool:
        """Whether a toggle the user clicked has not run yet."""
        return bool(self._pending)

    @property
    def looking_at(self) -> str | None:
        """The step the user looks at, by name (kept when a toggle shifts the snapshots)."""
        return self._chosen

    def look_at(self, name: str | None) -> None:
        """Select step ``name`` once the snapshots (re)load (None: the default step)."""
        self._chosen = name

    def toggle(self, name: str, on: bool) -> None:
        """Switch catalog step ``name`` on or off and re-run the timeline (a lookup once warmed).
        A name not in the catalog, or ``on`` not True or False, raises (nothing changes)."""
        s = self.state
        check.choice("name", name, list(BY_NAME))
        check.flag("on", on)
        s.set_step_enabled(name, on)
        if self.timeline is None:
            return
        self._pending[name] = on
        self._clicks += 1
        click = self._last_click[name] = self._clicks
        self.update_rows()  # the checkbox and the row's look follow the click at once

        def work(job: Job) -> None:
            t0 = time.perf_counter()
            if not self.scheduler.toggle_ready(name):  # a lookup says nothing until it is done
                self.say(f"{'enabling' if on else 'disabling'} {name}", "busy")
            try:
                snaps = self.scheduler.toggle(name, on)
            finally:
                if self._last_click.get(name) == click:  # a later click of this step still waits its turn
                    self._pending.pop(name, None)
            self.show_snapshots(snaps)
            self.timings["toggle_s"] = time.perf_counter() - t0
            self.say(f"{name} {'on' if on else 'off'}: {s.snapshots[-1].nodes} nodes after fusion "
                     f"({self.timings['toggle_s']:.2f} s)", "ok")

        self.runner.start("toggle", work)

    def show_snapshots(self, snaps, parity: bool = True) -> None:
        """Show a run's snapshots (a toggle, a switch of engine, a load): the step the user looks at stays
        selected; the measuring feature keeps the profiles of the snapshots still shown; with ``parity``,
        the parity checks start again in the background."""
        s = self.state
        snaps = list(snaps)
        self.measuring.snapshots_changed(snaps)
        self._gen += 1
        names = [step_name(sn.step) for sn in snaps]
        want = step_near(snaps, self.timeline.steps() if self.timeline else [], self._chosen)
        if self._chosen is None and snaps:
            self._chosen = names[want]  # remembered, so switching this step off and on comes back to it
        # One batch: the panels see the new snapshots, step, rows and pair together, so the slider and
        # the rows are drawn once with what is now true (not once with stale rows and again).
        with s.hold_trait_notifications():
            s.snapshots = tuple(snaps)
            s.step = want
            layers = self.views.table(snaps[0], s.constants).layers if snaps else []
            s.layer_max = max(layers) if layers else 0
            self.refresh()
        if parity:
            self.parity.kick_auto()

    def update_rows(self) -> None:
        """Recompute the fusion panel's rows from the snapshots and the clicks in flight."""
        s = self.state
        s.rows = tuple(step_rows(self.timeline, s.snapshots, s.engine, self._pending, s.plans))

    def step_rows(self) -> list[dict]:
        """The fusion panel's rows as plain data (see :func:`workbench.ui.steps.rows.step_rows`)."""
        return step_rows(self.timeline, self.state.snapshots, self.state.engine, self._pending, self.state.plans)

    def default_step(self) -> int:
        return default_step(self.state.snapshots)

    def pair_indices(self) -> tuple[int, int]:
        """The indices of the snapshots before and after the selected step."""
        n = len(self.state.snapshots)
        i = self.state.step if 0 <= self.state.step < n else n - 1
        return max(0, i - 1), i

    def select_step(self, index: int) -> None:
        """Show the snapshot ``index`` (0 = the export) against the one before it (another index raises)."""
        s = self.state
        index = check.whole("index", index, 0, len(s.snapshots) - 1, note=self._snapshots_note())
        self._chosen = step_name(s.snapshots[index].step)
        if self.scheduler is not None:
            self.scheduler.warm_first = (self._chosen,)  # read when the next warm-up starts
        with s.hold_trait_notifications():
            s.step, s.selected = index, None
        self.refresh()

    def _snapshots_note(self) -> str:
        """What the range of a snapshot index is, for a refusal: how many are shown, and whether a load runs."""
        n = len(self.state.snapshots)
        loading = "; a load is running: app.wait() first" if self.state.busy("load", "toggle") else ""
        return f" (0 is the export; {n} snapshot{'' if n == 1 else 's'} shown{loading})"

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
            self.update_rows()
        s.pair = self.views.pair(s.snapshots, self.pair_indices()[1], s, self.measuring.profiles)
        self.timings["refresh_s"] = time.perf_counter() - t0

    def set_view(self, view: str | None = None, layer: int | None = None, *, constants: bool | None = None,
                 overlay: bool | None = None, expand_all: bool | None = None) -> None:
        """Change what the panes show: "layer" (one encoder layer) or "model" (layers collapsed), and options
        (a view that is neither, a layer the model lacks, an option not True or False: raises)."""
        s = self.state
        if view is not None:
            check.choice("view", view, VIEWS)
        if layer is not None:
            check.whole("layer", layer, 0, s.layer_max, note=" (the model's encoder layers)")
        for key, v in (("constants", constants), ("overlay", overlay), ("expand_all", expand_all)):
            check.optional_flag(key, v)
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
        """What a click on a graph item does: expand or fold a collapsed layer, or select a node. ``item`` must be
        drawn in ``pane`` ("before" or "after"), or be a layer opened before ("group:layer 1"), else it raises."""
        s = self.state
        check.choice("pane", pane, ("before", "after"))
        drawn = list(getattr(s.pair, pane).layout.ids) if s.pair is not None else []
        check.choice("item", item, drawn + [f"group:{g}" for g in s.expanded],
                     what=f"the id of a node or group drawn in the {pane} pane" + ("" if drawn else " (none yet)"))
        if item.startswith("group:"):
            s.expanded = sorted(set(s.expanded) ^ {item[len("group:"):]})
        elif pane == "after":
            s.selected = None if s.selected == item else item
        else:
            return
        self.refresh(rows=False)

    def set_width(self, width_px: int) -> None:
        """Size the panes for an output area ``width_px`` wide (the width probe calls this)."""

        from .width import pane_sizes  # (ipywidgets: the controller never imports it at its head)

        if width_px:
            self.state.pane_width = pane_sizes(width_px)[0]

    # ----------------------------------------------------------------- closing
    def stop_warming(self) -> None:
        """Stop the toggle warm-up (until the next load)."""
        if self.scheduler is not None:
            self.scheduler.stop_warming(wait=False)

    def stop_threads(self, timeout: float = 10) -> None:
        """Stop the background parity checks and the toggle warm-up, waiting up to ``timeout`` seconds."""
        self.closed = True
        deadline = time.monotonic() + timeout
        if self.scheduler is not None:
            self.scheduler.stop_warming(wait=False)
        self.runner.close(max(0.0, deadline - time.monotonic()))
        if self.scheduler is not None:
            self.scheduler.wait_warm(max(0.0, deadline - time.monotonic()))

    def close(self) -> None:
        """Stop Netron, any running measurement and the background work."""
        self.closed = True
        self.graph_tools.close_netron()
        if self.scheduler is not None:
            self.scheduler.stop_warming(wait=False)
        self.measuring.close()
        self.runner.closed = True


__all__ = ["Controller"]
