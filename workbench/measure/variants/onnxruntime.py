"""The ONNX Runtime variants: the export unfused, fused (the plan's, or this machine's), int8 three ways, fp16.

``fused`` is one thing everywhere: the export after the fusion timeline under the user's plan (in the
app, the last snapshot it shows), opened at session level "all" with ONNX Runtime's own transformers for
the steps the plan switches off kept off (``Build.keep_off``). Level "all" because that is how a user's
session runs it: timing it at "disable" would leave out the session's own fusions every deployment gets.
``unfused`` is the export at level "disable", every ONNX Runtime optimization off.
"""

from __future__ import annotations

from pathlib import Path

from ...errors import BenchmarkError
from ...families import ort_optimizes
from ...fusion.catalog import session_optimizers_off
from ..harness.results import Variant
from ..worker.precision import quantize_int8
from .recipe import FP16, FP32_GPU, Build, Recipe, ShippedPlan

_FP32_WINS = "no int8 model kept the answers, so the fastest fp32 engine wins."


def _unfused(ctx: Build, name: str):
    return Variant(name, ctx.export_path, provider=ctx.provider, level="disable")


def _fused(ctx: Build, name: str):
    return Variant(name, ctx.fused_model, provider=ctx.provider, level="all", disabled_optimizers=ctx.keep_off)


def _tuned(ctx: Build, name: str):
    from .models import fuse_bert  # lazy: models.py imports this module at its load

    ctx.progress("this machine's plan (ablation)", 0.6)
    plan = ctx.tuned_plan(ctx) if callable(ctx.tuned_plan) else ctx.tuned_plan
    if plan is None:  # the plan is the caller's (the tune's ablation): variants do not import tune
        raise BenchmarkError(f"{name}: this machine's fusion plan was not given (Build.tuned_plan: "
                             "workbench.measure.tune.plan.tuned_plan_of computes it)")
    if isinstance(plan, ShippedPlan):
        if plan.plan is None:  # every fused graph measured slower on the workload: the unfused export ships
            return Variant(name, ctx.export_path, provider=ctx.provider, level="disable")
        plan = plan.plan
    path = fuse_bert(ctx.export_path, plan=plan, **ctx.src.timeline_args())
    return Variant(name, path, provider=ctx.provider, disabled_optimizers=session_optimizers_off(plan.disabled))


def _int8_of(fused):
    from .models import int8_of  # lazy: models.py imports this module at its load

    return int8_of(fused)


def _int8(ctx: Build, name: str):
    ctx.progress("int8 quantization", 0.7)
    if ctx.snapshot is not None:  # the app's fused snapshot, quantized as it is shown

        q = quantize_int8(ctx.snapshot, per_channel=True)
        model = q if isinstance(q, (bytes, str, Path)) else q.SerializeToString()
    else:
        model = _int8_of(ctx.fused)
    return Variant(name, model, provider="cpu", level="all", disabled_optimizers=ctx.keep_off)


def _guarded(ctx: Build, name: str):
    from .extra import guard_text, guarded_int8_of  # lazy: extra.py imports this module at its load

    ctx.progress("answer-guarded int8 search", 0.75)
    guard = ctx.search_text if ctx.search_text is not None else (ctx.text if ctx.text is not None
                                                                 else guard_text(ctx.src))
    path = guarded_int8_of(ctx.fused, guard, threads=ctx.threads,
                           progress=lambda stage, f: ctx.progress(stage, 0.75))
    return Variant(name, path, provider="cpu", disabled_optimizers=ctx.keep_off)


def _guarded_report(v) -> dict | None:
    from .guarded import search_report  # lazy: guarded.py imports this module at its load

    return search_report(v.model)


def _static(ctx: Build, name: str):
    from .static_int8 import int8_static_of  # lazy: static_int8.py imports this module at its load

    ctx.progress("static int8 (calibrating)", 0.8)
    return Variant(name, int8_static_of(ctx.fused, ctx.search()), provider="cpu",
                   disabled_optimizers=ctx.keep_off)


def _fp16_of(fused):
    from .models import fp16_of  # lazy: models.py imports this module at its load

    return fp16_of(fused)


def _fp16(ctx: Build, name: str):
    from .models import fuse_bert  # lazy: models.py imports this module at its load

    ctx.progress("fp16 conversion", 0.85)
    if ctx.src.model_type and not ort_optimizes(ctx.src.model_type):
        # ONNX Runtime's GPU optimizer has no rules for these families (and crashes on a bias-free
        # LayerNorm): the workbench's own fused graph is converted instead.
        gpu_fused = ctx.fused
    else:
        gpu_fused = fuse_bert(ctx.export_path, num_heads=ctx.heads, hidden_size=ctx.hidden, use_gpu=True)
    return Variant(name, _fp16_of(gpu_fused), provider=ctx.provider, level="all")


ORT = dict(engine="onnxruntime", kind="onnx", runner="workbench.measure.worker.runners:OrtRunner")
RECIPES = (
    Recipe("unfused", "ONNX Runtime, no optimizations", build=_unfused, standard=True, default_on=("cpu", "cuda"),
           wins=_FP32_WINS, tune=("cpu", "cuda"), tolerance=FP32_GPU, **ORT),
    Recipe("fused", "fused (all steps)", build=_fused, needs=("fused",), standard=True, default_on=("cpu", "cuda"),
           from_fused=lambda p: Path(p), wins=_FP32_WINS, tune=("cpu", "cuda"), tolerance=FP32_GPU, **ORT),
    Recipe("tuned", "ONNX Runtime, this machine's plan", build=_tuned, needs=("plan",), wins=_FP32_WINS, **ORT),
    Recipe("int8", "int8 (dynamic)", build=_int8, needs=("fused",), devices=("cpu",), precision="int8",
           device_note="int8 dynamic quantization runs on the CPU execution provider only",
           standard=True, default_on=("cpu",), from_fused=_int8_of,
           card="Precision: int8 weights (per channel), activations quantized per run; no MatMul kept in fp32.",
           **ORT),
    Recipe("int8-guarded", "answer-guarded int8", build=_guarded, needs=("fused", "text"), devices=("cpu",),
           precision="int8", report_key="int8_search", report=_guarded_report, **ORT),
    Recipe("int8-static", "static int8 (QDQ, calibrated)", build=_static, needs=("fused", "text"), devices=("cpu",),
           precision="int8", card="Precision: static int8 in QDQ form (activation scales calibrated on the search "
                                  "part, weights per channel); the fused Attention's Q/K/V weights stay fp32.", **ORT),
    Recipe("fp16", "fp16", build=_fp16, needs=("fused",), precision="fp16", standard=True, default_on=("cuda",),
           from_fused=_fp16_of, tune=("cuda",), tolerance=FP16, **ORT),
)

__all__ = ["RECIPES"]
