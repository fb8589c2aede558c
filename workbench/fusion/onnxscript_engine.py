"""The ``onnxscript`` engine: onnxscript's ORT fusion rules, rule group by rule group.

The order is that of ``onnxscript.rewriter.ort_fusions._core.optimize_for_ort``;
one step of this chain is the workbench's own rule for ONNX's standard
``Attention`` (``own_steps.py``), placed where onnxscript's own attention
rules can build on what it emits.
"""

from __future__ import annotations

from typing import Callable

from ..errors import FusionError
from .engine_logs import quiet_stdout, rules_of, trace_rules
from .engine_types import EngineContext, EngineStep, StepOutcome
from .own_steps import (os_encoder_attention, os_encoder_rms_norm, os_encoder_rotary, os_encoder_silu,
                        os_encoder_skip_norm, os_standard_attention, skip_without,
                        skip_without_standard_attention)


def _core(name: str) -> Callable:
    """A fusion function of ``onnxscript.rewriter.ort_fusions._core``, imported when a step first runs.

    The step list is built without importing onnxscript (about 2 s), so a
    timeline read back from disk never imports it.
    """
    from onnxscript.rewriter.ort_fusions import _core as c

    return getattr(c, name)


def _os_fuse(*funcs: tuple[str, str | Callable] | tuple[str, str | Callable, dict]) -> Callable:
    """A step that applies onnxscript fusion functions (by ``_core`` name) in order and counts each."""

    def run(ctx: EngineContext, model) -> StepOutcome:
        counts, msgs = {}, []
        for item in funcs:
            label, func, kwargs = (item + ({},))[:3]
            func = _core(func) if isinstance(func, str) else func
            with quiet_stdout():
                counts[label] = int(func(model, **kwargs))
            if counts[label] == 0:
                msgs.extend(trace_rules(model, rules_of(func)))
        return StepOutcome(model, counts=counts, messages=msgs)

    return run


def _os_gemm(ctx, model) -> StepOutcome:
    from onnxscript.rewriter import rewrite
    from onnxscript.rewriter.rules.common import _gemm_to_matmul_add

    with quiet_stdout():
        rewrite(model, [_gemm_to_matmul_add.gemm_to_matmul_add_rule])
    return StepOutcome(model)


def _os_pre(ctx, model) -> StepOutcome:
    from onnxscript.rewriter.ort_fusions import _core

    try:
        with quiet_stdout():
            model = _core._pre_optimize(model)
    except Exception as e:
        raise FusionError(f"onnxscript's pre-optimization (shape inference, constant folding) failed: "
                          f"{str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__}") from e
    return StepOutcome(model)


def _os_cse(ctx, model) -> StepOutcome:
    import onnx_ir.passes.common as common_passes

    common_passes.CommonSubexpressionEliminationPass()(model)
    return StepOutcome(model)


def _os_attention(ctx, model) -> StepOutcome:
    from onnxscript.rewriter.ort_fusions.attention import fuse_attention
    from onnxscript.rewriter.ort_fusions.mha_bias import fuse_mha_bias

    mha = ctx.counts.get("multi_head_attention", {})
    ours = ctx.counts.get("standard_attention", {}).get("standard_attention", 0)
    if mha.get("mha1", 0) == 0 and mha.get("mha2", 0) == 0 and not ours:
        # fuse_xformers skips these when no MultiHeadAttention was formed.
        return StepOutcome(model, counts={"mha_bias": 0, "attention": 0},
                           notes=["skipped: neither the multi_head_attention nor the standard_attention step "
                                  "formed a MultiHeadAttention, and Attention is built from MultiHeadAttention "
                                  "in this engine"])
    return _os_fuse(("mha_bias", fuse_mha_bias), ("attention", fuse_attention))(ctx, model)


def _os_final(ctx, model) -> StepOutcome:
    from onnxscript.optimizer import optimize

    with quiet_stdout():
        optimize(model)
    return StepOutcome(model)


def _os_patterns(ctx, model) -> StepOutcome:
    from onnxscript.rewriter import rewrite
    from onnxscript.rewriter.ort_fusions._core import ORT_PATTERN_REWRITE_RULES

    with quiet_stdout():
        rewrite(model, ORT_PATTERN_REWRITE_RULES)
    return StepOutcome(model)


def _os_finalize(ctx, model) -> StepOutcome:
    import onnx_ir as ir
    import onnx_ir.passes.common as common_passes

    passes = ir.passes.Sequential(
        common_passes.LiftConstantsToInitializersPass(lift_all_constants=False, size_limit=1),
        common_passes.RemoveInitializersFromInputsPass(),
        common_passes.ShapeInferencePass(),
    )
    passes(model)
    return StepOutcome(model)


def onnxscript_steps() -> tuple[EngineStep, ...]:
    return (
        EngineStep("gemm_to_matmul_add", _os_gemm),
        EngineStep("pre_optimize", _os_pre),
        EngineStep("gelu", _os_fuse(("erf_gelu", "fuse_erfgelu"))),
        EngineStep("simplified_layer_norm", _os_fuse(("rms_normalization", "fuse_rms_normalization"))),
        EngineStep("encoder_rms_norm", os_encoder_rms_norm, skip=skip_without("Sqrt")),
        EngineStep("skip_layer_norm", _os_fuse(("skip_layer_normalization", "fuse_skip_layer_normalization"))),
        EngineStep("skip_simplified_layer_norm", _os_fuse(("skip_rms_normalization", "fuse_skip_rms_normalization"))),
        EngineStep("encoder_skip_norm", os_encoder_skip_norm,
                   skip=skip_without("LayerNormalization", "SimplifiedLayerNormalization")),
        EngineStep("encoder_rotary", os_encoder_rotary, skip=skip_without("Neg")),
        EngineStep("rotary_embedding", _os_fuse(("rotary_embedding", "fuse_rotary_embedding"),
                                                ("cos_sin_cache", "fuse_cos_sin_cache"))),
        EngineStep("cse", _os_cse),
        EngineStep("partial_rotary_embedding", _os_fuse(("partial_rotary_embedding", "fuse_partial_rotary_embedding"))),
        EngineStep("encoder_attention", os_encoder_attention, skip=skip_without("RotaryEmbedding")),
        EngineStep("sdpa", _os_fuse(("sdpa", "fuse_sdpa", {"apply_shape_inference": True}))),
        EngineStep("group_query_attention", _os_fuse(("gqa", "fuse_gqa"), ("packed_qkv_for_gqa", "fuse_qkv_gqa"))),
        EngineStep("multi_head_attention", _os_fuse(("mha1", "fuse_mha1"), ("mha2", "fuse_mha2"),
                                                    ("mha_scale", "fuse_mha_scale"))),
        EngineStep("standard_attention", os_standard_attention, skip=skip_without_standard_attention),
        EngineStep("attention", _os_attention, reads=("multi_head_attention", "standard_attention")),
        EngineStep("fast_gelu", _os_fuse(("gelu", "fuse_gelu"))),
        EngineStep("encoder_silu", os_encoder_silu, skip=skip_without("Sigmoid")),
        EngineStep("bias_gelu", _os_fuse(("bias_gelu", "fuse_bias_gelu"))),
        EngineStep("sdpa_to_mha", _os_fuse(("sdpa_via_mha", "replace_sdpa_by_mha"))),
        EngineStep("final_optimize", _os_final),
        EngineStep("ort_patterns", _os_patterns),
        EngineStep("finalize", _os_finalize),
    )
