"""One adapter per fusion engine, each a list of steps run in the engine's order.

* ``ort``: ONNX Runtime's transformers optimizer. Each step makes a fresh
  ``BertOnnxModel`` over the working model and calls the same ``fuse_*``
  methods, in the same order and with the same options, as
  ``BertOnnxModel.optimize()`` after ``optimize_model``'s ORT_ENABLE_BASIC
  pass (its default for model_type "bert").
  One step of this chain, ``sdpa_attention``, is the workbench's own
  onnxscript rule (``rules/``) for the TorchScript + SDPA attention pattern
  neither engine fuses; it runs just before ORT's attention step, so the
  other fusions (SkipLayerNorm, EmbedLayerNorm, BiasGelu) still come from ORT.
* ``onnxscript``: onnxscript's ORT fusion rules, rule group by rule group,
  in the order of ``onnxscript.rewriter.ort_fusions._core.optimize_for_ort``.

A step function takes an :class:`EngineContext` and the working model
(ModelProto for ort, ``onnx_ir.Model`` for onnxscript), edits it or returns
a new one, and reports what it did as data.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from dataclasses import dataclass, field
from typing import Any, Callable

import onnx

from ..errors import FusionError


@dataclass
class EngineContext:
    """What every step of a run may need."""

    num_heads: int = 0
    hidden_size: int = 0
    counts: dict[str, dict[str, int]] = field(default_factory=dict)  # step → engine counts in this chain
    #: ORT symbolic shape inference results by graph fingerprint, shared by the steps of one timeline.
    shape_cache: dict = field(default_factory=dict)
    #: The timeline's WeightStore when the working model holds weight stubs (see ``store.py``).
    store: Any = None
    #: The exported file, when the step's input is that export unchanged: ONNX Runtime reads it
    #: itself instead of a 440 MB serialization of the same bytes.
    source_path: str | None = None


@dataclass
class StepOutcome:
    """What one engine step did: the model after it, the engine's counts and messages."""

    model: Any
    counts: dict[str, int] = field(default_factory=dict)
    messages: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: Why the step was not run at all (its anchor ops are absent), or "".
    skipped: str = ""


@dataclass(frozen=True)
class EngineStep:
    """One step of an engine; ``reads`` names earlier steps whose counts it looks at.

    ``skip``, when given, is asked before the step runs with the input graph's
    op histogram and its skeleton; a non-empty answer says the step cannot
    change this graph (none of the engine's anchor ops is present), so the
    runner keeps the graph as it is instead of running the step.
    """

    name: str
    run: Callable[[EngineContext, Any], StepOutcome]
    reads: tuple[str, ...] = ()
    skip: Callable[[dict, onnx.ModelProto], str] | None = None


# ---------------------------------------------------------------- logging capture
class _Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record):
        try:
            msg = record.getMessage().strip()
        except Exception:
            return
        if msg:
            self.lines.append(f"{record.name}: {msg.splitlines()[0]}")


_ORT_LOGGER_PREFIXES = ("fusion_", "onnx_model", "onnxruntime.transformers", "shape_infer", "symbolic_shape")


def _no_caller(*args, **kwargs):
    # ORT's matchers log every failed parent match at DEBUG with stack_info=True; walking and
    # formatting that stack costs more than the match. Only the message's first line is kept.
    return "(unknown file)", 0, "(unknown function)", None


def _set_levels(saved: list, level_of) -> None:
    for lg, level, _ in saved:
        lg.level = level_of(lg, level)
    # ``Logger.setLevel`` clears the level cache of every logger of the process (thousands once
    # torch and transformers are loaded) on each call; set the levels, then clear it once.
    clear = getattr(logging.root.manager, "_clear_cache", None)
    if clear is not None:
        clear()
    else:  # pragma: no cover - older or newer logging without the private helper
        for lg, level, _ in saved:
            lg.setLevel(lg.level)


