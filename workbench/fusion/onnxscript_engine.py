"""The ``onnxscript`` engine: onnxscript's ORT fusion rules, rule group by rule group.

The order is that of ``onnxscript.rewriter.ort_fusions._core.optimize_for_ort``.
Each step's anchors are read from onnxscript's rule objects (``anchors.Patterns``);
where a step's call does more than apply its rules (shape inference after
``sdpa``, the unused-node passes of ``rewrite()``), that part is its ``rest``,
run when the anchors are absent. The workbench's own rules join this chain
where they say (``rules/``, placed by ``registry.py``).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..errors import FusionError
from .anchors import EVERY_GRAPH, Patterns
from .engine_logs import quiet_stdout, rules_of, trace_rules
from .engine_types import EngineContext, EngineStep, StepOutcome


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


def _anchors(*funcs: str) -> Patterns:
    """The anchors of ``_core`` fusion functions: the patterns of the rule sets they apply."""
    return Patterns(lambda: [rules_of(_core(f)) for f in funcs])


def _gemm_rule():
    from onnxscript.rewriter.rules.common import _gemm_to_matmul_add

    return _gemm_to_matmul_add.gemm_to_matmul_add_rule


def _pattern_rules():
    from onnxscript.rewriter.ort_fusions._core import ORT_PATTERN_REWRITE_RULES

    return ORT_PATTERN_REWRITE_RULES


def _os_gemm(ctx, model) -> StepOutcome:
    from onnxscript.rewriter import rewrite

    with quiet_stdout():
        rewrite(model, [_gemm_rule()])
    return StepOutcome(model)


def settle(model, rule_sets) -> None:
    """What onnxscript's ``RewriteRuleSet.apply_to_model`` does around its matching, which it does even when
    nothing matches: constant propagation over the graph and its functions, and (when a rule keeps its
    matched nodes) removing the nodes nothing reads. A step whose anchors are absent runs only this."""
    import onnxscript.optimizer as optimizer

    for rules in rule_sets:
        optimizer.basic_constant_propagation(model.graph)
        for function in list(model.functions.values()):
            optimizer.basic_constant_propagation(function)
        if getattr(rules, "remove_unused_nodes", False):
            optimizer.remove_unused_nodes(model)


def _rest(*funcs: str, shapes: bool = False):
    """The ``rest`` of a step applying ``_core`` functions: their rule sets' :func:`settle` (and, after
    ``fuse_sdpa(apply_shape_inference=True)``, shape inference)."""

    def rest(ctx, model) -> StepOutcome:
        settle(model, [rules_of(_core(f)) for f in funcs])
        if shapes:
            import onnx_ir.passes.common as common_passes

            common_passes.ShapeInferencePass()(model)
        return StepOutcome(model)

    return rest


def _rewrite_rest(rules):
    """The ``rest`` of a step calling onnxscript's ``rewrite()``: the rule set's :func:`settle`, then the
    unused nodes, functions and opsets removed, as ``rewrite()`` does after its rules."""

    def rest(ctx, model) -> StepOutcome:
        import onnx_ir.passes.common as common_passes
        from onnxscript.rewriter import pattern

        settle(model, [pattern.RewriteRuleSet(list(rules()))])
        for p in (common_passes.RemoveUnusedNodesPass(), common_passes.RemoveUnusedFunctionsPass(),
                  common_passes.RemoveUnusedOpsetsPass()):
            p(model)
        return StepOutcome(model)

    return rest


def _attention_rest(ctx, model) -> StepOutcome:
    """The ``attention`` step without MultiHeadAttention in the graph: what :func:`_os_attention` would do."""
    if _no_mha(ctx):
        return StepOutcome(model)
    return _rest("fuse_mha_bias", "fuse_attention")(ctx, model)


def _contiguous(model) -> None:
    """Give every initializer held as a non-contiguous array (a constant-folded Transpose of a weight) a
    contiguous copy: onnx-ir's initializer deduplication hashes the array's buffer and refuses strided ones."""
    import onnx_ir as ir

    for value in model.graph.initializers.values():
        tensor = value.const_value
        array = getattr(tensor, "raw", None)
        if isinstance(array, np.ndarray) and not array.flags.c_contiguous:
            value.const_value = ir.tensor(np.ascontiguousarray(array), name=tensor.name)


def _os_pre(ctx, model) -> StepOutcome:
    import onnx_ir.passes.common as common_passes
    from onnxscript.rewriter.ort_fusions import _core

    try:
        with quiet_stdout():
            model = _core._pre_optimize(model)
        # Constant folding gives each reader of a weight shared through Identity (ALBERT's one layer read by
        # every layer, tied embeddings) its own copy: equal initializers become one again.
        _contiguous(model)
        common_passes.DeduplicateHashedInitializersPass()(model)
    except Exception as e:
        raise FusionError(f"onnxscript's pre-optimization (shape inference, constant folding) failed: "
                          f"{str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__}") from e
    return StepOutcome(model)


def _os_cse(ctx, model) -> StepOutcome:
    import onnx_ir.passes.common as common_passes

    common_passes.CommonSubexpressionEliminationPass()(model)
    return StepOutcome(model)


def _no_mha(ctx) -> bool:
    """Whether neither onnxscript's MHA rules nor the standard-attention rule formed a MultiHeadAttention."""
    mha = ctx.counts.get("multi_head_attention", {})
    ours = ctx.counts.get("standard_attention", {}).get("standard_attention", 0)
    return mha.get("mha1", 0) == 0 and mha.get("mha2", 0) == 0 and not ours


