"""MultiHeadAttention from ONNX's standard ``Attention`` op (opset 23+).

From opset 23 the dynamo exporter writes transformers' sdpa attention as
ONNX's own ``Attention``, with the head split and merge around it::

    q = Transpose(Reshape(q_bsh, [B, S, N, D]), perm=0,2,1,3)      # likewise k, v
    y = Attention(q, k, v, mask)                                    # mask: bool [B, 1, S, L]
    out = Reshape(Transpose(y, perm=0,2,1,3), [B, S, H])

Neither engine starts from this op. This rule maps it to
``com.microsoft.MultiHeadAttention(q_bsh, k_bsh, v_bsh, attention_bias=bias)``
with ``num_heads = N``: the four Transposes and four Reshapes of each layer
go, and in onnxscript's chain its own ``attention`` step can then pack the
three projections into one contrib ``Attention`` (``mha_bias``, then
``attention``), as it does for opset-18 exports. Standard ``Attention``
nodes with 3-D inputs (``q_num_heads`` set) map directly.

What the check insists on (each failure is a ``MatchResult`` reason the
timeline shows under "why not fused"):

* no KV cache (``past_key``/``past_value``) and no used ``present_*`` or
  ``qk_matmul_output`` output (whatever its ``qk_matmul_output_mode``);
* ``is_causal = 0`` and ``softcap = 0``; ``softmax_precision`` unset or float;
* float32 or float16 tensors, as many key/value heads as query heads, equal
  head sizes, and a head split that keeps batch and sequence in place;
* a mask that is bool or of the query's float type, 4-D
  ``[B or 1, 1 or N, S, L]`` (MultiHeadAttention's ``attention_bias``
  shape), or no mask. A bool mask becomes ``Where(mask, 0, lowest)``.
  (ONNX Runtime 1.31's own kernel for the standard op refuses a mask that
  broadcasts over the query axis, ``[B, 1, 1, L]``, at run time; a 2-D
  ``[S, L]`` mask it runs, and this rule leaves to it.)

A query row whose every key is masked gives zeros from the standard op and
the mean of V from MultiHeadAttention; such rows carry no token (a padded
sequence still attends its real tokens), so no output a user reads changes.
"""

from __future__ import annotations

import numpy as np

from ..diagnostics import summarize_messages
from ..graph_utils import dims, same_dim, unique_name
from ..lazy import ir
from ..rule import PatternCase, PatternRule, pattern

#: The float types the kernel takes (``ir.DataType`` names) and their numpy types.
_FLOATS = {"FLOAT": np.float32, "FLOAT16": np.float16}
_PERM = [0, 2, 1, 3]


def _fmt(shape) -> str:
    """A shape from ``graph_utils.dims`` as text: ``[batch, 12, sequence, 64]``, ``?`` for unknown dims."""
    if shape is None:
        return "unknown"
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def _is(dim, n: int) -> bool:
    return isinstance(dim, int) and dim == n


def _float(dtype) -> bool:
    return dtype is not None and dtype.name in _FLOATS


