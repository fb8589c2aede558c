"""The notebook app: ``Workbench("bert-base")`` shows it.

Widgets only: the app holds a :class:`~workbench.ui.state.UIState`, calls the
package's functions (export, fusion timeline, benchmark worker, profiler) and
draws what they return with :mod:`workbench.viz`. Export and fusion run in a
thread; benchmarks and profiles run in the runtime's worker process; figures
are updated in place inside ``batch_update()`` / ``hold_sync()``. Every
expected error is shown in the app's status line, never as a traceback.
"""

from __future__ import annotations

import atexit
import dataclasses
import html
import weakref
from collections import OrderedDict
import os
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable

from ..config import ATTENTIONS, ENGINES, EXPORTERS, OPSETS
from ..errors import ConfigError, WorkbenchError
from ..viz.labels import variant_label
from . import compat
from .state import UIState

#: Ops a fusion emits (what the "fused here" column names).
_FUSED = {"Attention", "MultiHeadAttention", "SkipLayerNormalization", "LayerNormalization", "BiasGelu", "Gelu",
          "FastGelu", "EmbedLayerNormalization", "SkipSimplifiedLayerNormalization", "SimplifiedLayerNormalization",
          "GemmFastGelu", "FusedMatMul", "BiasAdd", "BiasSplitGelu", "QuickGelu", "RotaryEmbedding",
          "GroupQueryAttention", "SDPA"}

#: Default pixel width of each graph pane: two side by side fit JupyterLab's notebook column at
#: 1280 px and wider; narrower, the second pane wraps below the first instead of overflowing.
GRAPH_WIDTH = 520

#: What each engine is called in the model bar.
ENGINE_TITLES = {"ort": "ORT transformers optimizer", "onnxscript": "onnxscript rules"}

#: Where the app is shown: in the cell's output, or in JupyterLab's right-hand area.
PANELS = ("inline", "side")

_CSS = """
<style>
.wb-app{font-family:var(--jp-ui-font-family,sans-serif)}
.wb-title{font-size:16px;font-weight:600}
.wb-status{font-size:12px;min-height:20px}
.wb-table table{border-collapse:collapse;font-size:12px}
.wb-table td,.wb-table th{border:1px solid #ddd;padding:1px 6px;text-align:right}
.wb-table th{background:#f3f3f3}.wb-table td:first-child,.wb-table th:first-child{text-align:left}
.wb-up{color:#1a7f37;font-weight:600}.wb-down{color:#cf222e;font-weight:600}
.wb-badge{display:inline-block;border-radius:8px;padding:0 6px;margin:1px;font-size:11px;color:white}
.wb-ok{background:#1a7f37}.wb-bad{background:#cf222e}.wb-none{background:#999}
.wb-timeline td,.wb-timeline th{padding:0 5px!important;line-height:1.5}
.wb-timeline td:nth-child(2),.wb-timeline th:nth-child(2),.wb-timeline td:nth-child(4){text-align:left!important}
.wb-sub{font-size:11px;color:#666;margin-top:4px;text-transform:uppercase;letter-spacing:.04em}
.wb-section{font-weight:600;font-size:13px;margin-top:6px;border-bottom:1px solid #ddd}
.wb-engine-note{font-size:12px;color:#444}
.wb-rows{border:1px solid #e3e3e3;border-radius:4px;padding:2px 0;max-height:480px;overflow-y:auto}
.wb-rows .widget-html,.wb-rows .widget-checkbox,.wb-rows .widget-button{min-height:0!important;height:auto!important;margin:0!important}
.wb-rows .widget-html-content{line-height:18px}
.wb-row{align-items:flex-start;padding:1px 4px;border-bottom:1px solid #f2f2f2}
.wb-row:hover{background:#f7f9fc}
.wb-row.wb-row-sel{background:#e8f0fe}
.wb-row.wb-row-sel .wb-row-name{font-weight:600}
.wb-row .widget-checkbox input{margin:3px 0 0 0}
button.wb-row-name{background:transparent!important;box-shadow:none!important;border:none!important;
  text-align:left!important;justify-content:flex-start!important;padding:0 4px!important;height:20px!important;
  line-height:20px!important;font-size:12px!important;color:#1f2328}
button.wb-row-name:hover{text-decoration:underline}
.wb-row.wb-row-off button.wb-row-name{color:#8c959f;text-decoration:line-through}
.wb-cells{display:flex;font-size:12px;gap:6px}
.wb-cells .wb-n{width:44px;text-align:right;color:#333}
.wb-cells .wb-h{width:150px;color:#1a7f37;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
.wb-cells .wb-p{width:56px}
.wb-why{font-size:11px;color:#9a6700;line-height:14px;white-space:normal;max-width:520px;display:-webkit-box;
  -webkit-line-clamp:2;-webkit-box-orient:vertical;overflow:hidden}
.wb-head{font-size:11px;color:#666;display:flex;gap:6px;padding:0 4px}
</style>
"""


def _step_name(step) -> str:
    return str(getattr(step, "name", step) or "export")


#: Apps alive in this process: their background threads are stopped before the interpreter exits.
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


def engine_summary(asked: str, used: str, fused: dict[str, dict[str, int]]) -> str:
    """The model bar's line on the engine: which one runs, and under auto, why.

    Args:
        asked: the engine the user picked ("auto", "ort", "onnxscript").
        used: the engine whose snapshots are shown.
        fused: engine → its final fused-op counts (both engines under auto).
    """
    if not used:
        return ""

    def attn(e: str) -> int:
        f = fused.get(e, {})
        return int(f.get("Attention", 0)) + int(f.get("MultiHeadAttention", 0))

    title = ENGINE_TITLES.get(used, used)
    if asked != "auto":
        return f"engine: {title} (fuses {attn(used)} Attention)"
    others = "; ".join(f"{ENGINE_TITLES.get(e, e).split()[0]} fuses {attn(e)}" for e in fused if e != used)
    return (f"auto → {title} (fuses {attn(used)} Attention" + (f"; {others}" if others else "") + ")"
            ", kept for toggles")