@contextlib.contextmanager
def capture_ort_logs():
    """Collect the ORT transformers optimizer's own debug log lines, silently."""
    handler = _Collect()
    names = [n for n in list(logging.root.manager.loggerDict) if n.startswith(_ORT_LOGGER_PREFIXES)]
    saved = []
    for n in names:
        lg = logging.getLogger(n)
        saved.append((lg, lg.level, lg.propagate))
        lg.propagate = False
        lg.addHandler(handler)
        lg.findCaller = _no_caller
    _set_levels(saved, lambda lg, level: logging.DEBUG)
    try:
        yield handler.lines
    finally:
        for lg, level, prop in saved:
            lg.removeHandler(handler)
            lg.propagate = prop
            lg.__dict__.pop("findCaller", None)
        _set_levels(saved, lambda lg, level: level)


@contextlib.contextmanager
def _quiet_stdout():
    import io
    import warnings
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


# ---------------------------------------------------------------- ORT engine
#: Initializers at least this large enter shape inference as typed inputs, not as data.
_SHAPE_ONLY_BYTES = 4096
_SHAPE_CACHE_MAX = 64


def shape_view(model: onnx.ModelProto) -> onnx.ModelProto:
    """The graph of ``model`` for shape inference: large weights become typed graph inputs.

    ORT's symbolic shape inference copies the whole model (weights included)
    and reads initializer *values* only to propagate shape arithmetic, which
    lives in small tensors. Declaring each large weight as an input of the
    same type and shape gives the same shapes for a fraction of the copying.
    """
    from .store import nbytes

    view = onnx.ModelProto()
    view.ir_version = model.ir_version
    view.opset_import.extend(model.opset_import)
    view.functions.extend(model.functions)
    g, src = view.graph, model.graph
    g.name = src.name
    g.node.extend(src.node)
    g.input.extend(src.input)
    g.output.extend(src.output)
    g.value_info.extend(src.value_info)
    names = {i.name for i in src.input}
    for t in src.initializer:
        if nbytes(t) < _SHAPE_ONLY_BYTES and t.data_location != onnx.TensorProto.EXTERNAL:
            g.initializer.append(t)
        elif t.name not in names:
            g.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    return view


def _infer_runtime_shape(ctx: EngineContext, bert, dynamic_axis_mapping=None, update=False):
    """Stands in for ``OnnxModel.infer_runtime_shape``: same helper, on :func:`shape_view`, cached.

    The result depends only on the graph and the axis mapping, so a step
    recomputed after a toggle (or a later step seeing the same graph) reuses it.
    """
    import hashlib

    if not bert.enable_shape_infer:
        return None
    mapping = dict(dynamic_axis_mapping or {})
    view = shape_view(bert.model)
    key = (hashlib.sha1(view.SerializeToString(deterministic=True)).hexdigest(), tuple(sorted(mapping.items())))
    hit = ctx.shape_cache.get(key)
    if hit is None:
        from onnxruntime.transformers.shape_infer_helper import SymbolicShapeInferenceHelper

        helper = SymbolicShapeInferenceHelper(view)
        try:
            ok = helper.infer(mapping)
        except Exception as e:  # as ORT does: report once, then go on without shapes
            bert.enable_shape_infer = False
            logging.getLogger("onnx_model").debug("shape inference failed: %s", type(e).__name__)
            return None
        if len(ctx.shape_cache) >= _SHAPE_CACHE_MAX:
            ctx.shape_cache.pop(next(iter(ctx.shape_cache)))
        hit = ctx.shape_cache[key] = (helper, ok)
    helper, ok = hit
    bert.shape_infer_helper = helper
    return helper if ok else None


def _bert(ctx: EngineContext, model: onnx.ModelProto):
    import functools

    from onnxruntime.transformers.onnx_model_bert import BertOnnxModel

    heads, hidden = ctx.num_heads, ctx.hidden_size
    if not (heads > 0 and hidden > 0 and hidden % heads == 0):
        heads, hidden = 0, 0
    bert = BertOnnxModel(model, heads, hidden)
    bert.infer_runtime_shape = functools.partial(_infer_runtime_shape, ctx, bert)
    return bert


