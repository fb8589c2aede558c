"""The notebook app: ``Workbench("bert-base")`` shows it.

Widgets only: the app holds a :class:`~workbench.ui.state.UIState`, calls the
package's functions (export, fusion timeline, benchmark worker, profiler) and
draws what they return with :mod:`workbench.viz`. Export and fusion run in a
thread; benchmarks and profiles run in the runtime's worker process; figures
are updated in place inside ``batch_update()`` / ``hold_sync()``. Every
expected error is shown in the app's status line, never as a traceback.
"""

from __future__ import annotations

import dataclasses
import html
import os
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable

from ..config import ATTENTIONS, ENGINES, EXPORTERS
from ..errors import WorkbenchError
from . import compat
from .state import UIState

#: Fused ops worth naming in the timeline table.
_HEADLINE = ("Attention", "MultiHeadAttention", "SkipLayerNormalization", "LayerNormalization", "BiasGelu", "Gelu",
             "FastGelu", "EmbedLayerNormalization", "SkipSimplifiedLayerNormalization")

#: Pixel width of each graph pane (two side by side fit JupyterLab's notebook column).
GRAPH_WIDTH = 540

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
</style>
"""


def _step_name(step) -> str:
    return str(getattr(step, "name", step) or "export")


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
    """

    def __init__(self, source: str | os.PathLike = "bert-base", *, exporter: str = "torchscript",
                 opset: int | None = None, attention: str = "eager", engine: str = "auto",
                 autorun: bool = True, background: bool = True, **state: Any):
        self.state = UIState(source=str(source), exporter=exporter, opset=opset, attention=attention,
                             engine=engine, **state)
        self.background = background
        self.error: str | None = None
        self.export_result = None
        self.timeline = None
        self.snapshots: list = []
        self.bench_result = None
        self.profiles: dict[str, Any] = {}
        self.series: dict[str, list[float]] = {}
        self._tables: dict[int, Any] = {}
        self._views: dict[str, Any] = {}
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
        self.w_opset = W.Dropdown(options=[("default", None), ("14", 14), ("17", 17), ("18", 18)], value=s.opset,
                                  description="opset", layout=L(width="150px"))
        self.w_attention = W.Dropdown(options=ATTENTIONS, value=s.attention, description="attention", layout=L(width="180px"))
        self.w_engine = W.Dropdown(options=ENGINES, value=s.engine, description="engine", layout=L(width="170px"),
                                   tooltip="fusion engine: ONNX Runtime's optimizer, onnxscript's rules, or both (auto)")
        self.w_load = W.Button(description="Load", button_style="primary", icon="refresh", layout=L(width="90px"))
        self.w_load.on_click(lambda _: self.load())
        for w in (self.w_exporter, self.w_opset, self.w_attention, self.w_engine):
            w.observe(self._on_model_bar, "value")
        model_bar = W.HBox([self.w_source, self.w_exporter, self.w_opset, self.w_attention, self.w_engine,
                            self.w_load, self.progress], layout=L(flex_flow="row wrap"))
        model_bar.add_class("wb-model-bar")
        # Fusion panel
        self.toggles: dict[str, Any] = {}
        self.w_toggles = W.HBox(layout=L(flex_flow="row wrap"))
        self.w_toggles.add_class("wb-toggles")
        self._make_toggles()
        self.w_step = W.SelectionSlider(options=[("export", 0)], value=0, description="step",
                                        continuous_update=False, layout=L(width="98%"))
        self.w_step.add_class("wb-step-slider")
        self.w_step.observe(self._on_step, "value")
        self.w_badges = W.HTML()
        self.w_badges.add_class("wb-badges")
        self.w_parity = W.Button(description="Check parity", icon="balance-scale", layout=L(width="130px"),
                                 tooltip="compare every snapshot with the unfused model on seeded inputs "
                                         "(batch 1 and 2, sequence 8 and 128, padded masks; atol 1e-4, rtol 1e-3)")
        self.w_parity.on_click(lambda _: self.check_parity())
        self.w_session = W.Button(description="Session layer", icon="layer-group", layout=L(width="130px"),
                                  tooltip="what ONNX Runtime's own session-time fusion (ORT_ENABLE_ALL) adds on top "
                                          "of the selected snapshot")
        self.w_session.on_click(lambda _: self.show_session_layer())
        self.w_session_out = W.HTML()
        self.w_counts = W.HTML()
        self.w_counts.add_class("wb-counts-box")
        self.w_diag = W.HTML()
        self.w_diag.add_class("wb-diagnostics")
        fusion_panel = W.HBox([
            W.VBox([W.HTML("<div class='wb-section'>Fusion steps (click to switch off or on)</div>"), self.w_toggles,
                    self.w_step, self.w_badges, W.HBox([self.w_parity, self.w_session]), self.w_session_out],
                   layout=L(width="55%", min_width="320px")),
            W.VBox([W.HTML("<div class='wb-section'>Op counts before → after the selected step</div>"),
                    self.w_diag, self.w_counts], layout=L(width="45%", min_width="280px"))],
            layout=L(width="100%", flex_flow="row wrap"))
        fusion_panel.add_class("wb-fusion-panel")
        # Graph panel
        self.w_view = W.ToggleButtons(options=[("one layer", "layer"), ("whole model", "model")], value=s.view,
                                      style={"button_width": "95px"})
        self.w_view.observe(self._on_view, "value")
        self.w_layer = W.BoundedIntText(value=s.layer, min=0, max=0, description="layer", layout=L(width="140px"))
        self.w_layer.observe(self._on_view, "value")
        self.w_expand = W.Checkbox(value=False, description="expand all layers", indent=False, layout=L(width="150px"))
        self.w_expand.observe(self._on_view, "value")
        self.w_overlay = W.Checkbox(value=s.overlay, description="latency overlay", indent=False, layout=L(width="140px"))
        self.w_overlay.observe(self._on_view, "value")
        self.w_constants = W.Checkbox(value=s.constants, description="constants", indent=False, layout=L(width="100px"),
                                      tooltip="draw Constant nodes too (hidden by default: they crowd the view)")
        self.w_constants.observe(self._on_constants, "value")
        self.w_netron = W.Button(description="Netron", icon="external-link", tooltip="open this snapshot in Netron",
                                 layout=L(width="100px"))
        self.w_netron.on_click(lambda _: self.open_netron())
        # Explicit widths: a FigureWidget does not follow its flex box, and overflowed the half-width panes.
        self.fig_before = go.FigureWidget(layout=dict(height=360, width=GRAPH_WIDTH, title=dict(text="before")))
        self.fig_after = go.FigureWidget(layout=dict(height=360, width=GRAPH_WIDTH, title=dict(text="after")))
        self.w_before = W.Box([self.fig_before], layout=L(width=f"{GRAPH_WIDTH + 10}px", overflow="hidden"))
        self.w_after = W.Box([self.fig_after], layout=L(width=f"{GRAPH_WIDTH + 10}px", overflow="hidden"))
        self.w_before.add_class("wb-graph-before")
        self.w_after.add_class("wb-graph-after")
        self.w_netron_out = W.HTML()
        graph_panel = W.VBox([
            W.HTML("<div class='wb-section'>Graph: before and after the selected step "
                   "<span style='font-weight:normal;font-size:11px'>(red rings: nodes the step replaced, and what it "
                   "emitted; click a node on the right to see what it replaced)</span></div>"),
            W.HBox([self.w_view, self.w_layer, self.w_expand, self.w_overlay, self.w_constants, self.w_netron],
                   layout=L(flex_flow="row wrap")),
            W.HBox([self.w_before, self.w_after], layout=L(flex_flow="row wrap")), self.w_netron_out],
            layout=L(width="100%"))
        graph_panel.add_class("wb-graph-panel")
        # Profile panel
        from ..runtime.session import cuda_status

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
        self.w_report = W.Button(description="Save report", icon="save", layout=L(width="120px"))
        self.w_report.on_click(lambda _: self.save_report())
        from ..viz import latency as vl

        self.fig_live = go.FigureWidget(vl.live_figure({}))
        self.fig_dist = go.FigureWidget(vl.distribution_figure({}))
        self.fig_pct = go.FigureWidget(vl.percentile_figure({}))
        self.fig_ops = go.FigureWidget(vl.op_breakdown_figure({}))
        self.w_results = W.HTML()
        self.w_results.add_class("wb-results")
        live_box = W.Box([self.fig_live], layout=L(width="50%"))
        live_box.add_class("wb-live-plot")
        profile_panel = W.VBox([
            W.HTML("<div class='wb-section'>Latency (measured in a worker process, variants interleaved, "
                   "thread spinning off)</div>"),
            W.HBox([self.w_provider, self.w_batch, self.w_seq, self.w_threads, self.w_runs], layout=L(flex_flow="row wrap")),
            W.HBox([self.w_variants, W.VBox([self.w_int8, W.HBox([self.w_run, self.w_stop, self.w_profile, self.w_report])])]),
            W.HBox([live_box, W.Box([self.fig_dist], layout=L(width="50%"))]),
            W.HBox([W.Box([self.fig_pct], layout=L(width="50%")), W.Box([self.fig_ops], layout=L(width="50%"))]),
            self.w_results])
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

    def _make_toggles(self) -> None:
        import ipywidgets as W

        try:
            from ..fusion import CATALOG
        except ImportError:
            CATALOG = ()
        groups: dict[str, list] = {"fusion": [], "cleanup": []}
        engine = getattr(self.timeline, "engine_used", None) or self.state.engine
        plan = self.state.fusion_plan()
        for step in CATALOG:
            if not getattr(step, "in_bert", True):
                continue  # LLM-only rules (rotary, RMS norm): a toggle that can never do anything only confuses
            tip = " ".join(str(x) for x in (getattr(step, "effect", ""), f"matches: {getattr(step, 'matches', '')}",
                                            f"emits: {getattr(step, 'emits', '')}") if x)
            on = plan.enabled(step.name, getattr(step, "default_on", True))
            t = W.ToggleButton(value=on, description=getattr(step, "title", step.name) or step.name, tooltip=tip,
                               icon="check" if on else "times", layout=W.Layout(width="auto"))
            t.add_class(f"wb-step-{step.name.lower().replace('_', '-')}")
            t.observe(lambda ch, name=step.name: self._on_toggle(name, ch["new"]), "value")
            t.observe(lambda ch, t=t: setattr(t, "icon", "check" if ch["new"] else "times"), "value")
            self.toggles[step.name] = t
            groups["cleanup" if getattr(step, "kind", "fusion") == "cleanup" else "fusion"].append(t)
        toggles = [W.HTML("<div class='wb-sub'>fusions</div>", layout=W.Layout(width="100%")), *groups["fusion"],
                   W.HTML("<div class='wb-sub'>graph clean-ups</div>", layout=W.Layout(width="100%")),
                   *groups["cleanup"]]
        self.w_toggles.children = toggles
        self._filter_toggles(engine)

    def _filter_toggles(self, engine: str) -> None:
        """Show only the steps ``engine`` runs (our own rules run inside the ORT chain)."""
        try:
            from ..fusion import BY_NAME
        except ImportError:
            return
        for name, t in self.toggles.items():
            engines = getattr(BY_NAME.get(name), "engines", ())
            runs = engine not in ("ort", "onnxscript") or engine in engines or (
                engine == "ort" and "workbench" in engines)
            t.layout.display = None if runs else "none"

    # ----------------------------------------------------------------- display
    def _repr_mimebundle_(self, include=None, exclude=None):
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
        tl = self.timeline = Timeline(self.export_result.path, s.fusion_plan(), **kw)
        snaps = tl.run()
        note = tl.engine_note or ""
        if s.engine == "auto" and tl.engine_used:
            # Keep the engine auto chose: a later toggle must not switch engines (and step lists)
            # under the user. Its snapshots are cached, so this costs nothing.
            snaps = tl.set_plan(dataclasses.replace(tl.plan, engine=tl.engine_used))
        self._set_snapshots(snaps)
        if self.widget is not None:
            self._filter_toggles(tl.engine_used)
        self.timings["fusion_s"] = time.perf_counter() - t1
        # Precompute each single toggle in the background, at low priority: a click is then a lookup.
        tl.start_warming()
        last = self.snapshots[-1] if self.snapshots else None
        summary = f"{src.label}: {self.export_result.nodes} nodes exported"
        if last is not None:
            summary += f" → {last.nodes} after fusion ({getattr(self.timeline, 'engine_used', s.engine)})"
        self._set_status(summary + (f". {note}" if note else ""), "ok")

    # ----------------------------------------------------------------- fusion panel
    def _on_toggle(self, name: str, on: bool) -> None:
        if getattr(self, "_syncing", False):
            return
        self.toggle(name, on)

    def toggle(self, name: str, on: bool) -> None:
        """Switch catalog step ``name`` on or off and re-run the timeline."""
        self.state.set_step_enabled(name, on)
        if self.widget is not None and name in self.toggles and self.toggles[name].value != on:
            self._syncing = True
            try:
                self.toggles[name].value = on
            finally:
                self._syncing = False
        if self.timeline is None:
            return

        def work():
            t0 = time.perf_counter()
            self._set_status(f"{'enabling' if on else 'disabling'} {name}", "busy")
            self._set_snapshots(self.timeline.toggle(name, on))
            self.timings["toggle_s"] = time.perf_counter() - t0
            last = self.snapshots[-1]
            self._set_status(f"{name} {'on' if on else 'off'}: {last.nodes} nodes after fusion "
                             f"({self.timings['toggle_s']:.2f} s)", "ok")

        self._run("toggle", work)

    def _set_snapshots(self, snaps) -> None:
        self.snapshots = list(snaps)
        self._tables.clear()
        self._views.clear()
        if self.widget is None:
            return
        opts = [(f"{i}: {_step_name(sn.step)}", i) for i, sn in enumerate(self.snapshots)]
        names = [_step_name(sn.step) for sn in self.snapshots]
        chosen = getattr(self, "_chosen", None)  # keep the step the user picked, by name
        want = names.index(chosen) if chosen in names else self.default_step()
        self._syncing = True
        try:
            self.w_step.options = opts
            self.w_step.value = want
        finally:
            self._syncing = False
        self.state.step = want
        self.w_variants.options = [o[0] for o in opts]
        self.w_variants.value = tuple({opts[0][0]: None, opts[-1][0]: None})
        layers = self._table(0).layers
        self.w_layer.max = max(layers) if layers else 0
        self._draw_badges()
        self.refresh()

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

    def _table(self, i: int):
        from ..graph.layout import node_table, without_ops

        if i not in self._tables:
            sn = self.snapshots[i]
            layer_of = getattr(getattr(sn, "diff", None), "layer_of", None) or None
            tab = node_table(getattr(sn, "skeleton", None) or sn.model, layer_of=layer_of)
            self._tables[i] = tab if self.state.constants else without_ops(tab, ("Constant",))
        return self._tables[i]

    def _layout(self, i: int):
        from ..graph.layout import layout_graph

        s = self.state
        key = (i, s.view, s.layer, tuple(sorted(s.expanded)))
        if key not in self._views:
            tab = self._table(i)
            if s.view == "layer" and s.layer in tab.layers:
                lay = layout_graph(tab, layer=s.layer)
            else:
                groups = [g for g in tab.groups if g.startswith("layer ")]
                collapsed = [] if self.widget is not None and self.w_expand.value else [g for g in groups if g not in s.expanded]
                lay = layout_graph(tab, collapsed=collapsed)
            self._views[key] = lay
        return self._views[key]

    def refresh(self) -> None:
        """Redraw counts, diagnostics and both graphs for the selected step."""
        if self.widget is None or not self.snapshots:
            return
        t0 = time.perf_counter()
        b, a = self._pair()
        before, after = self.snapshots[b], self.snapshots[a]
        self.w_counts.value = counts_table_html(dict(before.histogram), dict(after.histogram))
        self._draw_badges()
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
                    f"{self.snapshots[i].nodes} → {extra['nodes']} nodes; adds {html.escape(added)}")
            if self.widget is not None:
                self.w_session_out.value = f"<div style='font-size:12px'>{text}</div>"
            self._set_status("session layer shown", "ok")

        self._run("session layer", work)

    def check_parity(self) -> None:
        """Check every snapshot against the unfused model; badges turn green or red as results arrive."""
        if self.timeline is None:
            self._set_status("load a model first", "error")
            return
        tl, snaps = self.timeline, list(self.snapshots)

        def work():
            for i in range(1, len(snaps)):
                if self.timeline is not tl or self._closed:
                    return  # a reload replaced the timeline: stale results are dropped
                self._set_status(f"parity: checking step {i} of {len(snaps) - 1}", "busy")
                snaps[i].check_parity(reference=tl.reference())
                self._draw_badges()
            bad = [_step_name(sn.step) for sn in snaps[1:] if sn.parity is not None and not sn.parity.ok]
            self._set_status("parity: every step within atol 1e-4, rtol 1e-3" if not bad else
                             f"parity: {', '.join(bad)} differ from the unfused model beyond atol 1e-4",
                             "ok" if not bad else "error")

        self._run("parity", work)

    def _draw_badges(self) -> None:
        """The timeline as a small table: step, nodes after it, what it fused, parity badge."""
        if self.widget is None:
            return
        rows = []
        sel = self._pair()[1] if self.snapshots else -1
        for i, sn in enumerate(self.snapshots):
            p = getattr(sn, "parity", None)
            if p is None:
                ok, tip = None, "parity not checked (press Check parity)"
            else:
                ok = bool(getattr(p, "ok", p))
                tip = (f"max abs diff {getattr(p, 'max_abs_diff', float('nan')):.1e} over {getattr(p, 'cases', '?')} "
                       f"cases ({'within' if ok else 'beyond'} atol 1e-4, rtol 1e-3)")
            here = ", ".join(f"{'+' if n > 0 else ''}{n} {op}" for op, n in (getattr(sn, "fused_here", {}) or {}).items()
                             if n and op in _HEADLINE)
            style = " style='font-weight:600;background:#eef4ff'" if i == sel else ""
            rows.append(f"<tr{style}><td>{i}</td><td>{html.escape(_step_name(sn.step))}</td><td>{sn.nodes}</td>"
                        f"<td>{html.escape(here)}</td><td>{_badge(ok, 'ok' if ok else ('differs' if ok is False else '?'), tip)}</td></tr>")
        self.w_badges.value = ("<div class='wb-table wb-timeline' style='font-size:11px;max-height:260px;overflow-y:auto'>"
                               "<table><tr><th>#</th><th>step</th><th>nodes</th><th>fused here</th><th>parity</th></tr>"
                               + "".join(rows) + "</table></div>")

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

    def _draw_graphs(self) -> None:
        from ..viz.graph import update_graph_figure

        b, a = self._pair()
        lb, la = self._layout(b), self._layout(a)
        diff = getattr(self.snapshots[a], "diff", None) if a != b else None
        removed = self._table(b).resolve(getattr(diff, "removed", []) or [])
        added = self._table(a).resolve(getattr(diff, "added", []) or [])
        rem_items = self._items_for(lb, removed)
        add_items = self._items_for(la, added)
        sel_after, sel_before = self._selection(lb, la, diff)
        name = _step_name(self.snapshots[a].step)
        with self.fig_before.batch_update(), self.fig_after.batch_update():
            update_graph_figure(self.fig_before, lb, highlight=rem_items, selected=sel_before,
                                latency=self._latency_map(b),
                                title=f"before {name}: {lb.title}")
            update_graph_figure(self.fig_after, la, highlight=add_items, selected=sel_after,
                                latency=self._latency_map(a),
                                title=f"after {name}: {la.title}")
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
        self._tables.clear()
        self._views.clear()
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
        from ..runtime.bench import Variant

        idx = {f"{i}: {_step_name(sn.step)}": i for i, sn in enumerate(self.snapshots)}
        chosen = list(names if names is not None else (self.w_variants.value if self.widget else []))
        if not chosen:
            chosen = [next(iter(idx))] + ([list(idx)[-1]] if len(idx) > 1 else [])
        out = []
        for label in chosen:
            sn = self.snapshots[idx[label]]
            # ORT's own session fusions off, so a gain comes from the step itself.
            out.append(Variant(_step_name(sn.step) if idx[label] else "unfused", sn.model.SerializeToString(),
                               provider=self.state.provider, level="disable"))
        if self.widget is not None and self.w_int8.value:
            from ..runtime.precision import quantize_int8

            self._set_status("quantizing the last snapshot to int8", "busy")
            q = quantize_int8(self.snapshots[-1].model)
            q = q if isinstance(q, (bytes, str, Path)) else q.SerializeToString()
            out.append(Variant("fused + int8", q, provider=self.state.provider, level="all"))
        return out

    def run_benchmark(self, names: list[str] | None = None) -> None:
        """Time the chosen variants in the worker; the plots grow while it runs."""
        if not self.snapshots:
            self._set_status("load a model first", "error")
            return
        if self._bench is not None and not self._bench.done:
            self._set_status("a benchmark is already running: stop it first", "error")
            return
        if self.widget is not None:
            self._read_profile_bar()

        def work():
            from ..runtime.bench import stream_benchmark

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
            rows.append(f"<tr><td>{html.escape(v.name)}</td><td>{f(v.p50_ms)}</td><td>{f(v.p90_ms)}</td>"
                        f"<td>{f(v.p99_ms)}</td><td>{v.runs}</td><td>{sp}</td><td>{f(v.floor_ratio)}</td>"
                        f"<td>{_badge(par.get('ok'), 'ok' if par.get('ok') else ('—' if not par else 'diff'))}</td></tr>")
        floor = f"<div style='font-size:11px'>hardware floor {r.floor_ms:.2f} ms</div>" if r.floor_ms else ""
        return ("<div class='wb-table'><table><tr><th>variant</th><th>p50 ms</th><th>p90 ms</th><th>p99 ms</th>"
                "<th>runs</th><th>speed-up</th><th>x floor</th><th>parity</th></tr>" + "".join(rows) + "</table></div>" + floor)

    def profile(self, indices: list[int] | None = None) -> None:
        """Profile operators of the before/after snapshots: op breakdown and latency overlay."""
        if not self.snapshots:
            self._set_status("load a model first", "error")
            return

        def work():
            from ..runtime.profile import profile_ops
            from ..viz import latency as vl

            b, a = self._pair()
            for i in (indices or sorted({b, a})):
                sn = self.snapshots[i]
                self._set_status(f"profiling {_step_name(sn.step)}", "busy")
                self.profiles[i] = profile_ops(sn.model.SerializeToString(), self.state.bench_config(),
                                               provider=self.state.provider, level="disable", name=_step_name(sn.step))
            ops = {f"{i}: {self.profiles[i].variant}": {k: v / 1e3 for k, v in self.profiles[i].op_type_totals().items()}
                   for i in sorted(self.profiles)}
            if self.widget is not None:
                vl.refresh(self.fig_ops, vl.op_breakdown_figure(ops))
                self.state.overlay = True
                self._syncing = True
                self.w_overlay.value = True
                self._syncing = False
                self._views.clear()
                self._draw_graphs()
            self._set_status("profile done: nodes coloured by their share of latency", "ok")

        self._run_bench_thread(work)

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
                              "engine_note": getattr(self.timeline, "engine_note", ""),
                              "steps": [self._snap_dict(sn) for sn in self.snapshots]}
        if self.bench_result is not None:
            data["bench"] = self.bench_result.to_dict(samples=True)
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

    def close(self) -> None:
        """Stop Netron and any running benchmark, and close the widgets."""
        self._closed = True
        self.close_netron()
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