def _lower_priority() -> None:
    """The calling thread at the lowest CPU priority (Linux nices threads one by one)."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except (AttributeError, OSError):
        pass


def _step_tip(step) -> str:
    """A catalog step in plain words, for the hover of its checkbox."""
    parts = [getattr(step, "title", "") or step.name]
    if getattr(step, "matches", ""):
        parts.append(f"Matches {step.matches}.")
    if getattr(step, "emits", ""):
        parts.append(f"Emits {step.emits}.")
    if getattr(step, "effect", ""):
        parts.append(f"Why: {step.effect}.")
    if getattr(step, "prerequisites", ()):
        parts.append(f"Needs first: {', '.join(step.prerequisites)}.")
    if not getattr(step, "default_on", True):
        parts.append("Off by default.")
    return " ".join(parts[:1]) + ": " + " ".join(parts[1:]) if len(parts) > 1 else parts[0]


def _badge(ok: bool | None, text: str, title: str = "") -> str:
    cls = "wb-none" if ok is None else ("wb-ok" if ok else "wb-bad")
    return f"<span class='wb-badge {cls}' title='{html.escape(title)}'>{html.escape(text)}</span>"


def counts_table_html(before: dict[str, int], after: dict[str, int], *, top: int = 14) -> str:
    """An HTML table of op counts before and after a step, changed ops first."""
    ops = set(before) | set(after)
    changed = sorted((o for o in ops if before.get(o, 0) != after.get(o, 0)),
                     key=lambda o: (-abs(after.get(o, 0) - before.get(o, 0)), o))
    same = sorted((o for o in ops if before.get(o, 0) == after.get(o, 0)), key=lambda o: -after.get(o, 0))
    rows = []
    for o in (changed + same)[:top]:
        b, a = before.get(o, 0), after.get(o, 0)
        d = a - b
        cls = "wb-up" if d > 0 else ("wb-down" if d < 0 else "")
        rows.append(f"<tr><td>{html.escape(o)}</td><td>{b}</td><td>{a}</td>"
                    f"<td class='{cls}'>{'+' if d > 0 else ''}{d if d else ''}</td></tr>")
    tb, ta = sum(before.values()), sum(after.values())
    rows.append(f"<tr><th>all nodes</th><th>{tb}</th><th>{ta}</th><th>{ta - tb:+d}</th></tr>")
    return ("<div class='wb-table wb-counts'><table><tr><th>op</th><th>before</th><th>after</th><th>change</th></tr>"
            + "".join(rows) + "</table></div>")


class Workbench:
    """The BERT Fusion Workbench app for one model.

    Args:
        source: preset name (``bert-base``, ``bert-tiny``, ...), a local model
            folder, a hub id, or an ``.onnx`` file.
        exporter, opset, attention: export settings (see :class:`~workbench.config.ExportConfig`).
        engine: fusion engine, "ort", "onnxscript" or "auto".
        autorun: export and run the fusion timeline at once (in a thread).
        background: run long work in threads (False: in the caller's thread,
            for scripts and tests).
        auto_parity: after every run, check each snapshot against the export in a
            low-priority thread and turn its badge green or red (default: with
            ``background``).
    """

    def __init__(self, source: str | os.PathLike = "bert-base", *, exporter: str = "torchscript",
                 opset: int | None = None, attention: str = "eager", engine: str = "auto",
                 autorun: bool = True, background: bool = True, auto_parity: bool | None = None,
                 panel: str = "inline", **state: Any):
        if panel not in PANELS:
            raise ConfigError(f"panel must be one of {', '.join(PANELS)}, not {panel!r}")
        self.panel = "inline"
        self._sidecar = None
        self.state = UIState(source=str(source), exporter=exporter, opset=opset, attention=attention,
                             engine=engine, **state)
        self.background = background
        self.auto_parity = background if auto_parity is None else bool(auto_parity)
        self.error: str | None = None
        self._draw_lock = threading.RLock()
        self._gen = 0  # bumped whenever the snapshots change: parity results for older ones are not drawn
        self._parity_thread: threading.Thread | None = None
        self._parity_wake = threading.Event()
        self._parity_guard = threading.Lock()
        self.engine_summary = ""
        self.engine_note = ""
        self._quiet: set[str] = set()  # steps whose checkbox the app is moving itself
        self._pending: dict[str, bool] = {}  # toggles clicked whose run has not finished
        _LIVE.add(self)
        self.export_result = None
        self.timeline = None
        self.snapshots: list = []
        self.bench_result = None
        #: The last "what each fusion buys" result (workbench.measure.ablation.AblationResult), or None.
        self.ablation = None
        self.profiles: dict[int, Any] = {}
        self._profiled: dict[int, Any] = {}  # index → the snapshot its profile was taken on
        self.series: dict[str, list[float]] = {}
        # Node tables and layouts, keyed by the snapshot object: a toggle hands back the cached snapshots
        # of every step before the one it changed, so their tables and layouts are reused, not rebuilt.
        self._tables: OrderedDict[tuple, tuple] = OrderedDict()
        self._views: OrderedDict[tuple, tuple] = OrderedDict()
        self._thread: threading.Thread | None = None
        self._lock = threading.RLock()
        self._bench = None
        self._netron = None
        self._last_draw = 0.0
        self._export_key = None
        self._closed = False
        self.timings: dict[str, float] = {}
        self._env_problems = compat.problems()
        self.widget = None
        if not self._env_problems:
            self._build()
            if panel == "side":
                self.open_side_panel()
        if autorun:
            self.load()

    # ----------------------------------------------------------------- construction
    @classmethod
    def from_onnx(cls, path: str | os.PathLike, **kw) -> "Workbench":
        """The app for an existing ``.onnx`` file (nothing is exported)."""
        from ..errors import ModelSourceError

        p = Path(path).expanduser()
        if not p.is_file():
            raise ModelSourceError(f"{p} is not a file")
        return cls(str(p), **kw)

    def _build(self) -> None:
        import ipywidgets as W
        import plotly.graph_objects as go

        from ..models import PRESETS

        s = self.state
        L = W.Layout
        self.title = W.HTML(_CSS + "<div class='wb-title'>BERT Fusion Workbench</div>")
        self.status = W.HTML("<div class='wb-status'>ready</div>")
        self.status.add_class("wb-status-line")
        self.progress = W.FloatProgress(value=0, min=0, max=1, layout=L(width="200px", visibility="hidden"))
        # Model bar
        opts = list(PRESETS) + ([s.source] if s.source not in PRESETS else [])
        self.w_source = W.Combobox(value=s.source, options=opts, description="model", ensure_option=False,
                                   layout=L(width="260px"), tooltip="preset, model folder, hub id or .onnx file")
        self.w_exporter = W.Dropdown(options=EXPORTERS, value=s.exporter, description="exporter", layout=L(width="200px"))
        self.w_opset = W.Dropdown(options=[("default", None)] + [(str(o), o) for o in OPSETS], value=s.opset,
                                  description="opset", layout=L(width="150px"))
        self.w_attention = W.Dropdown(options=ATTENTIONS, value=s.attention, description="attention", layout=L(width="180px"))
        self.w_engine = W.Dropdown(options=ENGINES, value=s.engine, description="engine", layout=L(width="170px"),
                                   tooltip="fusion engine: ONNX Runtime's optimizer, onnxscript's rules, or both (auto)")
        self.w_load = W.Button(description="Load", button_style="primary", icon="refresh", layout=L(width="90px"))
        self.w_load.on_click(lambda _: self.load())
        for w in (self.w_exporter, self.w_opset, self.w_attention, self.w_engine):
            w.observe(self._on_model_bar, "value")
        self.w_engine_note = W.HTML()
        self.w_engine_note.add_class("wb-engine-note")
        self.w_side = W.Button(description="Side panel", icon="columns", layout=L(width="110px"),
                               tooltip="open the app in JupyterLab's right-hand area, beside the notebook")
        self.w_side.on_click(lambda _: self.open_side_panel())
        model_bar = W.HBox([self.w_source, self.w_exporter, self.w_opset, self.w_attention, self.w_engine,
                            self.w_load, self.w_side, self.progress, self.w_engine_note], layout=L(flex_flow="row wrap"))
        model_bar.add_class("wb-model-bar")
        # Fusion panel: one row per step of the engine in use (checkbox, name, nodes, what it fused, parity).
        self.toggles: dict[str, Any] = {}
        self._rows: dict[str, Any] = {}
        self._row_engine: str | None = None
        self.w_rows = W.VBox([W.HTML("<div class='wb-why' style='color:#666;padding:4px'>the steps appear after "
                                     "the first run</div>")])
        self.w_rows.add_class("wb-rows")
        self.w_toggles = self.w_rows  # the old name, for notebooks written against it
        self.w_step = W.SelectionSlider(options=[("export", 0)], value=0, description="step",
                                        continuous_update=False, layout=L(width="98%"))
        self.w_step.add_class("wb-step-slider")
        self.w_step.observe(self._on_step, "value")
        self.w_session = W.Button(description="Session layer", icon="layer-group", layout=L(width="130px"),
                                  tooltip="what ONNX Runtime's own session-time fusion (ORT_ENABLE_ALL) adds on top "
                                          "of the selected snapshot")
        self.w_session.on_click(lambda _: self.show_session_layer())
        self.w_session_out = W.HTML()
        self.w_warm = W.HTML()
        self.w_warm.add_class("wb-warm")
        self.w_counts = W.HTML()
        self.w_counts.add_class("wb-counts-box")
        self.w_diag = W.HTML()
        self.w_diag.add_class("wb-diagnostics")
        fusion_panel = W.HBox([
            W.VBox([W.HTML("<div class='wb-section'>Fusion steps <span style='font-weight:normal;font-size:11px'>"
                           "(tick to switch a step on or off; click a name to see its before and after; parity: "
                           "grey not checked yet, green same outputs as the export, red different)</span></div>"),
                    self.w_rows, self.w_step, W.HBox([self.w_session, self.w_warm],
                                                     layout=L(align_items="center")), self.w_session_out],
                   layout=L(width="58%", min_width="360px")),
            W.VBox([W.HTML("<div class='wb-section'>Op counts before → after the selected step</div>"),
                    self.w_diag, self.w_counts], layout=L(width="40%", min_width="280px"))],
            layout=L(width="100%", flex_flow="row wrap", justify_content="space-between"))
        fusion_panel.add_class("wb-fusion-panel")
        # Graph panel
        self.w_view = W.ToggleButtons(options=[("one layer", "layer"), ("whole model", "model")], value=s.view,
                                      style={"button_width": "110px"})
        self.w_view.observe(self._on_view, "value")
        self.w_layer = W.BoundedIntText(value=s.layer, min=0, max=0, description="layer", layout=L(width="140px"))
        self.w_layer.observe(self._on_view, "value")
        self.w_expand = W.Checkbox(value=False, description="expand all layers", indent=False, layout=L(width="150px"))
        self.w_expand.observe(self._on_view, "value")
        self.w_overlay = W.Checkbox(value=s.overlay, description="latency overlay", indent=False, layout=L(width="140px"))
        self.w_overlay.observe(self._on_view, "value")
        self.w_constants = W.Checkbox(value=s.constants, description="show constants", indent=False,
                                      layout=L(width="130px"),
                                      tooltip="draw Constant nodes and Identity nodes of weights too (hidden by "
                                              "default: they only hold values, and crowd the view)")
        self.w_constants.observe(self._on_constants, "value")
        self.w_netron = W.Button(description="Netron", icon="external-link", tooltip="open this snapshot in Netron",
                                 layout=L(width="100px"))
        self.w_netron.on_click(lambda _: self.open_netron())
        # Explicit widths from one value: a FigureWidget does not follow its flex box (it overflowed
        # half-width panes), and the labels are placed for the width the figure is drawn at.
        pw = s.pane_width
        self.fig_before = go.FigureWidget(layout=dict(height=360, width=pw, autosize=False, title=dict(text="before")))
        self.fig_after = go.FigureWidget(layout=dict(height=360, width=pw, autosize=False, title=dict(text="after")))
        self.w_before = W.Box([self.fig_before], layout=L(width=f"{pw + 4}px", overflow="hidden", flex="0 0 auto"))
        self.w_after = W.Box([self.fig_after], layout=L(width=f"{pw + 4}px", overflow="hidden", flex="0 0 auto"))
        self.w_before.add_class("wb-graph-before")
        self.w_after.add_class("wb-graph-after")
        self.w_netron_out = W.HTML()
        from .width import WidthProbe

        # The space the panes really get, measured in the browser: side by side from 800 px, figures resized
        # to fit whenever the window or JupyterLab's side bar changes it.
        self.w_width = WidthProbe()
        self.w_width.observe(lambda ch: self.fit_width(ch["new"]), "width")
        graph_panel = W.VBox([self.w_width,
            W.HTML("<div class='wb-section'>Graph: before and after the selected step "
                   "<span style='font-weight:normal;font-size:11px'>(red rings: nodes the step replaced, and what it "
                   "emitted; click a node on the right to see what it replaced)</span></div>"),
            W.HBox([self.w_view, self.w_layer, self.w_expand, self.w_overlay, self.w_constants, self.w_netron],
                   layout=L(flex_flow="row wrap")),
            W.HBox([self.w_before, self.w_after], layout=L(flex_flow="row wrap")), self.w_netron_out],
            layout=L(width="100%"))
        graph_panel.add_class("wb-graph-panel")
        # Profile panel
        from ..ort.session import cuda_status

        self.w_provider = W.Dropdown(options=["cpu"], value="cpu", description="provider", layout=L(width="170px"))
        self._cuda_checked = False
        self.w_batch = W.BoundedIntText(value=s.batch, min=1, max=4096, description="batch", layout=L(width="130px"))
        self.w_seq = W.BoundedIntText(value=s.seq, min=1, max=4096, description="sequence", layout=L(width="150px"))
        self.w_threads = W.BoundedIntText(value=s.threads, min=1, max=256, description="threads", layout=L(width="140px"))
        self.w_runs = W.BoundedIntText(value=s.runs, min=1, max=100000, description="runs", layout=L(width="130px"))
        self.w_variants = W.SelectMultiple(options=[], description="variants", rows=4, layout=L(width="330px"))
        self.w_int8 = W.Checkbox(value=False, description="+ int8 (dynamic quantization)", indent=False)
        self.w_run = W.Button(description="Run", button_style="success", icon="play", layout=L(width="80px"))
        self.w_stop = W.Button(description="Stop", button_style="danger", icon="stop", disabled=True, layout=L(width="80px"))
        self.w_run.on_click(lambda _: self.run_benchmark())
        self.w_stop.on_click(lambda _: self.stop_benchmark())
        self.w_profile = W.Button(description="Profile ops", icon="tachometer-alt", layout=L(width="120px"),
                                  tooltip="profile the operators of the selected step's before and after graphs: "
                                          "time per op type, and nodes coloured by their share of latency")
        self.w_profile.on_click(lambda _: self.profile())
        self.w_ablate = W.Button(description="What each fusion buys", icon="balance-scale", layout=L(width="190px"),
                                 tooltip="fuse again without each fusion step in turn and time every plan "
                                         "interleaved with the full plan (twice, for the noise): what each step "
                                         "saves or costs on this machine")
        self.w_ablate.on_click(lambda _: self.ablate())
        self.w_report = W.Button(description="Save report", icon="save", layout=L(width="120px"))
        self.w_report.on_click(lambda _: self.save_report())
        from ..viz import latency as vl

        self.fig_live = go.FigureWidget(vl.live_figure({}))
        self.fig_dist = go.FigureWidget(vl.distribution_figure({}))
        self.fig_pct = go.FigureWidget(vl.percentile_figure({}))
        self.fig_ops = go.FigureWidget(vl.op_breakdown_figure({}))
        self.fig_ablation = go.FigureWidget(vl.ablation_figure([]))
        for f in (self.fig_live, self.fig_dist, self.fig_pct, self.fig_ops, self.fig_ablation):
            f.layout.width, f.layout.autosize = s.pane_width, False  # like the graph panes: never wider than their box
        self.w_results = W.HTML()
        self.w_results.add_class("wb-results")
        self.w_ablation = W.HTML()
        self.w_ablation.add_class("wb-ablation")
        self._plot_boxes: list = []

        def box(f):
            b = W.Box([f], layout=L(width=f"{s.pane_width + 4}px", overflow="hidden", flex="0 0 auto"))
            self._plot_boxes.append(b)
            return b
        live_box = box(self.fig_live)
        live_box.add_class("wb-live-plot")
        profile_panel = W.VBox([
            W.HTML("<div class='wb-section'>Latency (measured in a worker process, variants interleaved, "
                   "thread spinning off)</div>"),
            W.HBox([self.w_provider, self.w_batch, self.w_seq, self.w_threads, self.w_runs], layout=L(flex_flow="row wrap")),
            W.HBox([self.w_variants, W.VBox([self.w_int8, W.HBox([self.w_run, self.w_stop, self.w_profile, self.w_report]),
                                             self.w_ablate])]),
            W.HBox([live_box, box(self.fig_dist)], layout=L(flex_flow="row wrap")),
            W.HBox([box(self.fig_pct), box(self.fig_ops)], layout=L(flex_flow="row wrap")),
            self.w_results,
            W.HBox([box(self.fig_ablation), self.w_ablation], layout=L(flex_flow="row wrap"))])
        profile_panel.add_class("wb-profile-panel")
        self.widget = W.VBox([self.title, W.HBox([self.status]), model_bar,
                              fusion_panel, graph_panel, profile_panel])
        self.widget.add_class("wb-app")
        self._cuda_status = cuda_status
        try:
            # Probe CUDA only where a GPU can be: the probe makes ONNX Runtime print
            # library errors on machines without one.
            if Path("/dev/nvidiactl").exists() and cuda_status()[0]:
                self.w_provider.options = ["cpu", "cuda"]
        except Exception:  # no onnxruntime CUDA build: CPU only
            pass

    # ----------------------------------------------------------------- step rows
    def step_rows(self) -> list[dict]:
        """The fusion panel's rows as plain data, one per step of the engine in use.

        Each row: ``name``, ``title``, ``kind`` ("fusion" or "cleanup"), ``on``, ``index`` (its
        snapshot, or None when the step is off), ``nodes``, ``here`` ("+12 Attention"),
        ``parity`` (None: not checked yet, True, False), ``parity_tip`` and ``why`` (the
        diagnostic, when the step fused fewer than it could). Steps the engine does not run are
        left out, and so are steps for patterns a BERT encoder lacks unless they changed something.
        """
        from ..fusion import BY_NAME

        if self.timeline is None or not self.snapshots:
            return []
        engine = self.timeline.engine_used or (self.state.engine if self.state.engine != "auto" else "ort")
        index = {_step_name(sn.step): i for i, sn in enumerate(self.snapshots)}
        layers = int(getattr(self.timeline, "num_layers", 0) or 0)
        rows = []
        for name in self.timeline.steps(engine):
            step = BY_NAME.get(name)
            if step is None:
                continue
            i = index.get(name)
            sn = self.snapshots[i] if i is not None else None
            changed = sn is not None and getattr(getattr(sn, "diff", None), "empty", True) is False
            if not getattr(step, "in_bert", True) and not changed:
                continue
            made = {op: n for op, n in (sn.fused_here if sn else {}).items() if n}
            # The fused ops, not the Cast / ReduceSum helpers a fusion adds for its mask input.
            shown = {op: n for op, n in made.items() if op in _FUSED} or made
            here = ", ".join(f"+{n} {op}" for op, n in sorted(shown.items(), key=lambda kv: -kv[1]))
            ok, tip = self._parity_of(sn)
            why = ""
            if sn is not None and sn.diagnostic and step.kind == "fusion" and self._fell_short(step, i, layers):
                why = sn.diagnostic
            on = self._pending.get(name, self.timeline.enabled(name))  # a click in flight wins
            rows.append({"name": name, "title": step.title or name, "kind": step.kind, "on": on,
                         "index": i, "nodes": sn.nodes if sn else None, "here": here, "parity": ok,
                         "parity_tip": tip, "why": why, "tip": _step_tip(step)})
        return rows

    def _fell_short(self, step, i: int, layers: int) -> bool:
        """Whether a fusion step left work undone: fewer of its op than encoder layers, and no other
        step (or the export itself) made up for it."""
        op = getattr(step, "emits", "")
        if not op or layers <= 0:
            return False
        before = self.snapshots[i - 1].fused.get(op, 0) if i > 0 else 0
        final = self.snapshots[-1].fused.get(op, 0)
        here = (self.snapshots[i].fused_here or {}).get(op, 0)
        return here < layers and before < layers and final < layers

    @staticmethod
    def _parity_of(sn) -> tuple[bool | None, str]:
        p = getattr(sn, "parity", None) if sn is not None else None
        if p is None:
            return None, "parity not checked yet (it runs in the background after each change)"
        ok = bool(getattr(p, "ok", p))
        return ok, (f"max abs diff {getattr(p, 'max_abs_diff', float('nan')):.1e} over {getattr(p, 'cases', '?')} "
                    f"cases: {'within' if ok else 'beyond'} atol 1e-4, rtol 1e-3 of the unfused export")

    def _row_widgets(self, name: str, title: str, tip: str):
        """The widgets of one row, made once per step and reused across runs."""
        import ipywidgets as W

        if name in self._rows:
            return self._rows[name]
        L = W.Layout
        cb = W.Checkbox(value=True, indent=False, description="", tooltip=tip, layout=L(width="20px", flex="0 0 auto"))
        cb.add_class("wb-step-cb")
        cb.observe(lambda ch, name=name: self._on_toggle(name, ch["new"]), "value")
        btn = W.Button(description=title, tooltip=f"{title}: show the graph before and after this step",
                       layout=L(width="260px", flex="0 0 auto"))
        btn.add_class("wb-row-name")
        btn.on_click(lambda _, name=name: self._select_row(name))
        info = W.HTML(layout=L(flex="1 1 auto"))
        row = W.HBox([cb, btn, info], layout=L(width="100%"))
        row.add_class("wb-row")
        row.add_class(f"wb-step-{name.lower().replace('_', '-')}")
        self._rows[name] = (row, cb, btn, info)
        self.toggles[name] = cb
        return self._rows[name]

    def _draw_rows(self) -> None:
        """Fill the fusion panel from :meth:`step_rows` (widgets change only where a value did)."""
        if self.widget is None:
            return
        import ipywidgets as W

        with self._draw_lock:
            rows = self.step_rows()
            if not rows:
                return
            sel = self._pair()[1]
            engine = self.timeline.engine_used
            order = [r["name"] for r in rows]
            if self._row_engine != (engine, tuple(order)):
                head = W.HTML("<div class='wb-head'><span style='width:20px'>on</span><span style='width:260px'>step"
                              "</span><span style='width:44px;text-align:right'>nodes</span><span style='width:150px'>"
                              "fused here</span><span>parity</span></div>")
                export = self._export_row()
                kids = [head, export]
                for kind, label in (("fusion", "Fusions"), ("cleanup", "Graph clean-ups")):
                    group = [r for r in rows if r["kind"] == kind]
                    if group:
                        kids.append(W.HTML(f"<div class='wb-sub' style='padding:0 4px'>{label}</div>"))
                        kids += [self._row_widgets(r["name"], r["title"], r["tip"])[0] for r in group]
                self.w_rows.children = kids
                self._row_engine = (engine, tuple(order))
            ex_row, ex_info = self._rows["__export__"]
            ex_info.value = (f"<div class='wb-cells'><span class='wb-n'>{self.snapshots[0].nodes}</span>"
                             f"<span class='wb-h' style='color:#666'>the model as exported</span></div>")
            (ex_row.add_class if sel == 0 else ex_row.remove_class)("wb-row-sel")
            for r in rows:
                row, cb, btn, info = self._rows[r["name"]]
                self._set_checkbox(r["name"], r["on"])
                btn.disabled = r["index"] is None
                nodes = "off" if r["index"] is None else str(r["nodes"])
                why = r["why"]
                short = why if len(why) <= 170 else why[:169] + "…"
                why_html = (f"<div class='wb-why' title='{html.escape(why)}'>{html.escape(short)}</div>"
                            if why and r["index"] is not None else "")
                badge = "" if r["index"] is None else _badge(
                    r["parity"], "ok" if r["parity"] else ("differs" if r["parity"] is False else "…"),
                    r["parity_tip"])
                info.value = (f"<div class='wb-cells'><span class='wb-n'>{nodes}</span>"
                              f"<span class='wb-h' title='{html.escape(r['here'])}'>{html.escape(r['here'])}</span>"
                              f"<span class='wb-p'>{badge}</span></div>{why_html}")
                (row.add_class if r["index"] == sel else row.remove_class)("wb-row-sel")
                (row.remove_class if r["on"] else row.add_class)("wb-row-off")

    def _export_row(self):
        import ipywidgets as W

        if "__export__" not in self._rows:
            spacer = W.HTML("", layout=W.Layout(width="20px", flex="0 0 auto"))
            btn = W.Button(description="export (no fusion)", tooltip="the model as exported: the reference for parity",
                           layout=W.Layout(width="260px", flex="0 0 auto"))
            btn.add_class("wb-row-name")
            btn.on_click(lambda _: self.select_step(0))
            info = W.HTML(layout=W.Layout(flex="1 1 auto"))
            row = W.HBox([spacer, btn, info], layout=W.Layout(width="100%"))
            row.add_class("wb-row")
            row.add_class("wb-step-export")
            self._rows["__export__"] = (row, info)
        return self._rows["__export__"][0]

    def _select_row(self, name: str) -> None:
        names = [_step_name(sn.step) for sn in self.snapshots]
        if name in names:
            self.select_step(names.index(name))

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
        if hasattr(self, "w_side"):
            self.w_side.disabled = True

    def close_side_panel(self) -> None:
        """Close the side panel (show the app inline again by displaying ``app`` in a cell)."""
        if self._sidecar is not None:
            self._sidecar.close()
            self._sidecar = None
        self.panel = "inline"
        if hasattr(self, "w_side"):
            self.w_side.disabled = False

    def _repr_mimebundle_(self, include=None, exclude=None):
        if self.panel == "side" and not self._env_problems:
            note = "BERT Fusion Workbench is open in the side panel (app.close_side_panel() brings it back here)."
            return {"text/html": f"<div class='wb-side-note'>{note}</div>", "text/plain": note}
        if self._env_problems:
            msg = "; ".join(self._env_problems)
            return {"text/html": compat.error_html(msg), "text/plain": f"BERT Fusion Workbench: {msg}"}
        bundle = self.widget._repr_mimebundle_(include=include, exclude=exclude)
        bundle["text/plain"] = ("BERT Fusion Workbench app. If you are reading this text instead of the app, "
                                "this front-end cannot draw Jupyter widgets: install jupyterlab_widgets "
                                "(matching ipywidgets 8: `pip install \"jupyterlab_widgets>=3,<4\"`) and reload.")
        return bundle

    # ----------------------------------------------------------------- status and threads
    def _set_status(self, text: str, kind: str = "info") -> None:
        colour = {"info": "#333", "error": "#cf222e", "ok": "#1a7f37", "busy": "#0969da"}[kind]
        icon = {"info": "", "error": "✖ ", "ok": "✔ ", "busy": "⏳ "}[kind]
        if kind == "error":
            self.error = text
        if self.widget is not None:
            self.status.value = (f"<div class='wb-status' style='color:{colour}'>{icon}{html.escape(text)}</div>")

    def _progress(self, stage: str, fraction: float) -> None:
        if self.widget is None:
            return
        self.progress.layout.visibility = "visible"
        self.progress.value = max(0.0, min(1.0, fraction))
        self._set_status(stage, "busy")

    def _run(self, what: str, fn: Callable[[], None]) -> None:
        """Run ``fn`` off the main thread (or inline), showing any error in the app."""

        def body():
            with self._lock:
                try:
                    self.error = None
                    fn()
                except WorkbenchError as e:
                    self._set_status(str(e), "error")
                except MemoryError:
                    self._set_status(f"{what}: out of memory", "error")
                except Exception as e:  # a bug: still one line in the app, the details on the log
                    self._set_status(f"{what} failed unexpectedly: {type(e).__name__}: "
                                     f"{' '.join(str(e).split())[:300]} (please report this)", "error")
                    self._trace = traceback.format_exc()
                finally:
                    if self.widget is not None:
                        self.progress.layout.visibility = "hidden"

        if not self.background:
            body()
            return
        self._thread = threading.Thread(target=body, name=f"workbench-{what}", daemon=True)
        self._thread.start()

    def wait(self, timeout: float | None = 600) -> "Workbench":
        """Block until the current export/fusion work is done (for scripts and tests)."""
        t = self._thread
        if t is not None:
            t.join(timeout)
        return self

    # ----------------------------------------------------------------- model bar
    def _on_model_bar(self, change) -> None:
        self.load()

    def _read_model_bar(self) -> None:
        if self.widget is None:
            return
        s = self.state
        s.source = self.w_source.value.strip() or s.source
        s.exporter, s.opset, s.attention, s.engine = (self.w_exporter.value, self.w_opset.value,
                                                       self.w_attention.value, self.w_engine.value)

    def load(self) -> None:
        """Export (or reuse the cached export) and run the fusion timeline."""
        self._read_model_bar()
        self._run("load", self._load)

    def _load(self) -> None:
        from ..export import export
        from ..fusion import Timeline
        from ..models import resolve

        s = self.state
        t0 = time.perf_counter()
        if self._export_key != s.export_key() or self.export_result is None:
            self._progress("resolving model", 0.01)
            source = resolve(s.source)
            self.export_result = export(source, s.export_config(), progress=self._progress)
            self._export_key = s.export_key()
            self.timings["export_s"] = time.perf_counter() - t0
        src = self.export_result.source
        self._progress(f"fusing with {s.engine}", 0.9)
        t1 = time.perf_counter()
        kw = {k: v for k, v in (("num_layers", src.num_layers), ("num_heads", src.num_heads),
                                ("hidden_size", src.hidden_size)) if v}
        if self.timeline is not None:
            self.timeline.stop_warming(wait=False)
        tl = Timeline(self.export_result.path, s.fusion_plan(), **kw)
        snaps = tl.run()
        note = self.engine_note = tl.engine_note or ""  # the auto run's reasons (set_plan below replaces tl's)
        self.engine_summary = engine_summary(s.engine, tl.engine_used, {e: r[-1].fused for e, r in tl.runs.items() if r})
        if s.engine == "auto" and tl.engine_used:
            # Keep the engine auto chose: a later toggle must not switch engines (and step lists)
            # under the user. Its snapshots are cached, so this costs nothing.
            snaps = tl.set_plan(dataclasses.replace(tl.plan, engine=tl.engine_used))
        self.timeline = tl
        self._set_snapshots(snaps)
        if self.widget is not None:
            self.w_engine_note.value = f"<span title='{html.escape(note)}'>{html.escape(self.engine_summary)}</span>"
        self.timings["fusion_s"] = time.perf_counter() - t1
        # Precompute each single toggle in the background, at low priority: a click is then a lookup.
        tl.start_warming()
        self._watch_warm()
        last = self.snapshots[-1] if self.snapshots else None
        summary = f"{src.label}: {self.export_result.nodes} nodes exported"
        if last is not None:
            summary += f" → {last.nodes} after fusion ({ENGINE_TITLES.get(tl.engine_used, tl.engine_used)})"
        self._set_status(summary, "ok")

    # ----------------------------------------------------------------- fusion panel
    def _on_toggle(self, name: str, on: bool) -> None:
        # Per step, not the app-wide flag: the parity thread redraws rows while the user clicks.
        if name in self._quiet:
            return
        self.toggle(name, on)

    def _set_checkbox(self, name: str, on: bool) -> None:
        """Move a step's checkbox without it calling :meth:`toggle`."""
        cb = self.toggles.get(name)
        if cb is None or cb.value == on:
            return
        self._quiet.add(name)
        try:
            cb.value = on
        finally:
            self._quiet.discard(name)

    def toggle(self, name: str, on: bool) -> None:
        """Switch catalog step ``name`` on or off and re-run the timeline."""
        self.state.set_step_enabled(name, on)
        if self.widget is not None:
            self._set_checkbox(name, on)
        if self.timeline is None:
            return

        self._pending[name] = on

        def work():
            t0 = time.perf_counter()
            self._set_status(f"{'enabling' if on else 'disabling'} {name}", "busy")
            try:
                snaps = self.timeline.toggle(name, on)
            finally:
                self._pending.pop(name, None)
            self._set_snapshots(snaps)
            self.timings["toggle_s"] = time.perf_counter() - t0
            last = self.snapshots[-1]
            self._set_status(f"{name} {'on' if on else 'off'}: {last.nodes} nodes after fusion "
                             f"({self.timings['toggle_s']:.2f} s)", "ok")

        self._run("toggle", work)

    def _set_snapshots(self, snaps) -> None:
        self.snapshots = list(snaps)
        # Profiles follow their snapshot when a toggle shifts the indices; other ones are dropped.
        where = {id(sn): i for i, sn in enumerate(self.snapshots)}
        moved = {where[id(sn)]: (self.profiles[k], sn) for k, sn in self._profiled.items()
                 if id(sn) in where and k in self.profiles}
        self.profiles = {i: p for i, (p, _) in moved.items()}
        self._profiled = {i: sn for i, (_, sn) in moved.items()}
        self._gen += 1
        if self.widget is None:
            self._kick_auto_parity()
            return
        opts = [(f"{i}: {_step_name(sn.step)}", i) for i, sn in enumerate(self.snapshots)]
        names = [_step_name(sn.step) for sn in self.snapshots]
        chosen = getattr(self, "_chosen", None)  # keep the step the user picked, by name
        want = names.index(chosen) if chosen in names else self._step_near(chosen)
        if chosen is None and self.snapshots:
            self._chosen = names[want]  # remembered, so switching this step off and on comes back to it
        self._syncing = True
        try:
            self.w_step.options = opts
            self.w_step.value = want
        finally:
            self._syncing = False
        self.state.step = want
        # Labels keep the "i: step" key the API takes; the two ends say what they are.
        self.w_variants.options = [(o[0] + (" (ONNX Runtime, no optimizations)" if o[1] == 0 else
                                            " (fused, all steps)" if o[1] == len(opts) - 1 else ""), o[0])
                                   for o in opts]
        self.w_variants.value = tuple({opts[0][0]: None, opts[-1][0]: None})
        layers = self._table(0).layers
        self.w_layer.max = max(layers) if layers else 0
        self.refresh()
        self._kick_auto_parity()

    def warm_text(self) -> str:
        """One line on the background precomputation of single toggles (what a click will cost)."""
        tl = self.timeline
        if tl is None:
            return ""
        if tl.warming:
            return "precomputing every toggle in the background… until then a click may take a few seconds"
        if tl.warm_error:
            return f"precomputing toggles stopped: {' '.join(str(tl.warm_error).split())[:160]}"
        if tl.warm_s is not None:
            return f"✔ every single toggle precomputed ({tl.warm_s:.0f} s): a click is a lookup"
        return ""

    def _watch_warm(self) -> None:
        """Keep the warm-up line current (a daemon thread polling twice a second; sends only changes)."""
        if self.widget is None or not self.background or getattr(self, "_warm_watcher", None) is not None:
            return

        def loop():
            while not self._closed:
                text = self.warm_text()
                html_ = f"<span style='font-size:11px;color:#57606a'>{html.escape(text)}</span>"
                if self.w_warm.value != html_:
                    self.w_warm.value = html_
                time.sleep(0.5)

        self._warm_watcher = threading.Thread(target=loop, name="workbench-warm-watch", daemon=True)
        self._warm_watcher.start()

    def _kick_auto_parity(self) -> None:
        if self.auto_parity and self.timeline is not None and not self._closed:
            self._kick_parity()

    def _step_near(self, name: str | None) -> int:
        """Where to look when the chosen step was switched off: the next step that ran after it,
        so the "after" pane shows the graph as it now stands at that point (else the default)."""
        names = [_step_name(sn.step) for sn in self.snapshots]
        if name and self.timeline is not None:
            order = self.timeline.steps()
            if name in order:
                for later in order[order.index(name) + 1:]:
                    if later in names:
                        return names.index(later)
        return self.default_step()

    def default_step(self) -> int:
        """The step to show first: Attention when it fused, else the step that removed most nodes."""
        best, best_removed = len(self.snapshots) - 1, -1
        for i, sn in enumerate(self.snapshots[1:], 1):
            removed = len(getattr(getattr(sn, "diff", None), "removed", ()) or ())
            if _step_name(sn.step) == "attention" and removed:
                return i
            if removed > best_removed:
                best, best_removed = i, removed
        return best

    def _on_step(self, change) -> None:
        if getattr(self, "_syncing", False):
            return
        self.select_step(change["new"])

    def select_step(self, index: int) -> None:
        """Show the snapshot ``index`` (0 = the export) against the one before it."""
        self.state.step = int(index)
        self.state.selected = None
        if 0 <= index < len(self.snapshots):
            self._chosen = _step_name(self.snapshots[index].step)
        if self.widget is not None and self.w_step.value != index:
            self._syncing = True
            try:
                self.w_step.value = index
            finally:
                self._syncing = False
        self.refresh()

    def _pair(self):
        i = self.state.step if 0 <= self.state.step < len(self.snapshots) else len(self.snapshots) - 1
        return max(0, i - 1), i

    @staticmethod
    def _cached(cache: OrderedDict, key: tuple, owner, make, size: int = 48):
        """LRU lookup keyed by ``owner``'s identity; ``owner`` is kept so its id is not reused."""
        hit = cache.get(key)
        if hit is not None and hit[0] is owner:
            cache.move_to_end(key)
            return hit[1]
        value = make()
        cache[key] = (owner, value)
        while len(cache) > size:
            cache.popitem(last=False)
        return value

    def _table(self, i: int):
        from ..graph.layout import node_table, without_constants

        sn = self.snapshots[i]

        def make():
            layer_of = getattr(getattr(sn, "diff", None), "layer_of", None) or None
            tab = node_table(getattr(sn, "skeleton", None) or sn.model, layer_of=layer_of)
            return tab if self.state.constants else without_constants(tab)

        return self._cached(self._tables, (id(sn), self.state.constants), sn, make)

    def _layout(self, i: int):
        from ..graph.layout import layout_graph

        s = self.state
        sn = self.snapshots[i]
        expand_all = self.widget is not None and bool(self.w_expand.value)
        key = (id(sn), s.constants, s.view, s.layer, tuple(sorted(s.expanded)), expand_all)

        def make():
            tab = self._table(i)
            if s.view == "layer" and s.layer in tab.layers:
                return layout_graph(tab, layer=s.layer)
            groups = [g for g in tab.groups if g.startswith("layer ")]
            collapsed = [] if expand_all else [g for g in groups if g not in s.expanded]
            return layout_graph(tab, collapsed=collapsed)

        return self._cached(self._views, key, sn, make)

    def refresh(self) -> None:
        """Redraw counts, diagnostics and both graphs for the selected step."""
        if self.widget is None or not self.snapshots:
            return
        t0 = time.perf_counter()
        b, a = self._pair()
        before, after = self.snapshots[b], self.snapshots[a]
        self.w_counts.value = counts_table_html(dict(before.histogram), dict(after.histogram))
        self._draw_rows()
        self._draw_diag(after, a)
        self._draw_graphs()
        self.timings["refresh_s"] = time.perf_counter() - t0

    def _draw_diag(self, snap, i: int) -> None:
        name = _step_name(snap.step)
        d = getattr(snap, "diagnostic", None)
        fused = getattr(snap, "fused", None) or {}
        lines = [f"<b>{html.escape(name)}</b> ({html.escape(str(getattr(snap, 'engine', '') or ''))}): "
                 f"{snap.nodes} nodes, {getattr(snap, 'elapsed_s', 0) or 0:.2f} s"]
        if fused:
            lines.append("fused so far: " + ", ".join(f"{html.escape(k)} {v}" for k, v in fused.items() if v))
        if d:
            text = d if isinstance(d, str) else "; ".join(f"{k}: {v}" for k, v in dict(d).items())
            lines.append(f"<span style='color:#9a6700'>why not fused: {html.escape(text)}</span>")
        elif i > 0 and getattr(snap, "diff", None) is not None and snap.diff.empty:
            lines.append("<span style='color:#9a6700'>this step changed nothing</span>")
        self.w_diag.value = "<div style='font-size:12px'>" + "<br>".join(lines) + "</div>"

    def show_session_layer(self, level: str = "all") -> None:
        """Show what ONNX Runtime's session adds on top of the selected snapshot (the second layer)."""
        if self.timeline is None or not self.snapshots:
            self._set_status("load a model first", "error")
            return
        i = self._pair()[1]

        def work():
            self._set_status(f"asking ONNX Runtime what its session ({level}) does to this snapshot", "busy")
            extra = self.timeline.session_layer(i, level)
            self.session_layer = extra
            added = ", ".join(f"{op} {n}" for op, n in sorted(extra["added_ops"].items())) or "nothing new"
            text = (f"ORT session ({level}) on top of <b>{html.escape(_step_name(self.snapshots[i].step))}</b>: "
                    f"{self.snapshots[i].nodes} → {extra['nodes']} nodes; adds {html.escape(added)}"
                    + (f"; kept off as the plan says: {html.escape(', '.join(extra['kept_off']))}"
                       if extra.get("kept_off") else ""))
            if self.widget is not None:
                self.w_session_out.value = f"<div style='font-size:12px'>{text}</div>"
            self._set_status("session layer shown", "ok")

        self._run("session layer", work)

    def check_parity(self, wait: bool | None = None) -> None:
        """Check every snapshot against the unfused export; badges turn green or red as results arrive.

        Runs in the background parity thread (see ``auto_parity``); with
        ``background=False`` (or ``wait=True``) it returns when every badge is filled.
        """
        if self.timeline is None:
            self._set_status("load a model first", "error")
            return
        if (wait if wait is not None else not self.background):
            self._guard(lambda: self._parity_pass(report=True), "parity")()
            return
        self._kick_parity(report=True)

    def parity_order(self) -> list[int]:
        """Snapshots to check, most useful first: the selected step, the final model, then in order."""
        n = len(self.snapshots)
        first = [self._pair()[1], n - 1]
        return [i for i in dict.fromkeys(first + list(range(1, n))) if 0 < i < n]

    def _parity_pass(self, report: bool = False) -> bool:
        """Fill the parity of the current snapshots; False when they changed under it (a toggle)."""
        tl, snaps, gen = self.timeline, list(self.snapshots), self._gen
        if tl is None:
            return True

        def same_as_before(i: int) -> bool:  # the step changed nothing: its outputs are its predecessor's
            return i > 1 and getattr(snaps[i].diff, "empty", False)

        def propagate() -> None:
            for i in range(2, len(snaps)):
                if snaps[i].parity is None and same_as_before(i) and snaps[i - 1].parity is not None:
                    snaps[i].parity = snaps[i - 1].parity

        todo = [i for i in self.parity_order() if not same_as_before(i)]
        todo += [i for i in range(1, len(snaps)) if i not in todo]  # whatever propagation cannot fill
        for i in todo:
            propagate()
            if self._gen != gen or self._closed:
                return False  # a toggle or reload: start over on the new snapshots
            sn = snaps[i]
            if sn.parity is not None:
                continue
            if report:
                self._set_status(f"parity: checking {_step_name(sn.step)} ({i} of {len(snaps) - 1})", "busy")
            sn.check_parity(reference=tl.reference())
            if self._gen == gen:
                self._draw_rows()
        propagate()
        if self._gen != gen:
            return False
        self._draw_rows()
        if report:
            bad = [_step_name(sn.step) for sn in snaps[1:] if sn.parity is not None and not sn.parity.ok]
            self._set_status("parity: every step within atol 1e-4, rtol 1e-3" if not bad else
                             f"parity: {', '.join(bad)} differ from the unfused model beyond atol 1e-4",
                             "ok" if not bad else "error")
        return True

    def _kick_parity(self, report: bool = False) -> None:
        """Wake the background parity thread (start it if none is running)."""
        self._parity_report = report or getattr(self, "_parity_report", False)
        with self._parity_guard:
            self._parity_wake.set()
            if self._parity_thread is not None and self._parity_thread.is_alive():
                return

            def loop():
                _lower_priority()
                while not self._closed:
                    self._parity_wake.clear()
                    report_now, self._parity_report = self._parity_report, False
                    try:
                        done = self._parity_pass(report=report_now)
                    except WorkbenchError as e:
                        self._set_status(f"parity check failed: {e}", "error")
                        done = True
                    except Exception as e:  # never a traceback in the kernel; one line in the app
                        self._trace = traceback.format_exc()
                        self._set_status(f"parity check failed unexpectedly: {type(e).__name__}: "
                                         f"{' '.join(str(e).split())[:200]}", "error")
                        done = True
                    with self._parity_guard:
                        if done and not self._parity_wake.is_set():
                            self._parity_thread = None
                            return

            self._parity_thread = threading.Thread(target=loop, name="workbench-parity", daemon=True)
            self._parity_thread.start()

    def wait_parity(self, timeout: float | None = 600) -> bool:
        """Wait for the background parity checks; True when every badge is filled."""
        t = self._parity_thread
        if t is not None:
            t.join(timeout)
        return all(sn.parity is not None for sn in self.snapshots[1:])

    def _latency_map(self, i: int) -> dict[str, float] | None:
        if not self.state.overlay:
            return None
        prof = self.profiles.get(i)
        if prof is None:
            return None
        tab = self._table(i)
        out = {}
        for r in prof.records:
            ids = tab.resolve([r["node"]])
            for nid in ids:
                out[nid] = r["mean_us"] / 1e3
        return out

    def fit_width(self, width_px: int) -> None:
        """Size the panes and figures for an output area ``width_px`` wide (the probe calls this)."""
        from .width import pane_sizes

        if not width_px or self.widget is None:
            return
        pane, _ = pane_sizes(width_px)
        if pane == self.state.pane_width:
            return
        self.state.pane_width = pane
        for box in (self.w_before, self.w_after, *self._plot_boxes):
            box.layout.width = f"{pane + 4}px"
        with self.fig_before.batch_update(), self.fig_after.batch_update():
            self.fig_before.layout.width = self.fig_after.layout.width = pane
        for f in (self.fig_live, self.fig_dist, self.fig_pct, self.fig_ops, self.fig_ablation):
            f.layout.width = pane
        if self.snapshots:
            self.refresh()

    def _draw_graphs(self) -> None:
        from ..viz.graph import shared_yrange, update_graph_figure

        b, a = self._pair()
        lb, la = self._layout(b), self._layout(a)
        # One height for both panes, and one vertical scale when the depths are comparable.
        yr = shared_yrange(lb, la)
        height = int(min(900, max(360, 22 * max(lb.depth, la.depth) + 80)))
        size = dict(width=self.state.pane_width, height=height, yrange=yr)
        s_view_model = self.state.view == "model"  # a layer title counts its own nodes; the model title all
        diff = getattr(self.snapshots[a], "diff", None) if a != b else None
        removed = self._table(b).resolve(getattr(diff, "removed", []) or [])
        added = self._table(a).resolve(getattr(diff, "added", []) or [])
        rem_items = self._items_for(lb, removed)
        add_items = self._items_for(la, added)
        sel_after, sel_before = self._selection(lb, la, diff)
        name = _step_name(self.snapshots[a].step)
        def note(i: int) -> str:  # say what the view leaves out, so its count matches the table's
            hidden = getattr(self._table(i), "hidden", 0)
            return f" <span style='font-size:10px;color:#888'>(+{hidden} constants hidden)</span>" if hidden else ""

        new_b = update_graph_figure(self.fig_before, lb, highlight=rem_items, selected=sel_before,
                                    latency=self._latency_map(b), **size,
                                    title=f"before {name}: {lb.title}{note(b) if s_view_model else ''}")
        new_a = update_graph_figure(self.fig_after, la, highlight=add_items, selected=sel_after,
                                    latency=self._latency_map(a), **size,
                                    title=f"after {name}: {la.title}{note(a) if s_view_model else ''}")
        if new_a or new_b:
            self._hooked = False  # new traces: attach the click handlers again
        self._hook_clicks()

    @staticmethod
    def _items_for(lay, node_ids: set[str]) -> set[str]:
        """Layout items standing for these nodes (a collapsed group stands for its members)."""
        ids = set(lay.ids)
        out = {n for n in node_ids if n in ids}
        for gid, members in lay.members.items():
            if node_ids.intersection(members):
                out.add(gid)
        return out

    def _selection(self, lb, la, diff) -> tuple[set[str], set[str]]:
        sel = self.state.selected
        if not sel:
            return set(), set()
        b, _ = self._pair()
        prov = getattr(diff, "provenance", {}) or {}
        tab_a = self._table(self._pair()[1])
        name = tab_a.by_id[sel].name if sel in tab_a.by_id else sel
        origin = self._table(b).resolve(prov.get(name, []) or prov.get(sel, []))
        return {sel}, self._items_for(lb, origin)

    def _hook_clicks(self) -> None:
        if getattr(self, "_hooked", False):
            return
        if len(self.fig_after.data) < 2:
            return
        self.fig_after.data[1].on_click(lambda tr, pts, st: self._clicked("after", pts))
        self.fig_before.data[1].on_click(lambda tr, pts, st: self._clicked("before", pts))
        self._hooked = True

    def _clicked(self, pane: str, points) -> None:
        if not points.point_inds:
            return
        b, a = self._pair()
        lay = self._layout(a if pane == "after" else b)
        item = lay.ids[points.point_inds[0]]
        self.click(item, pane)

    def click(self, item: str, pane: str = "after") -> None:
        """What a click on a graph item does: expand a collapsed layer, or select a node."""
        s = self.state
        if item.startswith("group:"):
            g = item[len("group:"):]
            s.expanded = sorted(set(s.expanded) ^ {g})
        elif pane == "after":
            s.selected = None if s.selected == item else item
        self._draw_graphs()

    def _on_constants(self, change) -> None:
        self.state.constants = bool(change["new"])
        if self.snapshots:
            self._draw_graphs()

    def _on_view(self, change) -> None:
        s = self.state
        s.view, s.layer, s.overlay = self.w_view.value, int(self.w_layer.value), bool(self.w_overlay.value)
        self.set_view(s.view, s.layer)

    def set_view(self, view: str, layer: int | None = None) -> None:
        """"layer" (one encoder layer) or "model" (whole model, layers collapsed)."""
        s = self.state
        s.view = view
        if layer is not None:
            s.layer = int(layer)
        if self.widget is not None:
            self._syncing = True
            try:
                self.w_view.value = view
                self.w_layer.value = s.layer
            finally:
                self._syncing = False
            self.w_layer.disabled = view != "layer"
        if self.snapshots:
            self._draw_graphs()

    # ----------------------------------------------------------------- netron
    def open_netron(self) -> None:
        """Serve the selected snapshot in Netron (private copy, 127.0.0.1) and embed it."""
        def work():
            from ..viz.netron import NetronViewer

            self.close_netron()
            _, a = self._pair()
            snap = self.snapshots[a]
            self._set_status("starting Netron", "busy")
            self._netron = NetronViewer(snap.model, name=f"{_step_name(snap.step)}.onnx").start()
            if self.widget is not None:
                self.w_netron_out.value = self._netron.iframe_html(os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/"))
            self._set_status(f"Netron is serving {_step_name(snap.step)} on {self._netron.url}", "ok")

        if not self.snapshots:
            self._set_status("load a model first", "error")
            return
        self._run("netron", work)

    def close_netron(self) -> None:
        if self._netron is not None:
            self._netron.close()
            self._netron = None
            if self.widget is not None:
                self.w_netron_out.value = ""

    # ----------------------------------------------------------------- profile panel
    def _read_profile_bar(self) -> None:
        s = self.state
        s.provider, s.batch, s.seq = self.w_provider.value, int(self.w_batch.value), int(self.w_seq.value)
        s.threads, s.runs = int(self.w_threads.value), int(self.w_runs.value)

    def variants(self, names: list[str] | None = None) -> list:
        """Benchmark variants for the chosen snapshots (and int8 if asked)."""
        from ..measure.bench import Variant

        idx = {f"{i}: {_step_name(sn.step)}": i for i, sn in enumerate(self.snapshots)}
        chosen = list(names if names is not None else (self.w_variants.value if self.widget else []))
        if not chosen:
            chosen = [next(iter(idx))] + ([list(idx)[-1]] if len(idx) > 1 else [])
        out = []
        last = len(self.snapshots) - 1
        for label in chosen:
            i = idx[label]
            sn = self.snapshots[i]
            # Stable keys: the unfused export, the last snapshot ("fused (all steps)" on screen), else
            # the step's own name where a single snapshot is meant.
            name = "unfused" if i == 0 else ("fused" if i == last else _step_name(sn.step))
            # ORT's own session fusions off, so a gain comes from the step itself.
            out.append(Variant(name, sn.model.SerializeToString(), provider=self.state.provider, level="disable"))
        if self.widget is not None and self.w_int8.value:
            from ..measure.precision import quantize_int8

            self._set_status("quantizing the last snapshot to int8", "busy")
            q = quantize_int8(self.snapshots[-1].model, per_channel=True)
            q = q if isinstance(q, (bytes, str, Path)) else q.SerializeToString()
            out.append(Variant("int8", q, provider=self.state.provider, level="all"))
        return out

    def run_benchmark(self, names: list[str] | None = None) -> None:
        """Time the chosen variants in the worker; the plots grow while it runs."""
        if not self._ready_to_measure("a benchmark is already running: stop it first"):
            return
        if self.widget is not None:
            self._read_profile_bar()

        def work():
            from ..measure.bench import stream_benchmark

            if self.state.provider == "cuda":
                ok, why = self._cuda_status()
                if not ok:
                    raise WorkbenchError(why)
            vs = self.variants(names)
            self.series = {v.name: [] for v in vs}
            self._draw_latency(final=False, force=True)
            self._set_status(f"benchmarking {len(vs)} variants (warm-up first)", "busy")
            if self.widget is not None:
                self.w_run.disabled, self.w_stop.disabled = True, False
            try:
                self._bench = stream_benchmark(vs, self.state.bench_config(), on_sample=self._on_sample)
                self.bench_result = self._bench.result(None)
            finally:
                if self.widget is not None:
                    self.w_run.disabled, self.w_stop.disabled = False, True
            self._draw_latency(final=True, force=True)
            r = self.bench_result
            names_ = [v.name for v in r.variants]
            msg = f"benchmark {'stopped' if r.stopped else 'done'}: " + ", ".join(
                f"{v.name} {v.p50_ms:.2f} ms" for v in r.variants if v.p50_ms)
            if len(names_) > 1 and r.ratio(names_[0], names_[-1]):
                msg += f" ({r.ratio(names_[0], names_[-1]):.2f}x)"
            self._set_status(msg, "ok")

        self._run_bench_thread(work)

    def _ready_to_measure(self, busy: str = "a measurement is already running: wait for it or stop it first") -> bool:
        """A model is loaded and nothing else is measuring; otherwise say why in the status line."""
        if not self.snapshots:
            self._set_status("load a model first", "error")
            return False
        if self._measuring():
            self._set_status(busy, "error")
            return False
        return True

    def _measuring(self) -> bool:
        """A benchmark, profile or ablation is running (two at once would time each other)."""
        t = getattr(self, "_bench_thread", None)
        return bool((self._bench is not None and not self._bench.done) or (t is not None and t.is_alive()))

    def _run_bench_thread(self, work) -> None:
        # Benchmarks have their own thread so the fusion panel stays usable meanwhile.
        t = threading.Thread(target=self._guard(work, "benchmark"), name="workbench-bench", daemon=True)
        self._bench_thread = t
        if self.background:
            t.start()
        else:
            t.run()

    def _guard(self, fn, what):
        def body():
            try:
                self.error = None
                fn()
            except WorkbenchError as e:
                self._set_status(str(e), "error")
            except Exception as e:
                self._trace = traceback.format_exc()
                self._set_status(f"{what} failed unexpectedly: {type(e).__name__}: {' '.join(str(e).split())[:300]}", "error")
        return body

    def wait_benchmark(self, timeout: float | None = 600) -> "Workbench":
        t = getattr(self, "_bench_thread", None)
        if t is not None and t.is_alive():
            t.join(timeout)
        return self

    def stop_benchmark(self) -> None:
        if self._bench is not None and not self._bench.done:
            self._bench.stop()
            self._set_status("stopping the benchmark", "busy")

    def _on_sample(self, sample) -> None:
        self.series.setdefault(sample.variant, []).append(float(sample.ms))
        self._draw_latency(final=False)

    def _draw_latency(self, final: bool, force: bool = False) -> None:
        """Redraw the latency plots, at most 5 times a second while samples stream in."""
        if self.widget is None:
            return
        now = time.perf_counter()
        if not force and now - self._last_draw < 0.2:
            return
        self._last_draw = now
        from ..viz import latency as vl

        floor = getattr(self.bench_result, "floor_ms", None) if final else None
        series = {k: list(v) for k, v in self.series.items()}
        vl.refresh(self.fig_live, vl.live_figure(series, floor_ms=floor))
        vl.refresh(self.fig_dist, vl.distribution_figure(series))
        if final and self.bench_result is not None:
            stats = {v.name: {"p50": v.p50_ms or 0, "p90": v.p90_ms or 0, "p99": v.p99_ms or 0}
                     for v in self.bench_result.variants}
            vl.refresh(self.fig_pct, vl.percentile_figure(stats, floor_ms=floor))
            self.w_results.value = self._results_html()
        else:
            vl.refresh(self.fig_pct, vl.percentile_figure({k: vl.percentiles(v) for k, v in series.items() if v}))

    def _results_html(self) -> str:
        r = self.bench_result
        base = r.variants[0].p50_ms if r.variants else None
        rows = []
        for v in r.variants:
            par = v.parity or {}
            sp = f"{base / v.p50_ms:.2f}x" if base and v.p50_ms else ""
            f = lambda x: f"{x:.2f}" if isinstance(x, (int, float)) else ""
            rows.append(f"<tr><td>{html.escape(variant_label(v.name))}</td><td>{f(v.p50_ms)}</td><td>{f(v.p90_ms)}</td>"
                        f"<td>{f(v.p99_ms)}</td><td>{v.runs}</td><td>{sp}</td>"
                        f"<td title='against the floor of its own precision ({html.escape(v.floor_precision or 'fp32')})'>"
                        f"{f(v.floor_ratio)} <span style='color:#888'>{html.escape(v.floor_precision or '')}</span></td>"
                        f"<td>{f(v.bound_ratio)}</td>"
                        f"<td>{_badge(par.get('ok'), 'ok' if par.get('ok') else ('—' if not par else 'diff'))}</td></tr>")
        floor = ""
        if r.floor_ms:
            bound = (f"; the MatMuls alone, weights read from memory: {r.matmul_bound_ms:.2f} ms (no fusion goes "
                     f"below this)") if r.matmul_bound_ms else ""
            floor = f"<div style='font-size:11px'>hardware floor {r.floor_ms:.2f} ms{bound}</div>"
        from ..measure.explain import explain

        why = "".join(f"<div style='font-size:11px'>{html.escape(line)}</div>" for line in explain(r.rates, r.machine))
        return ("<div class='wb-table'><table><tr><th>variant</th><th>p50 ms</th><th>p90 ms</th><th>p99 ms</th>"
                "<th>runs</th><th>speed-up</th><th>x floor</th><th>x MatMuls alone</th><th>parity</th></tr>"
                + "".join(rows) + "</table></div>" + floor + why)

    def profile(self, indices: list[int] | None = None) -> None:
        """Profile operators of the before/after snapshots: op breakdown and latency overlay."""
        if not self._ready_to_measure():
            return

        def work():
            from ..measure.profile import profile_ops
            from ..viz import latency as vl

            b, a = self._pair()
            chosen = list(indices or sorted({b, a}))
            if self.widget is not None:
                self._read_profile_bar()
                self.w_profile.disabled = True
            try:
                for k, i in enumerate(chosen):
                    sn = self.snapshots[i]
                    self._progress(f"profiling the operators of {_step_name(sn.step)} ({k + 1} of {len(chosen)}: "
                                   f"batch {self.state.batch}, sequence {self.state.seq}, {self.state.runs} runs)",
                                   (k + 0.5) / len(chosen))
                    self.profiles[i] = profile_ops(sn.model.SerializeToString(), self.state.bench_config(),
                                                   provider=self.state.provider, level="disable",
                                                   name=_step_name(sn.step))
                    self._profiled[i] = sn
            finally:
                if self.widget is not None:
                    self.progress.layout.visibility = "hidden"
                    self.w_profile.disabled = False
            step = _step_name(self.snapshots[a].step)

            def label(i: int) -> str:  # the pair on screen by its role; others by index and name
                return {b: f"before {step}", a: f"after {step}"}.get(i, f"{i}: {self.profiles[i].variant}") \
                    if a != b else f"{i}: {self.profiles[i].variant}"

            ops = {label(i): {k: v / 1e3 for k, v in self.profiles[i].op_type_totals().items()}
                   for i in sorted(self.profiles)}
            if self.widget is not None:
                vl.refresh(self.fig_ops, vl.op_breakdown_figure(ops))
                self.state.overlay = True
                self._syncing = True
                self.w_overlay.value = True
                self._syncing = False
                self._draw_graphs()
            self._set_status("profile done: nodes coloured by their share of latency", "ok")

        self._run_bench_thread(work)

    def ablate(self, steps: list[str] | None = None) -> None:
        """What each fusion buys here: the plan without each fired step, timed against the full plan."""
        if not self._ready_to_measure():
            return

        def work():
            from ..measure.ablation import fusion_ablation
            from ..viz import latency as vl

            if self.widget is not None:
                self._read_profile_bar()
                self.w_ablate.disabled = True
            st = self.state
            try:
                res = fusion_ablation(self.export_result.source, st.bench_config(), plan=self.timeline.plan,
                                      exporter=st.exporter, attention=st.attention, opset=st.opset, steps=steps,
                                      progress=lambda stage, f: self._progress(f"what each fusion buys: {stage}", f))
            finally:
                if self.widget is not None:
                    self.progress.layout.visibility = "hidden"
                    self.w_ablate.disabled = False
            self.ablation = res
            if self.widget is not None:
                vl.refresh(self.fig_ablation, vl.ablation_figure([r.__dict__ for r in res.rows], res.noise_pct))
                self.w_ablation.value = self._ablation_html(res)
            t = res.tuned_plan
            self._set_status("each fusion measured; " + (f"on this machine switch off {', '.join(sorted(t.disabled))}"
                                                        if t.disabled else "every step helps or is within noise"),
                             "ok")

        self._run_bench_thread(work)

    @staticmethod
    def _ablation_html(res) -> str:
        rows = "".join(
            f"<tr><td>{html.escape(r.step)}</td><td>{html.escape(', '.join(f'{k} {v}' for k, v in sorted(r.fused_here.items())))}</td>"
            f"<td>{r.p50_without_ms:.2f}</td><td>{r.saves_ms:+.2f} ({r.saves_pct:+.1f}%)</td>"
            f"<td>{_badge(r.verdict == 'helps' if r.verdict != 'within noise' else None, r.verdict)}</td></tr>"
            for r in res.rows)
        t = res.tuned_plan
        tail = (f"full plan p50 {res.full_p50_ms:.2f} ms, noise band ±{res.noise_pct:.1f}%; "
                + (f"tuned plan: switch off {html.escape(', '.join(sorted(t.disabled)))}" if t.disabled
                   else "no step measured harmful"))
        return ("<div class='wb-table'><table><tr><th>step left out</th><th>what it fuses</th><th>p50 without (ms)</th>"
                "<th>the step saves (ms)</th><th>verdict</th></tr>" + rows + "</table></div>"
                f"<div style='font-size:11px'>{tail}</div>")

    # ----------------------------------------------------------------- report and close
    def report_data(self) -> dict:
        """Plain data for :func:`workbench.viz.report.write_report`."""
        from .. import __version__

        data: dict[str, Any] = {"version": __version__, "created": time.strftime("%Y-%m-%d %H:%M:%S"), "errors": []}
        if self.export_result is not None:
            data["model"] = self.export_result.source.describe()
            data["export"] = self.export_result.to_dict()
        if self.snapshots:
            data["fusion"] = {"engine": getattr(self.timeline, "engine_used", self.state.engine),
                              "engine_note": self.engine_note or getattr(self.timeline, "engine_note", ""),
                              "steps": [self._snap_dict(sn) for sn in self.snapshots]}
        if self.bench_result is not None:
            data["bench"] = self.bench_result.to_dict(samples=True)
        if self.ablation is not None:
            data["ablation"] = self.ablation.to_dict()
        if self.error:
            data["errors"].append(self.error)
        return data

    @staticmethod
    def _snap_dict(sn) -> dict:
        try:
            d = dict(sn.to_dict())
        except Exception:
            d = {}
        d.setdefault("name", _step_name(sn.step))
        d["name"] = _step_name(d["name"]) if not isinstance(d["name"], str) else d["name"]
        d.setdefault("nodes", sn.nodes)
        return d

    def save_report(self, path: str | os.PathLike | None = None) -> Path | None:
        """Write the HTML report (default: ``workbench-report-<time>.html`` in the current folder)."""
        from ..viz.report import write_report

        dest = Path(path) if path else Path.cwd() / f"workbench-report-{time.strftime('%Y%m%d-%H%M%S')}.html"
        try:
            out = write_report(self.report_data(), dest)
        except WorkbenchError as e:
            self._set_status(str(e), "error")
            return None
        except OSError as e:
            self._set_status(f"could not write the report to {dest}: {e.strerror or e}", "error")
            return None
        self._set_status(f"report saved to {out}", "ok")
        return out

    def _stop_threads(self, timeout: float = 10) -> None:
        """Stop the background parity checks and toggle warm-up, waiting up to ``timeout`` seconds."""
        self._closed = True
        deadline = time.monotonic() + timeout
        if self.timeline is not None:
            self.timeline.stop_warming(wait=False)
        t = self._parity_thread
        if t is not None and t.is_alive() and t is not threading.current_thread():
            t.join(max(0.0, deadline - time.monotonic()))
        if self.timeline is not None:
            self.timeline.wait_warm(max(0.0, deadline - time.monotonic()))

    def close(self) -> None:
        """Stop Netron and any running benchmark, and close the widgets."""
        self._closed = True
        self.close_netron()
        self.close_side_panel()
        if self.timeline is not None:
            self.timeline.stop_warming(wait=False)
        if self._bench is not None and not self._bench.done:
            try:
                self._bench.kill()
            except Exception:
                pass
        if self.widget is not None:
            self.widget.close()

    def __del__(self):
        try:
            self.close_netron()
        except Exception:
            pass