def _ort_method(*calls: str | tuple) -> Callable:
    """A step that calls ``BertOnnxModel`` methods (by dotted name, with args) in order."""

    def run(ctx: EngineContext, model: onnx.ModelProto) -> StepOutcome:
        bert = _bert(ctx, model)
        with capture_ort_logs() as lines:
            for call in calls:
                name, args = (call, ()) if isinstance(call, str) else (call[0], call[1:])
                obj = bert
                for part in name.split("."):
                    obj = getattr(obj, part)
                obj(*args)
        return StepOutcome(bert.model, messages=lines)

    return run


#: ``BertOnnxModel`` methods whose whole effect is ``Fusion.apply()`` of one or more ORT Fusion
#: objects (read in onnx_model_bert.py). ``Fusion.apply`` visits only nodes of the fusion's
#: ``search_op_types`` and, when it visits none, leaves the graph exactly as it was; so when no
#: anchor op of any of them is in the graph, the method is a no-op and need not run.
_PURE_FUSION_METHODS = frozenset({
    "fuse_layer_norm", "fuse_simplified_layer_norm", "fuse_gelu", "fuse_reshape", "fuse_skip_layer_norm",
    "fuse_skip_simplified_layer_norm", "fuse_shape", "fuse_embed_layer", "fuse_bias_gelu",
    "fuse_add_bias_skip_layer_norm", "gelu_approximation", "fuse_gemm_fast_gelu", "fuse_constant_fold",
    "fuse_rotary_embeddings",
})

#: Anchors a fusion visits but can only fuse when another op is in the graph too, read from the
#: fusion's ``fuse()``: ORT's rotary fusion visits every ``Add`` and returns at once, without a
#: change, unless ``Add``'s second input comes through ``Mul <- Concat <- Neg <- Slice`` (both
#: rotate_half alternatives it tries start that way). A test keeps this in step with ORT's source.
_ANCHOR_NEEDS: dict[tuple[str, str], str] = {("FusionRotaryEmbeddings", "Add"): "Neg"}

_ANCHORS: dict[tuple, tuple[tuple[str, tuple[str, ...]], ...]] = {}


