"""The ``ort`` engine: ONNX Runtime's transformers optimizer, one ``BertOnnxModel`` call per step.

Each step makes a fresh ``BertOnnxModel`` over the working model and calls
the same ``fuse_*`` methods, in the same order and with the same options, as
``BertOnnxModel.optimize()`` after ``optimize_model``'s ORT_ENABLE_BASIC
pass (its default for model_type "bert"). Each step's anchors are read from
ORT's own ``Fusion`` objects (:class:`OrtAnchors`). The workbench's rules
that join this chain (``sdpa_attention``, ``standard_attention``) say where
themselves (``rules/``); ``registry.py`` puts them in.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import tempfile
from typing import Callable

import onnx
from onnx.external_data_helper import load_external_data_for_tensor

from ..errors import FusionError
from .anchors import EVERY_GRAPH, Anchors, GraphOps
from .engine_logs import capture_ort_logs
from .engine_types import EngineContext, EngineStep, StepOutcome
from .snapshot_weights import nbytes, weight_key

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
    "fuse_rotary_embeddings", "fuse_attention", "fuse_qordered_mamtul",
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


class OrtAnchors(Anchors):
    """The anchors of ``BertOnnxModel`` calls: the ``search_op_types`` of the ORT fusions they apply."""

    def __init__(self, *calls: str | tuple):
        self.calls = calls

    def missing(self, g: GraphOps) -> str:
        fusions = ort_anchors(*self.calls)
        if not fusions:
            return ""
        unusable: list[tuple[str, str]] = []
        for cls, ops in fusions:
            for op in ops:
                if not g.has(op):
                    continue
                need = _ANCHOR_NEEDS.get((cls, op))
                if need is None or g.has(need):
                    return ""
                unusable.append((op, need))
        if any("RotaryEmbedding" in f for f in g.functions):
            return ""  # fuse_rotary_embeddings also removes such functions
        anchors = list(dict.fromkeys(op for _, ops in fusions for op in ops))
        missing = [op for op in anchors if not g.has(op)]
        parts = [f"no {' / '.join(missing)} nodes"] if missing else []
        parts += [f"no {need} nodes, which the {op} anchors need" for op, need in dict.fromkeys(unusable)]
        classes = ", ".join(dict.fromkeys(c for c, _ in fusions))
        return f"nothing to fuse: {'; '.join(parts)} (the anchors of ONNX Runtime's {classes})"

    def ops(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(op for _, ops in ort_anchors(*self.calls) for op in ops))


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
                # The session is made only for the graph it saves and never runs: packing every MatMul
                # weight for the kernels is wasted work (bert-base, AVX2 EPYC, 5 interleaved pairs under
                # load: 6.7 s -> 3.5 s median; the same saved graph and weights, byte for byte).
                so.add_session_config_entry("session.disable_prepacking", "1")
                ort.InferenceSession(src, so, providers=["CPUExecutionProvider"],
                                     disabled_optimizers=["ConstantSharing"])
            except Exception as e:
                raise FusionError(f"ONNX Runtime could not load the model for its basic optimizations: "
                                  f"{str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__}") from e
        out = onnx.load(dst, load_external_data=False)
        _weights_back(out, tmp, ctx.store)
    _metadata_back(out, model)
    return StepOutcome(out, messages=lines)


def _metadata_back(out: onnx.ModelProto, model: onnx.ModelProto) -> None:
    """Give the nodes ORT kept their metadata back (ORT's saved graph drops it).

    The dynamo exporter names a node's encoder layer only in its metadata
    (``pkg.torch.onnx.name_scopes``); without it, views and provenance of
    every later ort step on a dynamo export lose the layers.
    """
    meta = {n.name: n.metadata_props for n in model.graph.node if n.name and len(n.metadata_props)}
    if not meta:
        return
    for n in out.graph.node:
        props = meta.get(n.name)
        if props is not None and not len(n.metadata_props):
            n.metadata_props.extend(props)


_STORE_THRESHOLD = 4096  # the WeightStore's: smaller tensors stay inline either way


def _weights_back(model: onnx.ModelProto, folder: str, store) -> None:
    """Turn the side-file weights of ORT's output back into store stubs, or load the new ones.

    A weight the pass kept has its name, type and shape in the store (neither
    engine rewrites an initializer under its old name: ``snapshot_weights.py``); only
    what the pass made itself (folded constants) is read from the side file.
    """

    for t in model.graph.initializer:
        if t.data_location != onnx.TensorProto.EXTERNAL:
            continue
        key = weight_key(t, nbytes(t))
        if store is not None and store.has(key):
            t.CopyFrom(store.stub(t, key))
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
    return EngineStep(name, _ort_method(*calls), OrtAnchors(*calls))


#: ONNX Runtime's own steps in ``BertOnnxModel.optimize()`` order; clean-ups run on every graph.
ORT_STEPS: tuple[EngineStep, ...] = (
    EngineStep("ort_basic", _ort_basic, EVERY_GRAPH),
    EngineStep("identity_cast", _ort_method("utils.remove_identity_nodes", "utils.remove_useless_cast_nodes",
                                            "fuse_constant_fold"), EVERY_GRAPH),
    _ort_step("layer_norm", "fuse_layer_norm"),
    _ort_step("simplified_layer_norm", "fuse_simplified_layer_norm"),
    _ort_step("gelu", "fuse_gelu"),
    EngineStep("reshape", _ort_method("preprocess", "fuse_reshape"), EVERY_GRAPH),
    _ort_step("skip_layer_norm", ("fuse_skip_layer_norm", True)),
    _ort_step("skip_simplified_layer_norm", "fuse_skip_simplified_layer_norm"),
    _ort_step("rotary_embedding", "fuse_rotary_embeddings"),
    EngineStep("attention", _ort_attention, OrtAnchors("fuse_attention", "fuse_qordered_mamtul")),
    _ort_step("shape", "fuse_shape"),
    _ort_step("embed_layer_norm", ("fuse_embed_layer", True)),
    EngineStep("postprocess", _ort_method("utils.remove_useless_reshape_nodes", "postprocess"), EVERY_GRAPH),
    _ort_step("bias_gelu", ("fuse_bias_gelu", True), ("fuse_bias_gelu", False)),
    _ort_step("bias_skip_layer_norm", "fuse_add_bias_skip_layer_norm"),
    _ort_step("gelu_approximation", "gelu_approximation"),
    _ort_step("gemm_fast_gelu", "fuse_gemm_fast_gelu"),
    EngineStep("finalize", _ort_finalize, EVERY_GRAPH),
)
