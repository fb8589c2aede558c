"""The notebook app: ``Workbench("bert-base")`` shows it.

``Workbench`` only assembles: one :class:`~workbench.ui.state.AppState` (what the user chose and
what was computed), one :class:`~workbench.ui.controller.Controller` (every action, the only writer
of the state, all background work through its job runner), and the panels that observe the state
(model bar, fusion steps, view bar and the two graph panes linked by :mod:`workbench.ui.link`,
Netron, profile, answers on real text, fleet sweep, report). Its methods are the app's public API
and hand over to the controller. A wrong argument raises at the call, in one line naming it
(:mod:`workbench.ui.arguments`: a ``ConfigError``, also a ``ValueError``, or a ``ConfigTypeError``, also a
``TypeError``) and changes nothing; what fails later, in background work, is ``app.error``.
"""

from __future__ import annotations

import atexit
import os
import weakref
from pathlib import Path
from typing import Any

from ..config import ATTENTIONS, ENGINES, EXPORTERS, OPSETS
from ..errors import ModelSourceError
from ..models import PRESETS
from . import arguments as check
from . import compat
from .controller import Controller
from .link import link_panes
from .steps.panel import FusionPanel
from .graph.panel import GraphPane, ViewBar
from .loading.panel import ModelBar
from .graph.netron_panel import NetronPanel
from .measuring.panel import ProfilePanel
from .report.panel import ReportPanel
from .sweep.panel import SweepPanel
from .text.panel import TextPanel
from .state import AppState
from .styles import CSS

#: Default pixel width of each graph pane; the width probe resizes them to the space the app gets.
GRAPH_WIDTH = 520

#: Where the app is shown: in the cell's output, or in JupyterLab's right-hand area.
PANELS = ("inline", "side")

#: Apps alive in this process: their background work is stopped before the interpreter exits.
_LIVE: "weakref.WeakSet[Workbench]" = weakref.WeakSet()


@atexit.register
def _stop_all_threads() -> None:
    # A daemon thread still inside an ONNX Runtime call when the kernel exits aborts the process
    # ("terminate called without an active exception"); give each a moment to leave it.
    for app in list(_LIVE):
        try:
            app._stop_threads(timeout=10)
        except Exception:
            pass