def ort_anchors(*calls: str | tuple) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The ORT Fusion objects ``calls`` apply, as (class name, search_op_types), in order.

    Read from the engine itself: the calls run once on an empty graph with
    ``Fusion.apply`` recording each fusion it is called on. Returns ``()`` when
    a call is not in :data:`_PURE_FUSION_METHODS` (it may do more than fuse).
    """
    key = tuple(calls)
    if key in _ANCHORS:
        return _ANCHORS[key]
    names = [c if isinstance(c, str) else c[0] for c in calls]
    if not all(n in _PURE_FUSION_METHODS for n in names):
        _ANCHORS[key] = ()
        return ()
    from onnxruntime.transformers.onnx_model_bert import BertOnnxModel

    seen: list[tuple[str, tuple[str, ...]]] = []

    def record(self):
        seen.append((type(self).__name__, tuple(self.search_op_types)))

    empty = onnx.helper.make_model(onnx.helper.make_graph([], "empty", [], []))
    bert = BertOnnxModel(empty)
    bert.disable_shape_inference()
    # ORT's fusion modules import each other as top-level modules ("fusion_base"), so take the
    # Fusion base class the engine really uses from one of its fusion objects.
    Fusion = next(c for c in type(bert.attention_fusion).__mro__ if c.__name__ == "Fusion")
    original = Fusion.apply
    Fusion.apply = record
    try:
        with capture_ort_logs():
            for call in calls:
                name, args = (call, ()) if isinstance(call, str) else (call[0], call[1:])
                getattr(bert, name)(*args)
    except Exception:  # an engine change we do not understand: never skip
        seen = []
    finally:
        Fusion.apply = original
    _ANCHORS[key] = tuple(seen)
    return _ANCHORS[key]


def _absent_anchors(*calls: str | tuple) -> Callable[[dict, onnx.ModelProto], str]:
    """A ``skip`` test: say why ``calls`` cannot change a graph with this op histogram, or ""."""

    def skip(hist: dict, skeleton: onnx.ModelProto) -> str:
        fusions = ort_anchors(*calls)
        if not fusions:
            return ""
        unusable: list[tuple[str, str]] = []
        for cls, ops in fusions:
            for op in ops:
                if not hist.get(op, 0):
                    continue
                need = _ANCHOR_NEEDS.get((cls, op))
                if need is None or hist.get(need, 0):
                    return ""
                unusable.append((op, need))
        if any("RotaryEmbedding" in f.name for f in skeleton.functions):
            return ""  # fuse_rotary_embeddings also removes such functions
        anchors = list(dict.fromkeys(op for _, ops in fusions for op in ops))
        missing = [op for op in anchors if not hist.get(op, 0)]
        parts = [f"no {' / '.join(missing)} nodes"] if missing else []
        parts += [f"no {need} nodes, which the {op} anchors need" for op, need in dict.fromkeys(unusable)]
        classes = ", ".join(dict.fromkeys(c for c, _ in fusions))
        return f"nothing to fuse: {'; '.join(parts)} (the anchors of ONNX Runtime's {classes}); the step was not run."

    return skip


def _ort_basic(ctx: EngineContext, model: onnx.ModelProto) -> StepOutcome:
    """``optimize_model``'s default pre-pass for bert: an ORT session at ORT_ENABLE_BASIC.

    ONNX Runtime reads the export file itself when the step's input is that
    export, and writes its result with the weights in a side file: the
    unchanged weights become store stubs again, so neither a 440 MB
    serialization nor an inline 440 MB output is made (5.6 s → 1.6 s on
    bert-base).
    """
    import onnxruntime as ort

    with tempfile.TemporaryDirectory(prefix="workbench-ortbasic-") as tmp:
        dst = os.path.join(tmp, "model_o1_cpu.onnx")
        if ctx.source_path is not None:
            src: str | bytes = ctx.source_path
        else:
            full = ctx.store.assemble(model) if ctx.store is not None else model
            src = full.SerializeToString()  # bytes, so ORT's own errors never name a temporary file of ours
            del full
        with capture_ort_logs() as lines:
            try:
                # What optimize_by_onnxruntime(opt_level=1) does, without its `import torch` (read
                # only for a version string): a CPU session at ORT_ENABLE_BASIC that saves its graph.
                so = ort.SessionOptions()
                so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
                so.optimized_model_filepath = dst
                so.add_session_config_entry("session.optimized_model_external_initializers_file_name",
                                            "model_o1_cpu.data")
                so.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes",
                                            str(_STORE_THRESHOLD))
                ort.InferenceSession(src, so, providers=["CPUExecutionProvider"],
                                     disabled_optimizers=["ConstantSharing"])
            except Exception as e:
                raise FusionError(f"ONNX Runtime could not load the model for its basic optimizations: "
                                  f"{str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__}") from e
        out = onnx.load(dst, load_external_data=False)
        _weights_back(out, tmp, ctx.store)
    return StepOutcome(out, messages=lines)


_STORE_THRESHOLD = 4096  # the WeightStore's: smaller tensors stay inline either way


def _weights_back(model: onnx.ModelProto, folder: str, store) -> None:
    """Turn the side-file weights of ORT's output back into store stubs, or load the new ones.

    A weight the pass kept has its name, type and shape in the store (neither
    engine rewrites an initializer under its old name: ``store.py``); only
    what the pass made itself (folded constants) is read from the side file.
    """
    from onnx.external_data_helper import load_external_data_for_tensor

    from .store import _key, nbytes

    for t in model.graph.initializer:
        if t.data_location != onnx.TensorProto.EXTERNAL:
            continue
        key = _key(t, nbytes(t))
        if store is not None and key in store.tensors:
            t.CopyFrom(store._stub(t, key))
            continue
        load_external_data_for_tensor(t, folder)
        t.data_location = onnx.TensorProto.DEFAULT
        del t.external_data[:]


def _ort_attention(ctx: EngineContext, model: onnx.ModelProto) -> StepOutcome:
    from onnxruntime.transformers.fusion_options import AttentionMaskFormat

    bert = _bert(ctx, model)
    with capture_ort_logs() as lines:
        bert.attention_mask.set_mask_format(AttentionMaskFormat.MaskIndexEnd)  # FusionOptions("bert") default
        bert.fuse_attention()
        bert.fuse_qordered_mamtul()
    # Later clean-ups (postprocess) need the head count the fusion detected.
    for n in bert.model.graph.node:
        if n.op_type == "Attention" and not ctx.num_heads:
            for a in n.attribute:
                if a.name == "num_heads":
                    ctx.num_heads = int(a.i)
    return StepOutcome(bert.model, messages=lines)


def _wb_sdpa_attention(ctx: EngineContext, model: onnx.ModelProto) -> StepOutcome:
    """Our onnxscript rule for TorchScript-exported SDPA attention (see ``rules/sdpa_attention.py``)."""
    import onnx_ir as ir

    from .rules import fuse_sdpa_attention, sdpa_attention_rules

    ir_model = ctx.store.load_ir(model) if ctx.store is not None else ir.serde.deserialize_model(model)
    with _quiet_stdout():
        count = fuse_sdpa_attention(ir_model)
    if not count:
        # Nothing changed (the in-memory model included): keep the protobuf as it is and say
        # where matching stopped.
        lines = trace_rules(ir_model, sdpa_attention_rules())
        return StepOutcome(model, counts={"sdpa_attention": 0}, messages=lines,
                           notes=["This export does not use the TorchScript SDPA attention pattern; "
                                  "ONNX Runtime's own attention step comes next."])
    out = ctx.store.strip_ir(ir_model) if ctx.store is not None else ir.serde.serialize_model(ir_model)
    for n in out.graph.node:
        if n.op_type == "Attention" and n.domain == "com.microsoft" and not ctx.num_heads:
            for a in n.attribute:
                if a.name == "num_heads":
                    ctx.num_heads = int(a.i)
    return StepOutcome(out, counts={"sdpa_attention": int(count)})


def _ort_finalize(ctx: EngineContext, model: onnx.ModelProto) -> StepOutcome:
    import onnxruntime

    bert = _bert(ctx, model)
    with capture_ort_logs() as lines:
        bert.remove_unused_constant()
        bert.topological_sort()  # optimize_by_fusion does this after optimize()
    bert.model.producer_name = "onnxruntime.transformers"
    bert.model.producer_version = onnxruntime.__version__
    return StepOutcome(bert.model, messages=lines)


def _ort_step(name: str, *calls: str | tuple) -> EngineStep:
    return EngineStep(name, _ort_method(*calls), skip=_absent_anchors(*calls))


ORT_STEPS: tuple[EngineStep, ...] = (
    EngineStep("ort_basic", _ort_basic),
    EngineStep("identity_cast", _ort_method("utils.remove_identity_nodes", "utils.remove_useless_cast_nodes",
                                            "fuse_constant_fold")),
    _ort_step("layer_norm", "fuse_layer_norm"),
    _ort_step("simplified_layer_norm", "fuse_simplified_layer_norm"),
    _ort_step("gelu", "fuse_gelu"),
    EngineStep("reshape", _ort_method("preprocess", "fuse_reshape")),
    _ort_step("skip_layer_norm", ("fuse_skip_layer_norm", True)),
    _ort_step("skip_simplified_layer_norm", "fuse_skip_simplified_layer_norm"),
    _ort_step("rotary_embedding", "fuse_rotary_embeddings"),
    EngineStep("sdpa_attention", _wb_sdpa_attention),
    EngineStep("attention", _ort_attention),
    _ort_step("shape", "fuse_shape"),
    _ort_step("embed_layer_norm", ("fuse_embed_layer", True)),
    EngineStep("postprocess", _ort_method("utils.remove_useless_reshape_nodes", "postprocess")),
    _ort_step("bias_gelu", ("fuse_bias_gelu", True), ("fuse_bias_gelu", False)),
    _ort_step("bias_skip_layer_norm", "fuse_add_bias_skip_layer_norm"),
    _ort_step("gelu_approximation", "gelu_approximation"),
    _ort_step("gemm_fast_gelu", "fuse_gemm_fast_gelu"),
    EngineStep("finalize", _ort_finalize),
)


# ---------------------------------------------------------------- onnxscript engine
def rules_of(func) -> Any:
    """The RewriteRule/RewriteRuleSet an ``apply_fusion_rules`` function closes over."""
    from onnxscript.rewriter._rewrite_rule import RewriteRule, RewriteRuleSet

    for cell in getattr(func, "__closure__", None) or ():
        obj = cell.cell_contents
        if isinstance(obj, (RewriteRule, RewriteRuleSet)):
            return obj
    return None


def trace_rules(model, rules) -> list[str]:
    """Why ``rules`` did not match: onnxscript's MatchingTracer best partial matches, as lines."""
    from onnxscript.rewriter._basics import MatchingTracer

    if rules is None:
        return []
    tracer = MatchingTracer()
    try:
        with _quiet_stdout():
            rules.apply_to_model(model, tracer=tracer)
    except Exception as e:  # a tracer run must never break the timeline
        return [f"(tracing failed: {type(e).__name__})"]
    return _trace_lines(tracer)


