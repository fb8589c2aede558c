"""The app's one state object: what the user chose and what the app computed, nothing drawn.

:class:`AppState` is a ``traitlets.HasTraits``, not a widget: the controller is its only writer,
panels observe it and redraw their own widgets. Values are replaced, never mutated in place (a
tuple or a new dict each time), so an observer always sees a change. The settings the compute
functions take (:class:`~workbench.config.ExportConfig`, :class:`~workbench.config.FusionPlan`,
:class:`~workbench.config.BenchConfig`) are derived from it, so a test drives the app by setting
fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import traitlets as T

from ..config import DEFAULT_MODEL, BenchConfig, ExportConfig, FusionPlan
from ..errors import ConfigError, ConfigTypeError

VIEWS = ("layer", "model")
#: Kinds of status line: plain, error, done, working.
STATUS_KINDS = ("info", "error", "ok", "busy")


@dataclass(frozen=True)
class Status:
    """The status line: one sentence and its kind."""

    text: str = "ready"
    kind: str = "info"


@dataclass(frozen=True)
class JobStatus:
    """One background job as the user sees it.

    Attributes:
        state: "running", "done", "error" or "cancelled".
        stage: what it is doing now, in words.
        progress: 0..1, or None when unknown.
        error: the one-line error when ``state == "error"``.
        elapsed_s: seconds since it started (final when it ended).
    """

    state: str = "running"
    stage: str = ""
    progress: float | None = None
    error: str | None = None
    elapsed_s: float = 0.0

    @property
    def running(self) -> bool:
        return self.state == "running"


@dataclass(frozen=True)
class GraphView:
    """What one graph pane draws: a layout and what to ring on it."""

    layout: Any  # workbench.graph.layout.Layout
    title: str
    highlight: frozenset = frozenset()
    selected: frozenset = frozenset()
    latency: dict | None = None
    providers: dict | None = None  # node id → the execution provider ONNX Runtime gave it (None: not known yet)


@dataclass(frozen=True)
class PairView:
    """The selected step: the graph before it and after it, their op counts and what the step did."""

    index: int
    step: str
    before: GraphView
    after: GraphView
    height: int
    yrange: tuple | None
    counts_before: dict = field(default_factory=dict)
    counts_after: dict = field(default_factory=dict)
    #: Lines on the step: what it is, what it fused so far, why not fused (plain text).
    diag: tuple = ()
    diag_warning: str = ""


class AppState(T.HasTraits):
    """What the user has chosen in the app, and what the app computed from it."""

    # ------------------------------------------------------------- settings (to_dict / from_dict)
    source = T.Unicode(DEFAULT_MODEL)
    exporter = T.Unicode("torchscript")
    opset = T.Int(None, allow_none=True)
    attention = T.Unicode("eager")
    engine = T.Unicode("auto")
    disabled = T.List(T.Unicode())
    step = T.Int(-1)  # index into the snapshots; -1 = the last
    view = T.Unicode("layer")  # "layer": one encoder layer; "model": the whole model
    layer = T.Int(0)
    expanded = T.List(T.Unicode())  # groups opened in the whole-model view
    selected = T.Unicode(None, allow_none=True)  # node id clicked in the "after" pane
    overlay = T.Bool(False)  # colour nodes by profiled latency
    constants = T.Bool(False)  # draw Constant / Identity-of-weight nodes (hidden by default: they crowd the view)
    expand_all = T.Bool(False)  # whole-model view: every layer open
    pane_width = T.Int(520)  # pixel width of each graph pane (two side by side)
    provider = T.Unicode("cpu")
    batch = T.Int(1)
    seq = T.Int(128)
    threads = T.Int(2)
    runs = T.Int(30)
    warmup = T.Int(5)
    int8 = T.Bool(False)  # the benchmark adds the int8 (dynamic quantization) variant
    bench_on_text = T.Bool(False)  # time on the given sentences' length mix instead of one fixed length
    #: The benchmark's variants as "i: step" keys; empty: unfused against fused (all steps).
    variants = T.List(T.Unicode())

    # ------------------------------------------------------------- computed (the controller writes these)
    status = T.Instance(Status, kw={})
    error = T.Unicode(None, allow_none=True)
    jobs = T.Dict()  # job name → JobStatus
    snapshots = T.Tuple()
    rows = T.Tuple()  # the fusion panel's rows (dicts), see Controller.step_rows
    engine_line = T.Unicode("")  # which engine runs, and under auto why
    engine_note = T.Unicode("")
    warm = T.Unicode("")  # one line on the toggle warm-up
    layer_max = T.Int(0)
    pair = T.Instance(PairView, allow_none=True)
    session_line = T.Unicode("")
    netron_html = T.Unicode("")
    providers = T.Tuple(("cpu",))
    gpu_note = T.Unicode("")  # the latency panel's line: what its GPU column times, or why there is none
    series = T.Dict()  # variant → tuple of latencies (ms) while a benchmark streams
    bench_result = T.Any(None)
    explanation = T.Tuple()  # sentences on the measured rates and this CPU
    op_breakdown = T.Dict()  # label → op type → ms
    kernels = T.Dict()  # label → {"note": where the GPU times come from, "ms": GPU kernel → ms}; {} on the CPU
    ablation = T.Any(None)  # the first workload's AblationResult (the figure's bars)
    #: Workload kind → this machine's checked plan on it (workbench.measure.tune.plan.WorkloadPlan), from "what each
    #: fusion buys": the app's text as served (latency, throughput) with "time on the text" on, else the shape.
    plans = T.Dict()
    tune = T.Any(None)  # the last tune's result (workbench.measure.tune.result.TuneResult), ``saved`` when saved
    report_path = T.Unicode("")
    #: Real text (issue: real models, real text): the sentences in use and their description.
    sentences = T.Tuple()
    text_line = T.Unicode("")
    answers = T.Tuple()  # per-precision answer rows (int8, fp16 against the unfused export)
    sweep = T.Any(None)  # the last fleet sweep's result (dict), see workbench.measure.fleet.run
    #: Fusion rules added in this session (``app.add_rule``), by name, in the order added.
    rules = T.Tuple()

    SETTINGS = ("source", "exporter", "opset", "attention", "engine", "disabled", "step", "view", "layer",
                "expanded", "selected", "overlay", "constants", "pane_width", "provider", "batch", "seq",
                "threads", "runs", "warmup")

    def __init__(self, **kw: Any):
        unknown = set(kw) - set(self.trait_names())
        if unknown:
            raise ConfigError(f"unknown app setting(s): {', '.join(sorted(unknown))}")
        try:
            super().__init__(**kw)
        except T.TraitError as e:  # traitlets' word for a value of the wrong type
            raise ConfigTypeError(f"bad app setting: {' '.join(str(e).split())[:200]}") from None

    def check_settings(self) -> None:
        """Raise :class:`~workbench.errors.ConfigError` naming a setting out of range: the export, fusion and
        benchmark settings are derived here, as every run derives them."""
        self.export_config()
        self.fusion_plan()
        self.bench_config()

    @T.validate("view")
    def _check_view(self, proposal):
        if proposal["value"] not in VIEWS:
            raise ConfigError(f"view must be one of {VIEWS}, not {proposal['value']!r}")
        return proposal["value"]

    @T.validate("pane_width")
    def _check_width(self, proposal):
        if not 240 <= int(proposal["value"]) <= 2000:
            raise ConfigError(f"pane_width must be between 240 and 2000 pixels, not {proposal['value']!r}")
        return int(proposal["value"])

    # ------------------------------------------------------------- derived settings
    def export_config(self) -> ExportConfig:
        return ExportConfig(exporter=self.exporter, opset=self.opset, attention=self.attention)

    def fusion_plan(self) -> FusionPlan:
        return FusionPlan(engine=self.engine, disabled=frozenset(self.disabled))

    def bench_config(self) -> BenchConfig:
        return BenchConfig(provider=self.provider, batch=self.batch, seq=self.seq, threads=self.threads,
                           runs=self.runs, warmup=self.warmup)

    def set_step_enabled(self, name: str, on: bool) -> None:
        d = [s for s in self.disabled if s != name]
        if not on:
            d.append(name)
        self.disabled = sorted(d)

    def export_key(self) -> tuple:
        """What, when changed, needs a new export (the rest needs only a new fusion run)."""
        return (self.source, self.exporter, self.opset, self.attention)

    def job(self, name: str) -> JobStatus | None:
        return self.jobs.get(name)

    def busy(self, *names: str) -> bool:
        """Whether any of these jobs (any job, if none named) is running."""
        return any(j.running for n, j in self.jobs.items() if not names or n in names)

    # ------------------------------------------------------------- persistence of the settings
    def to_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, (list, tuple)) else v)
                for k, v in ((k, getattr(self, k)) for k in self.SETTINGS)}

    @classmethod
    def from_dict(cls, d: dict) -> "AppState":
        unknown = set(d) - set(cls.SETTINGS)
        if unknown:
            raise ConfigError(f"unknown app setting(s): {', '.join(sorted(unknown))}")
        return cls(**d)

    def __eq__(self, other) -> bool:
        return isinstance(other, AppState) and self.to_dict() == other.to_dict()

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"AppState({', '.join(f'{k}={v!r}' for k, v in self.to_dict().items())})"


#: The earlier name of the state class.

__all__ = ["AppState", "Status", "JobStatus", "GraphView", "PairView", "VIEWS"]