class _Common(PatternCase):
    """Checks shared by the 4-D and 3-D rules: attributes, extra inputs and outputs, the mask."""

    def setup(self):
        # One Where per mask for the whole graph: every layer reads the same bias.
        self._bias_cache: dict = {}

    def cleanup(self):
        self._bias_cache = {}

    def _check_node(self, node: ir.Node) -> str | None:
        extra = [v for v in node.inputs[4:] if v is not None]
        if extra:
            return ("it reads a KV cache (past_key/past_value); MultiHeadAttention is mapped here without one")
        used = [o for o in node.outputs[1:] if o is not None and (o.uses() or o.is_graph_output())]
        if used:
            mode = node.attributes.get_int("qk_matmul_output_mode", 0)
            names = ", ".join(("present_key", "present_value", "qk_matmul_output")[o.index() - 1] for o in used)
            return (f"its {names} output is used (qk_matmul_output_mode={mode}); MultiHeadAttention does not "
                    f"give these here")
        if node.attributes.get_int("is_causal", 0):
            return "is_causal=1 (a causal mask): the rule maps bidirectional encoder attention only"
        softcap = node.attributes.get_float("softcap", 0.0)
        if softcap:
            return f"softcap={softcap:g}: MultiHeadAttention has no softcap"
        prec = node.attributes.get_int("softmax_precision", None)
        if prec is not None and prec not in (ir.DataType.FLOAT, node.inputs[0].dtype):
            return f"softmax_precision={ir.DataType(prec).name}: MultiHeadAttention computes the softmax in float"
        dtype = node.inputs[0].dtype
        if not _float(dtype):
            what = dtype.name if dtype else "of unknown type"
            return f"the query is {what}; MultiHeadAttention takes float32 or float16"
        return None

    def _last_checks(self, r, node, q3, k3, v3, mask, dtype, heads: int):
        """What both cases check last: one batch and key/value sequence, a mask the kernel takes; then the match."""
        if not (same_dim(k3[1], v3[1]) and same_dim(k3[0], q3[0]) and same_dim(v3[0], q3[0])):
            return r.fail(f"query, key and value do not share batch and key/value sequence "
                          f"({_fmt(q3)}, {_fmt(k3)}, {_fmt(v3)})", node)
        why = self._check_mask(mask, dtype, q3[0], heads, q3[1], k3[1])
        if why:
            return r.fail(why, mask)
        self._heads = heads
        return r

    def _check_mask(self, mask: ir.Value | None, dtype, batch, heads: int, seq, kv_seq) -> str | None:
        if mask is None:
            return None
        if mask.dtype not in (ir.DataType.BOOL, dtype):
            return (f"the mask is {mask.dtype.name if mask.dtype else 'of unknown type'}: only a bool mask or one "
                    f"of the query's type ({dtype.name}) maps to MultiHeadAttention's attention_bias")
        d = dims(mask)
        want = f"[B or 1, 1 or {heads}, S, L] (here [{batch}, 1 or {heads}, {seq}, {kv_seq}])"
        if d is None:
            return f"the mask's shape is unknown; MultiHeadAttention's attention_bias must be {want}"
        ok = (len(d) == 4 and (_is(d[0], 1) or same_dim(d[0], batch)) and (_is(d[1], 1) or _is(d[1], heads))
              and same_dim(d[2], seq) and same_dim(d[3], kv_seq))
        if not ok:
            return f"the mask has shape {_fmt(d)}; MultiHeadAttention's attention_bias must be {want}"
        return None

    def _attention_bias(self, op, mask: ir.Value | None, dtype) -> ir.Value | None:
        """The additive bias for ``mask``: itself when float, else one ``Where`` shared by every layer."""
        if mask is None or mask.dtype != ir.DataType.BOOL:
            return mask
        key = (mask, dtype)
        cached = self._bias_cache.get(key)
        if cached is None:
            np_t = _FLOATS[dtype.name]
            zero = op.initializer(ir.tensor(np.array(0, dtype=np_t)), name=unique_name(mask.graph, f"{mask.name}_zero_wb"))
            low = op.initializer(ir.tensor(np.array(np.finfo(np_t).min, dtype=np_t)),
                                 name=unique_name(mask.graph, f"{mask.name}_lowest_wb"))
            cached = op.Where(mask, zero, low)
            if cached.producer() is not None:
                cached.producer().name = f"{mask.name}_bias_wb"
            cached.name = f"{mask.name}_bias_wb"
            self._bias_cache[key] = cached
        return cached

    def _mha(self, op, q, k, v, mask, node: ir.Node, heads: int):
        bias = self._attention_bias(op, mask, node.inputs[0].dtype)
        attrs = {"num_heads": heads}
        scale = node.attributes.get_float("scale", None)
        if scale is not None:
            attrs["scale"] = scale
        if bias is None:
            out = op.MultiHeadAttention(q, k, v, _domain="com.microsoft", **attrs)
        else:
            out = op.MultiHeadAttention(q, k, v, None, None, bias, _domain="com.microsoft", **attrs)
        mha = out.producer()
        if mha is not None:
            if node.name:
                mha.name = f"{node.name}_mha_wb"
            # The exporter's scope metadata names the encoder layer: views group the new node with it.
            mha.metadata_props.update(node.metadata_props)
        return out