def _trace_lines(tracer) -> list[str]:
    """The two best partial matches a ``MatchingTracer`` recorded, as lines."""
    from onnxscript.rewriter._basics import MatchStatus

    best = []
    for rule, matches in tracer.best_matches_map.items():
        if matches:
            best.append((matches[0].score(), rule, matches))
    best.sort(key=lambda x: -x[0])
    lines = []
    for score, rule, matches in best[:2]:
        m = matches[0]
        status = m.status
        reason = m.match_result.reason or "no reason given"
        nodes = len(m.match_result.nodes)
        where = []
        for cause in (m.match_result.failure_nodes_and_values or [])[:2]:
            nm = getattr(cause, "name", None)
            if nm:
                where.append(str(nm))
        what = "its condition check failed" if status == MatchStatus.CONDITION_FAILED else "matching stopped"
        lines.append(f"rule {getattr(rule, 'name', None) or rule!s}: matched {nodes} node(s) on {len(matches)} "
                     f"site(s), then {what}: {reason}" + (f" (at {', '.join(where)})" if where else ""))
    return lines


def _os_fuse(*funcs: tuple[str, Callable] | tuple[str, Callable, dict]) -> Callable:
    """A step that applies onnxscript fusion functions in order and counts each."""

    def run(ctx: EngineContext, model) -> StepOutcome:
        counts, msgs = {}, []
        for item in funcs:
            label, func, kwargs = (item + ({},))[:3]
            with _quiet_stdout():
                counts[label] = int(func(model, **kwargs))
            if counts[label] == 0:
                msgs.extend(trace_rules(model, rules_of(func)))
        return StepOutcome(model, counts=counts, messages=msgs)

    return run