def _os_attention(ctx, model) -> StepOutcome:
    from onnxscript.rewriter.ort_fusions.attention import fuse_attention
    from onnxscript.rewriter.ort_fusions.mha_bias import fuse_mha_bias

    if _no_mha(ctx):
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

    with quiet_stdout():
        rewrite(model, _pattern_rules())
    return StepOutcome(model)


def _os_finalize(ctx, model) -> StepOutcome:
    import onnx_ir as ir
    import onnx_ir.passes.common as common_passes

    passes = ir.passes.Sequential(
        common_passes.LiftConstantsToInitializersPass(lift_all_constants=False, size_limit=1),
        common_passes.RemoveInitializersFromInputsPass(),
        common_passes.ShapeInferencePass(),
        common_passes.DeduplicateHashedInitializersPass(),  # equal packed weights (ALBERT's shared layer) stored once
    )
    _contiguous(model)
    passes(model)
    return StepOutcome(model)


def _group(name: str, *funcs: tuple, shapes: bool = False) -> EngineStep:
    """A step applying onnxscript fusion functions of ``_core`` (label, function name[, kwargs]) in order."""
    names = [f[1] for f in funcs]
    return EngineStep(name, _os_fuse(*funcs), _anchors(*names), rest=_rest(*names, shapes=shapes))


def onnxscript_steps() -> tuple[EngineStep, ...]:
    """onnxscript's own steps, in ``optimize_for_ort`` order; clean-ups run on every graph."""
    return (
        EngineStep("gemm_to_matmul_add", _os_gemm, Patterns(lambda: [_gemm_rule()]),
                   rest=_rewrite_rest(lambda: [_gemm_rule()])),
        EngineStep("pre_optimize", _os_pre, EVERY_GRAPH),
        _group("gelu", ("erf_gelu", "fuse_erfgelu")),
        _group("simplified_layer_norm", ("rms_normalization", "fuse_rms_normalization")),
        _group("skip_layer_norm", ("skip_layer_normalization", "fuse_skip_layer_normalization")),
        _group("skip_simplified_layer_norm", ("skip_rms_normalization", "fuse_skip_rms_normalization")),
        _group("rotary_embedding", ("rotary_embedding", "fuse_rotary_embedding"),
               ("cos_sin_cache", "fuse_cos_sin_cache")),
        EngineStep("cse", _os_cse, EVERY_GRAPH),
        _group("partial_rotary_embedding", ("partial_rotary_embedding", "fuse_partial_rotary_embedding")),
        _group("sdpa", ("sdpa", "fuse_sdpa", {"apply_shape_inference": True}), shapes=True),
        _group("group_query_attention", ("gqa", "fuse_gqa"), ("packed_qkv_for_gqa", "fuse_qkv_gqa")),
        _group("multi_head_attention", ("mha1", "fuse_mha1"), ("mha2", "fuse_mha2"), ("mha_scale", "fuse_mha_scale")),
        EngineStep("attention", _os_attention, _anchors("fuse_mha_bias", "fuse_attention"),
                   reads=("multi_head_attention", "standard_attention"), rest=_attention_rest),
        _group("fast_gelu", ("gelu", "fuse_gelu")),
        _group("bias_gelu", ("bias_gelu", "fuse_bias_gelu")),
        _group("sdpa_to_mha", ("sdpa_via_mha", "replace_sdpa_by_mha")),
        EngineStep("final_optimize", _os_final, EVERY_GRAPH),
        EngineStep("ort_patterns", _os_patterns, Patterns(_pattern_rules), rest=_rewrite_rest(_pattern_rules)),
        EngineStep("finalize", _os_finalize, EVERY_GRAPH),
    )