class StandardAttentionFusion(_Common):
    """Head split → standard ``Attention`` (4-D) → head merge  =>  ``com.microsoft.MultiHeadAttention``."""

    case_name = "workbench_standard_attention"
    # remove_nodes=False: onnxscript would refuse a match whose nodes have other uses before the
    # check can name them (a used present_key or qk_matmul_output). Kept nodes nothing reads any
    # more go in the unused-node pass after the rewrite.
    remove_nodes = False

    def pattern(self, op, q_bsh, k_bsh, v_bsh, shape_q, shape_k, shape_v, shape_out):
        def split(x, shape, name):
            return op.Transpose(op.Reshape(x, shape, _outputs=[f"{name}_bsnd"]), perm=_PERM, _outputs=[f"{name}_bnsd"])

        q, k, v = split(q_bsh, shape_q, "q"), split(k_bsh, shape_k, "k"), split(v_bsh, shape_v, "v")
        y = op.Attention(q, k, v, pattern.Var("mask", can_match_none=True), _allow_other_inputs=True,
                         _outputs=["y"])
        return op.Reshape(op.Transpose(y, perm=_PERM, _outputs=["y_bsnd"]), shape_out, _outputs=["out"])

    def check(self, context, q_bsh, k_bsh, v_bsh, q_bsnd, k_bsnd, v_bsnd, q_bnsd, k_bnsd, v_bnsd, y, out,
              mask=None, **_):
        r = pattern.MatchResult()
        node = y.producer()
        why = self._check_node(node)
        if why:
            return r.fail(why, node)
        q3, q4, k3, k4, v3, v4 = (dims(x) for x in (q_bsh, q_bnsd, k_bsh, k_bnsd, v_bsh, v_bnsd))
        if any(d is None for d in (q3, q4, k3, k4, v3, v4)):
            return r.fail("the query/key/value shapes are unknown (no shape inference on this graph)", node)
        if any(len(d) != 3 for d in (q3, k3, v3)) or any(len(d) != 4 for d in (q4, k4, v4)):
            return r.fail(f"the heads are not split from [B, S, H] tensors (query {_fmt(q3)} -> {_fmt(q4)})", node)
        heads, head = q4[1], q4[3]
        if not (isinstance(heads, int) and isinstance(head, int)):
            return r.fail(f"the head count or head size is not a constant (query {_fmt(q4)})", q_bnsd)
        if not (_is(k4[1], heads) and _is(v4[1], heads)):
            return r.fail(f"{heads} query heads but key {_fmt(k4)} / value {_fmt(v4)}: grouped-query attention, "
                          f"which MultiHeadAttention does not do", node)
        if not (_is(k4[3], head) and _is(v4[3], head)):
            return r.fail(f"head sizes differ (query {head}, key {k4[3]}, value {v4[3]})", node)
        hidden = heads * head
        for name, d3, d4, pre in (("query", q3, q4, dims(q_bsnd)), ("key", k3, k4, dims(k_bsnd)),
                                  ("value", v3, v4, dims(v_bsnd))):
            if not _is(d3[2], hidden):
                return r.fail(f"the {name} is {_fmt(d3)}, not [B, S, {heads} x {head}]", node)
            if pre is None or len(pre) != 4 or not (same_dim(pre[0], d3[0]) and same_dim(pre[1], d3[1])
                                                    and same_dim(d4[0], d3[0]) and same_dim(d4[2], d3[1])):
                return r.fail(f"the {name} head split does not keep batch and sequence in place "
                              f"({_fmt(d3)} -> {_fmt(pre)})", node)
        o = dims(out)
        if o is None or len(o) != 3 or not (same_dim(o[0], q3[0]) and same_dim(o[1], q3[1]) and _is(o[2], hidden)):
            return r.fail(f"the heads are not merged back to [B, S, H] (output {_fmt(o)})", out)
        return self._last_checks(r, node, q3, k3, v3, mask, q_bsh.dtype, heads)

    def rewrite(self, op, q_bsh, k_bsh, v_bsh, y, mask=None, **_):
        return self._mha(op, q_bsh, k_bsh, v_bsh, mask, y.producer(), self._heads)