def _os_gemm(ctx, model) -> StepOutcome:
    from onnxscript.rewriter import rewrite
    from onnxscript.rewriter.rules.common import _gemm_to_matmul_add

    with _quiet_stdout():
        rewrite(model, [_gemm_to_matmul_add.gemm_to_matmul_add_rule])
    return StepOutcome(model)


def _os_pre(ctx, model) -> StepOutcome:
    from onnxscript.rewriter.ort_fusions import _core

    try:
        with _quiet_stdout():
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
    if mha.get("mha1", 0) == 0 and mha.get("mha2", 0) == 0:
        # fuse_xformers skips these when no MultiHeadAttention was formed.
        return StepOutcome(model, counts={"mha_bias": 0, "attention": 0},
                           notes=["skipped: the multi_head_attention step formed no MultiHeadAttention, "
                                  "and Attention is built from MultiHeadAttention in this engine"])
    return _os_fuse(("mha_bias", fuse_mha_bias), ("attention", fuse_attention))(ctx, model)


def _os_final(ctx, model) -> StepOutcome:
    from onnxscript.optimizer import optimize

    with _quiet_stdout():
        optimize(model)
    return StepOutcome(model)


def _os_patterns(ctx, model) -> StepOutcome:
    from onnxscript.rewriter import rewrite
    from onnxscript.rewriter.ort_fusions._core import ORT_PATTERN_REWRITE_RULES

    with _quiet_stdout():
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