class Workbench:
    """The BERT Fusion Workbench app for one model.

    Args:
        source: preset name (``bert-base``, ``bert-tiny``, ``minilm``, ...), a local model folder, a hub
            id, or an ``.onnx`` file.
        exporter, opset, attention: export settings (see :class:`~workbench.config.ExportConfig`).
        engine: fusion engine, "ort", "onnxscript" or "auto".
        autorun: export and run the fusion timeline at once (in the background).
        background: run long work in background jobs (False: in the caller's thread, for scripts and tests).
        auto_parity: after every run, check each snapshot against the export in a low-priority job and
            turn its badge green or red (default: with ``background``).
        panel: "inline" (the cell's output) or "side" (JupyterLab's right-hand area, with ``sidecar``).
        **state: any other setting of :class:`~workbench.ui.state.AppState` (``seq``, ``runs``, ``view``...).

    Raises:
        ConfigError, ConfigTypeError: an argument of the wrong type or out of range (a model that cannot be
            found or exported is ``app.error``: that is found out in the background).
    """

    def __init__(self, source: str | os.PathLike = "bert-base", *, exporter: str = "torchscript",
                 opset: int | None = None, attention: str = "eager", engine: str = "auto",
                 autorun: bool = True, background: bool = True, auto_parity: bool | None = None,
                 panel: str = "inline", **state: Any):
        check.text("source", os.fspath(source) if isinstance(source, os.PathLike) else source)
        check.choice("panel", panel, PANELS)
        for name, value in (("autorun", autorun), ("background", background)):
            check.flag(name, value)
        check.optional_flag("auto_parity", auto_parity)
        self.state = AppState(source=os.fspath(source), exporter=exporter, opset=opset, attention=attention,
                              engine=engine, **state)
        self.state.check_settings()
        self.controller = Controller(self.state, background=background, auto_parity=auto_parity)
        self.panel = "inline"
        self._sidecar = None
        self.widget = None
        self._env_problems = compat.problems()
        _LIVE.add(self)
        if not self._env_problems:
            self._build()
            if panel == "side":
                self.open_side_panel()
        if autorun:
            self.load()

    @classmethod
    def from_onnx(cls, path: str | os.PathLike, **kw) -> "Workbench":
        """The app for an existing ``.onnx`` file (nothing is exported)."""
        p = check.path("path", path)
        if not p.is_file():
            raise ModelSourceError(f"{p} is not a file")
        return cls(str(p), **kw)

    def _build(self) -> None:
        compat.defer_slow_imports()
        import ipywidgets as W

        # Lazy: ``width`` imports ipywidgets at its head, and this module must import (and show compat's line)
        # where ipywidgets is missing or mismatched.
        from .width import WidthProbe

        s, c, L = self.state, self.controller, W.Layout
        c.probe_providers()
        self.model_bar = ModelBar(s, c, css=CSS, on_side=self.open_side_panel,
                                  choices={"presets": PRESETS, "exporters": EXPORTERS, "opsets": OPSETS,
                                           "attentions": ATTENTIONS, "engines": ENGINES})
        self.fusion = FusionPanel(s, c)
        self.view_bar = ViewBar(s, c)
        self.before, self.after = GraphPane(s, c, "before"), GraphPane(s, c, "after")
        link_panes(self.before, self.after, c)
        self.netron = NetronPanel(s, c)
        self.report = ReportPanel(s, c)
        self.profile_panel = ProfilePanel(s, c, extra=[self.report.widget])
        self.text_panel = TextPanel(s, c)
        self.sweep_panel = SweepPanel(s, c)
        # The space the panes really get, measured in the browser: side by side from 800 px, figures
        # resized to fit whenever the window or JupyterLab's side bar changes it.
        self.w_width = WidthProbe()
        self.w_width.observe(lambda ch: c.set_width(ch["new"]), "width")
        graphs = W.VBox([
            self.w_width,
            W.HTML("<div class='wb-section'>Graph: before and after the selected step "
                   "<span style='font-weight:normal;font-size:11px'>(red rings: nodes the step replaced, and what it "
                   "emitted; click a node on the right to see what it replaced)</span></div>"),
            W.HBox([self.view_bar.widget, self.netron.button], layout=L(flex_flow="row wrap")),
            W.HBox([self.before.widget, self.after.widget], layout=L(flex_flow="row wrap")),
            self.netron.widget], layout=L(width="100%"))
        graphs.add_class("wb-graph-panel")
        more = W.Accordion(children=[self.text_panel.widget, self.sweep_panel.widget],
                           titles=("Answers on real text", "Fleet sweep"), selected_index=None)
        self.widget = W.VBox([self.model_bar.widget, self.fusion.widget, graphs, self.profile_panel.widget, more])
        self.widget.add_class("wb-app")

    # ----------------------------------------------------------------- display
    def open_side_panel(self) -> None:
        """Show the app in JupyterLab's right-hand area (the ``sidecar`` package), so the notebook scrolls
        while the app stays in view. The cell that made the app then shows a one-line note."""
        from sidecar import Sidecar

        if self.widget is None:
            return
        if self._sidecar is None:
            self._sidecar = Sidecar(title="BERT Fusion Workbench", anchor="split-right")
            self._sidecar.append_display_data(self.widget)
        self.panel = "side"
        self.model_bar.w_side.disabled = True

    def close_side_panel(self) -> None:
        """Close the side panel (show the app inline again by displaying ``app`` in a cell)."""
        if self._sidecar is not None:
            self._sidecar.close()
            self._sidecar = None
        self.panel = "inline"
        if self.widget is not None:
            self.model_bar.w_side.disabled = False

    def _repr_mimebundle_(self, include=None, exclude=None):
        if self._env_problems:
            msg = "; ".join(self._env_problems)
            return {"text/html": compat.error_html(msg), "text/plain": f"BERT Fusion Workbench: {msg}"}
        if self.panel == "side":
            note = "BERT Fusion Workbench is open in the side panel (app.close_side_panel() brings it back here)."
            return {"text/html": f"<div class='wb-side-note'>{note}</div>", "text/plain": note}
        bundle = self.widget._repr_mimebundle_(include=include, exclude=exclude)
        bundle["text/plain"] = ("BERT Fusion Workbench app. If you are reading this text instead of the app, "
                                "this front-end cannot draw Jupyter widgets: install jupyterlab_widgets "
                                "(matching ipywidgets 8: `pip install \"jupyterlab_widgets>=3,<4\"`) and reload.")
        return bundle

    # ----------------------------------------------------------------- what the app computed
    @property
    def snapshots(self) -> list:
        return list(self.state.snapshots)

    @property
    def background(self) -> bool:
        """Whether work runs in background jobs (settable: scripts switch it for one action)."""
        return self.controller.runner.background

    @background.setter
    def background(self, on: bool) -> None:
        self.controller.background = self.controller.runner.background = check.flag("background", on)

    timeline = property(lambda self: self.controller.timeline)
    export_result = property(lambda self: self.controller.export_result)
    profiles = property(lambda self: self.controller.measuring.profiles)
    timings = property(lambda self: self.controller.timings)
    session_layer = property(lambda self: self.controller.graph_tools.session_layer)
    bench_result = property(lambda self: self.state.bench_result)
    ablation = property(lambda self: self.state.ablation)
    series = property(lambda self: {k: list(v) for k, v in self.state.series.items()})
    error = property(lambda self: self.state.error)
    engine_summary = property(lambda self: self.state.engine_line)
    engine_note = property(lambda self: self.state.engine_note)
    _trace = property(lambda self: self.controller.last_trace)

    # ----------------------------------------------------------------- actions (the controller's)
    def load(self) -> None:
        """Export (or reuse the cached export) and run the fusion timeline."""
        if self.widget is not None:
            mb = self.model_bar
            self.controller.configure(source=mb.w_source.value.strip() or self.state.source)
        self.controller.load()

    def wait(self, timeout: float | None = 600) -> "Workbench":
        """Block until the current export / fusion work is done (for scripts and tests)."""
        self.controller.wait(check.seconds("timeout", timeout, optional=True))
        return self

    def stop_warming(self) -> None:
        """Stop precomputing toggles in the background until the next load (before timing anything: the
        warm-up would share the cores with the measurement)."""
        self.controller.stop_warming()

    def toggle(self, name: str, on: bool) -> None:
        """Switch catalog step ``name`` on or off and re-run the timeline."""
        self.controller.toggle(name, on)

    def select_step(self, index: int) -> None:
        """Show the snapshot ``index`` (0 = the export) against the one before it."""
        self.controller.select_step(index)

    def add_rule(self, rule) -> None:
        """Add your own fusion rule (a :class:`workbench.fusion.Rule`) and see it as a new step with its
        checkbox: graph before and after, parity, its reasons where it does not match (notebook 06)."""
        self.controller.rules.add_rule(rule)

    def remove_rule(self, name: str) -> None:
        """Take a rule added with :meth:`add_rule` out again."""
        self.controller.rules.remove_rule(name)

    @property
    def rule_time_limit_s(self) -> float:
        """Seconds a rule's ``match`` and ``rewrite`` (one pass over the graph) may take; after that its step
        is marked failed with the reason, and the app and the other steps go on. Set it to change it."""
        return self.controller.rules.rule_time_limit_s

    @rule_time_limit_s.setter
    def rule_time_limit_s(self, seconds: float) -> None:
        self.controller.rules.rule_time_limit_s = seconds

    def set_view(self, view: str, layer: int | None = None) -> None:
        """"layer" (one encoder layer) or "model" (whole model, layers collapsed)."""
        self.controller.set_view(view, layer)

    def click(self, item: str, pane: str = "after") -> None:
        """What a click on a graph item does: expand a collapsed layer, or select a node."""
        self.controller.click(item, pane)

    def refresh(self) -> None:
        self.controller.refresh()

    def step_rows(self) -> list[dict]:
        return self.controller.step_rows()

    def default_step(self) -> int:
        return self.controller.default_step()

    def warm_text(self) -> str:
        """One line on the background precomputation of single toggles (what a click will cost)."""
        return self.controller.auto_engine.warm_text()

    def check_parity(self, wait: bool | None = None) -> None:
        self.controller.parity.check(wait)

    def wait_parity(self, timeout: float | None = 600) -> bool:
        return self.controller.parity.wait(check.seconds("timeout", timeout, optional=True))

    def show_session_layer(self, level: str = "all") -> None:
        self.controller.graph_tools.show_session_layer(level)

    def open_netron(self) -> None:
        self.controller.graph_tools.open_netron()

    def close_netron(self) -> None:
        self.controller.graph_tools.close_netron()

    def variants(self, names: list[str] | None = None) -> list:
        """The benchmark's variants for the chosen snapshots (default: unfused and fused)."""
        return self.controller.measuring.variants(names)

    def run_benchmark(self, names: list[str] | None = None) -> None:
        """Time the chosen variants in the worker process; the plots grow while it runs."""
        self.controller.measuring.run_benchmark(names)

    def stop_benchmark(self) -> None:
        self.controller.measuring.stop_benchmark()

    def wait_benchmark(self, timeout: float | None = 600) -> "Workbench":
        """Block until the running benchmark, profile, ablation, answers check or sweep is done."""
        self.controller.measuring.wait(check.seconds("timeout", timeout, optional=True))
        return self

    def profile(self, indices: list[int] | None = None) -> None:
        """Profile operators of the before/after snapshots: op breakdown and latency overlay."""
        self.controller.measuring.profile(indices)

    def ablate(self, steps: list[str] | None = None) -> None:
        """What each fusion buys here: the plan without each fired step, timed against the full plan."""
        self.controller.tuning.ablate(steps)

    def tune(self, out: str | os.PathLike | None = None) -> None:
        """The fastest variant whose answers hold on this machine, measured against PyTorch eager,
        torch.compile and OpenVINO in one worker (``workbench tune``); with ``out`` it is saved there
        (model.onnx, tokenizer, README.md model card). The result lands in :attr:`tune_result`."""
        self.controller.tuning.tune(out)

    tune_result = property(lambda self: self.state.tune)

    def use_text(self, sentences: list[str] | str | None = None, *, precisions: tuple[str, ...] | None = None) -> None:
        """Check answers on real sentences (a list, text with one per line, None: the built-in set; at least three
        different ones): per step, and for ``precisions`` (None: int8 and fp16)."""
        self.controller.text_answers.use_text(sentences, precisions=precisions)

    def run_sweep(self, spec: dict | str | os.PathLike, executor: str = "local", *, address: str | None = None,
                  out: str | os.PathLike | None = None) -> None:
        """Run a fleet sweep (see ``workbench sweep``: a dict, a YAML file or YAML text); its table fills the
        sweep panel."""
        self.controller.sweep.run_sweep(spec, executor, address=address, out=out)

    def report_data(self) -> dict:
        return self.controller.report.report_data()

    def save_report(self, path: str | os.PathLike | None = None) -> Path:
        """Write the HTML report (default: ``workbench-report-<time>.html`` in the current folder); a path that
        exists or cannot be written raises."""
        return self.controller.report.save_report(path)

    # ----------------------------------------------------------------- closing
    def _stop_threads(self, timeout: float = 10) -> None:
        """Stop the background parity checks and toggle warm-up, waiting up to ``timeout`` seconds."""
        self.controller.stop_threads(timeout)

    def close(self) -> None:
        """Stop Netron and any running measurement, and close the widgets."""
        self.controller.close()
        self.close_side_panel()
        if self.widget is not None:
            self.widget.close()

    def __del__(self):
        try:
            self.controller.graph_tools.close_netron()
        except Exception:
            pass

