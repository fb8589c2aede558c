"""A variant as one object: :class:`Recipe` (what it is, what it needs, how it is built and run) and
:class:`Build` (what a recipe builds from: the model, its export, the plan, the text).

A recipe is data plus two functions, like a fusion :class:`~workbench.fusion.rule.Rule`: ``build(ctx)``
(through ``make(ctx)``) returns the :class:`~workbench.measure.harness.results.Variant` the benchmark worker times (its model built and
cached on the way), and ``runner`` names the class that runs its ``kind`` inside the worker. Nothing here
imports torch, onnxruntime or an engine: the registry is read by the CLI's cold start and by the worker
before its environment is set.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Callable

from ...config import ExportConfig
from ...export import export
from ...fusion.catalog import session_optimizers_off

#: The engines a recipe runs on, as a user names them.
ENGINES = {"pytorch": "PyTorch", "onnxruntime": "ONNX Runtime", "openvino": "OpenVINO", "ctranslate2": "CTranslate2"}
#: What a recipe may need, in words (``Recipe.needs``).
NEEDS = {"pytorch": "the PyTorch model (not an ONNX file)", "fused": "the fused model",
         "text": "sentences to calibrate or guard on", "plan": "this machine's fusion plan (a short ablation)"}
#: Why a recipe that needs the PyTorch model is left out for an ONNX file.
TORCH_SKIPPED = "an ONNX file carries no PyTorch model, so there is no PyTorch eager variant to time"
Progress = Callable[[str, float], None]


def _noop(stage: str, fraction: float) -> None:
    pass


def _ok(device: str = "cpu") -> tuple[bool, str]:
    return True, ""


@dataclass(frozen=True)
class Tolerance:
    """How far a variant's outputs may be from PyTorch fp32's on the same inputs (``workbench tune --provider
    cuda`` holds each GPU-tuned recipe to its own)."""

    max_abs_diff: float
    min_cosine: float

    def holds(self, parity: dict | None) -> bool:
        return bool(parity) and parity["max_abs_diff"] <= self.max_abs_diff and parity["cosine"] >= self.min_cosine

    def words(self) -> str:
        return f"max abs diff ≤ {self.max_abs_diff:g}, cosine ≥ {self.min_cosine:g} against PyTorch fp32"


#: fp32 on the GPU: ONNX Runtime's CUDA provider uses TF32 MatMuls by default on Ampere and later.
FP32_GPU = Tolerance(max_abs_diff=2e-2, min_cosine=0.9999)
#: fp16 weights and activations (LayerNorm and Softmax kept fp32 by the converter's block list).
FP16 = Tolerance(max_abs_diff=6e-2, min_cosine=0.999)


@dataclass(frozen=True)
class Recipe:
    """One variant: an engine at a precision on a device, built from the model.

    Attributes:
        name: the stable key (JSON, ``--variants``); label: what a user reads.
        engine: a key of :data:`ENGINES`. kind: the worker's runner for it (``Variant.kind``);
        runner: ``"module:Class"`` of that runner, given by the first recipe of a new kind.
        devices: where it runs ("cpu", "cuda"); device_note: why not elsewhere, or how it differs per device,
            in words. precision: "fp32", "int8", "fp16", or "default" (the engine's own choice on this CPU).
        peer: an engine a user would pick instead of ONNX Runtime (the tune compares with these).
        needs: keys of :data:`NEEDS`. check: ``(device) -> (ok, why)``: its package, compiler or GPU is here.
        supports: ``(ModelSource) -> why not`` ("" when it can build this model).
        build: ``(Build, name) -> Variant`` (call :meth:`make`), its model built and cached on the way.
        from_fused: the precision step alone, ``fused path -> path`` (the fleet sweep's precisions).
        standard: one of ``workbench bench``'s first five; default_on: providers it is timed on by default.
        tune: the devices ``workbench tune`` measures it on (``--provider``); tolerance: its outputs' bound
            against PyTorch fp32 there on the GPU (every recipe tuned on "cuda" has one). fixed_shape: it
            replays one captured shape (CUDA graphs), so a text's mix of lengths is refused.
        summary_peer: ``workbench report`` times it beside its standard variants where it is installed (one quick
            peer, so the report can name a faster engine than ONNX Runtime on this CPU).
        card: the model card's precision line. wins: why it won, when
            it wins the tune without being int8. report_key/report: the tune result's key and its build report.
        app: offered in the app's latency panel beside the snapshots (built from the app's fused snapshot).
    """

    name: str
    label: str
    engine: str
    build: Callable[["Build", str], object]
    kind: str = "onnx"
    runner: str | None = None
    devices: tuple[str, ...] = ("cpu", "cuda")
    device_note: str = ""
    precision: str = "fp32"
    peer: bool = False
    needs: tuple[str, ...] = ()
    check: Callable[[str], tuple[bool, str]] = _ok
    supports: Callable[[object], str] | None = None
    from_fused: Callable[[Path], Path] | None = None
    standard: bool = False
    default_on: tuple[str, ...] = ()
    tune: tuple[str, ...] = ("cpu",)
    tolerance: Tolerance | None = None
    fixed_shape: bool = False
    summary_peer: bool = False
    card: str = "Precision: fp32 throughout."
    wins: str = ""
    report_key: str | None = None
    report: Callable[[object], dict | None] | None = None
    app: bool = False

    def __post_init__(self):
        if self.engine not in ENGINES:
            raise ValueError(f"recipe {self.name}: engine {self.engine!r} is not one of {', '.join(ENGINES)}")
        unknown = [n for n in self.needs if n not in NEEDS]
        if unknown:
            raise ValueError(f"recipe {self.name}: unknown needs {unknown}")
        if not set(self.tune) <= set(self.devices):
            raise ValueError(f"recipe {self.name}: tuned on {self.tune}, but runs on {self.devices}")
        if "cuda" in self.tune and self.tolerance is None:
            raise ValueError(f"recipe {self.name}: tuned on the GPU, it needs a tolerance")

    @property
    def quantized(self) -> bool:
        """Its weights (and MatMuls) are int8: its answers are checked even when the user gave no text."""
        return self.precision == "int8"

    def make(self, ctx: "Build"):
        """The :class:`~workbench.measure.harness.results.Variant` to time, built from ``ctx`` (cached)."""
        return self.build(ctx, self.name)

    def available(self, src=None, provider: str = "cpu") -> tuple[bool, str]:
        """``(ok, why)``: its engine (and, on ``provider`` "cuda", the GPU it needs) is here and, given a model,
        it can build that model."""
        if src is not None:
            if "pytorch" in self.needs and src.kind == "onnx":
                return False, TORCH_SKIPPED
            why = self.supports(src) if self.supports else ""
            if why:
                return False, why
        return self.check(provider)


@dataclass(frozen=True)
class ShippedPlan:
    """The graph this machine's plan ships (what the ``tuned`` recipe builds): the export fused under ``plan``
    (session level "all", the switched-off steps' session transformers kept off), or, ``plan`` None, the unfused
    export at level "disable" (the check found every fused graph slower on the workload: never slower than the
    graph it started from). ``words``: why, in one sentence; ``workload``: what it was measured on."""

    plan: object = None
    words: str = ""
    workload: str = ""


@dataclass
class Build:
    """What recipes build from; the export and the fused model are made once, when a recipe first asks.

    ``snapshot``: the fused model the app shows (its last snapshot, a ModelProto or bytes), built from
    ``plan`` there: the fusions the user switched on; None: the cached :func:`~workbench.measure.variants.models.fuse_bert`
    of the export under ``plan``. ``text`` / ``search_text``: sentences to guard and calibrate on (default:
    the built-in ones); ``tuned_plan``: this machine's plan (a :class:`ShippedPlan`, or a bare FusionPlan), or a
    callable ``(Build) -> plan`` giving it (:func:`workbench.measure.tune.plan.tuned_plan_of`); the ``tuned`` recipe
    needs it, its caller passes it in.
    """

    src: object
    provider: str = "cpu"
    attention: str = "eager"
    exporter: str = "torchscript"
    opset: int | None = None
    plan: object = None
    progress: Progress = _noop
    text: object = None
    search_text: object = None
    threads: int = 2
    tuned_plan: object = None
    snapshot: object = None
    built: dict = field(default_factory=dict)

    @cached_property
    def export_path(self) -> Path:
        return Path(export(self.src, ExportConfig(exporter=self.exporter, attention=self.attention,
                                                  opset=self.opset)).path)

    @property
    def heads(self) -> int:
        return self.src.num_heads or 0

    @property
    def hidden(self) -> int:
        return self.src.hidden_size or 0

    @cached_property
    def fused(self) -> Path:
        """The export after the fusion timeline under ``plan``, as a file (cached)."""
        from .models import fuse_bert  # lazy: models.py imports this module at its load

        return fuse_bert(self.export_path, plan=self.plan, **self.src.timeline_args())

    @property
    def fused_model(self):
        """What "fused" times: the app's snapshot when given, else :attr:`fused`."""
        if self.snapshot is None:
            return self.fused
        snap = self.snapshot
        return snap if isinstance(snap, (bytes, str, Path)) else snap.SerializeToString()

    @property
    def keep_off(self) -> tuple[str, ...]:
        """ONNX Runtime's session transformers for the steps the plan switches off (they stay off at "all")."""
        return session_optimizers_off(self.plan.disabled) if self.plan is not None else ()

    @property
    def torch_source(self) -> dict:
        src = self.src
        return {"model": str(src.path) if src.kind == "folder" else src.name, "attention": self.attention,
                "seed": src.seed}

    def search(self):
        """The part of the text the calibrated and guarded recipes tune on (:func:`.extra.search_text_of`)."""
        from .extra import search_text_of  # lazy: extra.py imports this module at its load

        return self.search_text if self.search_text is not None else search_text_of(self.src, self.text)


__all__ = ["Recipe", "Build", "ShippedPlan", "Tolerance", "FP32_GPU", "FP16", "ENGINES", "NEEDS", "TORCH_SKIPPED"]