def _os_steps() -> tuple[EngineStep, ...]:
    from onnxscript.rewriter.ort_fusions import _core as c

    return (
        EngineStep("gemm_to_matmul_add", _os_gemm),
        EngineStep("pre_optimize", _os_pre),
        EngineStep("gelu", _os_fuse(("erf_gelu", c.fuse_erfgelu))),
        EngineStep("simplified_layer_norm", _os_fuse(("rms_normalization", c.fuse_rms_normalization))),
        EngineStep("skip_layer_norm", _os_fuse(("skip_layer_normalization", c.fuse_skip_layer_normalization))),
        EngineStep("skip_simplified_layer_norm", _os_fuse(("skip_rms_normalization", c.fuse_skip_rms_normalization))),
        EngineStep("rotary_embedding", _os_fuse(("rotary_embedding", c.fuse_rotary_embedding),
                                                ("cos_sin_cache", c.fuse_cos_sin_cache))),
        EngineStep("cse", _os_cse),
        EngineStep("partial_rotary_embedding", _os_fuse(("partial_rotary_embedding", c.fuse_partial_rotary_embedding))),
        EngineStep("sdpa", _os_fuse(("sdpa", c.fuse_sdpa, {"apply_shape_inference": True}))),
        EngineStep("group_query_attention", _os_fuse(("gqa", c.fuse_gqa), ("packed_qkv_for_gqa", c.fuse_qkv_gqa))),
        EngineStep("multi_head_attention", _os_fuse(("mha1", c.fuse_mha1), ("mha2", c.fuse_mha2),
                                                    ("mha_scale", c.fuse_mha_scale))),
        EngineStep("attention", _os_attention, reads=("multi_head_attention",)),
        EngineStep("fast_gelu", _os_fuse(("gelu", c.fuse_gelu))),
        EngineStep("bias_gelu", _os_fuse(("bias_gelu", c.fuse_bias_gelu))),
        EngineStep("sdpa_to_mha", _os_fuse(("sdpa_via_mha", c.replace_sdpa_by_mha))),
        EngineStep("final_optimize", _os_final),
        EngineStep("ort_patterns", _os_patterns),
        EngineStep("finalize", _os_finalize),
    )


_STEPS_CACHE: dict[str, tuple[EngineStep, ...]] = {}


def engine_steps(engine: str) -> tuple[EngineStep, ...]:
    """The ordered steps of ``engine`` ("ort" or "onnxscript")."""
    if engine == "ort":
        return ORT_STEPS
    if engine == "onnxscript":
        if "onnxscript" not in _STEPS_CACHE:
            _STEPS_CACHE["onnxscript"] = _os_steps()
        return _STEPS_CACHE["onnxscript"]
    raise FusionError(f"engine must be 'ort' or 'onnxscript', not {engine!r}")


# ---------------------------------------------------------------- one-shot calls (for comparison)
def one_shot(engine: str, model: onnx.ModelProto, *, num_heads: int = 0, hidden_size: int = 0) -> onnx.ModelProto:
    """The engine's own single call on a copy of ``model``, for faithfulness checks and timing."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    if engine == "ort":
        from onnxruntime.transformers.optimizer import optimize_model

        if not (num_heads > 0 and hidden_size > 0 and hidden_size % num_heads == 0):
            num_heads, hidden_size = 0, 0
        with tempfile.TemporaryDirectory(prefix="workbench-oneshot-") as tmp:
            path = os.path.join(tmp, "in.onnx")
            with open(path, "wb") as f:
                f.write(copy.SerializeToString())
            with capture_ort_logs():
                opt = optimize_model(path, model_type="bert", num_heads=num_heads, hidden_size=hidden_size)
        return opt.model
    if engine == "onnxscript":
        import onnx_ir as ir
        from onnxscript.rewriter.ort_fusions import optimize_for_ort

        with _quiet_stdout():
            m, _ = optimize_for_ort(ir.serde.deserialize_model(copy))
        return ir.serde.serialize_model(m)
    raise FusionError(f"engine must be 'ort' or 'onnxscript', not {engine!r}")