class StandardAttention3DFusion(_Common):
    """Standard ``Attention`` with 3-D inputs (``q_num_heads`` set)  =>  ``com.microsoft.MultiHeadAttention``.

    Also the rule that says why a 4-D standard ``Attention`` whose heads are
    not split by Reshape → Transpose is left alone.
    """

    case_name = "workbench_standard_attention_3d"
    remove_nodes = False

    def pattern(self, op, q, k, v):
        return op.Attention(q, k, v, pattern.Var("mask", can_match_none=True), _allow_other_inputs=True,
                            _outputs=["y"])

    def check(self, context, q, k, v, y, mask=None, **_):
        r = pattern.MatchResult()
        node = y.producer()
        why = self._check_node(node)
        if why:
            return r.fail(why, node)
        q3, k3, v3 = dims(q), dims(k), dims(v)
        if q3 is not None and len(q3) == 4:
            return r.fail(f"the 4-D query {_fmt(q3)} is not split into heads from a [B, S, H] tensor by "
                          f"Reshape -> Transpose(0, 2, 1, 3), or the output is not merged back the same way", node)
        if any(d is None or len(d) != 3 for d in (q3, k3, v3)):
            return r.fail(f"query/key/value are not all 3-D [B, S, H] (query {_fmt(q3)}, key {_fmt(k3)}, "
                          f"value {_fmt(v3)})", node)
        heads = node.attributes.get_int("q_num_heads", 0)
        kv_heads = node.attributes.get_int("kv_num_heads", heads)
        if heads <= 0:
            return r.fail("3-D inputs without q_num_heads", node)
        if kv_heads != heads:
            return r.fail(f"q_num_heads={heads} but kv_num_heads={kv_heads}: grouped-query attention, which "
                          f"MultiHeadAttention does not do", node)
        if not (isinstance(q3[2], int) and q3[2] % heads == 0 and _is(k3[2], q3[2]) and _is(v3[2], q3[2])):
            return r.fail(f"hidden sizes do not split into {heads} equal heads (query {_fmt(q3)}, key {_fmt(k3)}, "
                          f"value {_fmt(v3)})", node)
        return self._last_checks(r, node, q3, k3, v3, mask, q.dtype, heads)

    def rewrite(self, op, q, k, v, y, mask=None, **_):
        return self._mha(op, q, k, v, mask, y.producer(), self._heads)


def _standard(model) -> int:
    """Standard ONNX ``Attention`` nodes in the graph."""
    return sum(1 for n in model.graph if n.op_type == "Attention" and n.domain in ("", "ai.onnx"))


class StandardAttentionRule(PatternRule):
    """ONNX's standard ``Attention`` → ``MultiHeadAttention``: the 4-D case, then the 3-D one."""

    name = "standard_attention"
    title = "MultiHeadAttention from ONNX's standard Attention (workbench rule)"
    matches = ("ONNX's own Attention op (opset 23+), as the dynamo exporter writes transformers' sdpa attention, "
               "with the head split (Reshape -> Transpose 0,2,1,3) before it and the merge after it; a bool or float "
               "[B|1, 1|N, S, L] mask or none; no KV cache, is_causal, softcap or qk_matmul_output")
    rewrites = ("Reshape -> Transpose (Q,K,V) -> Attention(q, k, v, mask) -> Transpose -> Reshape  =>  "
                "MultiHeadAttention(q, k, v, attention_bias=Where(mask, 0, lowest))")
    emits = "MultiHeadAttention"
    effect = ("the exporter's standard op becomes ONNX Runtime's contrib kernel and 8 head split/merge nodes per "
              "layer go; in the onnxscript chain the attention step can then pack Q, K and V into one contrib "
              "Attention; runs early in the ort chain (ORT's shape inference does not know the standard op)")
    # Early in the ort chain: ORT's symbolic shape inference, which SkipLayerNormalization needs, knows
    # MultiHeadAttention but not ONNX's standard Attention.
    after = {"ort": "identity_cast", "onnxscript": "multi_head_attention"}
    anchors = ("Attention",)
    anchor_domain = ""
    absent = ("nothing to map: no standard ONNX Attention nodes (the dynamo exporter writes them from opset 23 "
              "for sdpa attention)")

    def cases(self) -> tuple:
        return (StandardAttentionFusion(), StandardAttention3DFusion())

    def left(self, model, count: int) -> int:
        return _standard(model)

    def pattern_notes(self, count: int, left: int, reasons: list[str]) -> list[str]:
        if not (count and left):
            return []
        # Part of the layers mapped: the diagnostic must still say why the rest did not.

        why = "; ".join(summarize_messages(reasons)) or "no reason given"
        return [f"mapped {count} of {count + left} standard Attention nodes to MultiHeadAttention; {left} stay "
                f"as they are. onnxscript's matcher (workbench rule) says: {why}"]


def standard_attention_rules():
    """The onnxscript ``RewriteRuleSet`` that maps standard ``Attention`` to ``MultiHeadAttention`` (4-D rule first)."""
    return StandardAttentionRule().rule_set()


def fuse_standard_attention(model) -> int:
    """Map ONNX's standard ``Attention`` to ``com.microsoft.MultiHeadAttention`` in an ``onnx_ir.Model``; return how many."""
    return StandardAttentionRule().apply(model).count
