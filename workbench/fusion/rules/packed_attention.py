"""ONNX Runtime's packed ``com.microsoft.Attention`` read back into its parts, for the rules that put another
attention kernel in its place (``attention_as_mha``, ``attention_as_standard``).

Both engines' ``attention`` steps write one packed node per layer::

    Attention(x [B, S, H_in], weights [H_in, 3H], bias [3H], mask_index, past, attention_bias)

``weights`` is an initializer (ONNX Runtime's optimizer) or a ``Concat`` of the three projections
(onnxscript's rules); the padding mask comes as ``mask_index`` (ONNX Runtime's chain: a 1-D ``[B]`` of key
end positions, from ``EmbedLayerNormalization`` or a ``ReduceSum`` of the 2-D mask; or the raw 2-D
``[B, L]`` mask, or a 3-D ``[B, S, L]`` one) or as a float ``attention_bias`` ``[B|1, 1|N, S, L]`` added to the
scores (onnxscript's chain). :func:`read_packed` returns the parts, or why a node is not one this module
can take apart (a KV cache, causal or rotary attention, unequal Q/K/V sizes, a mask with start positions).
:func:`project` writes the projection as the alternative kernels take it: one MatMul over the packed weights
and a Split into Q, K and V (see its docstring for the measurement that chose it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..graph_utils import const, dims, initializer, node_label, same_dim
from ..lazy import ir
from ..rule import Match, Rule

#: Mask kinds: the key end positions [B], the raw [B, L] mask, a [B, S, L] mask; "" none.
END, RAW, FULL = "end", "raw", "3d"


@dataclass
class PackedAttention:
    """The parts of one packed ``Attention`` node."""

    node: object
    x: object
    weights: object
    bias: object | None
    mask: object | None
    mask_kind: str
    attention_bias: object | None
    heads: int
    hidden: int
    scale: float | None
    mask_filter_value: float | None


def _used(value) -> bool:
    return value is not None and (bool(value.uses()) or value.is_graph_output())


def _input(node, i: int):
    return node.inputs[i] if len(node.inputs) > i else None


def _hidden(node, weights) -> int | None:
    """H (each of Q, K, V): from ``qkv_hidden_sizes``, the weights' shape or the weights themselves."""
    sizes = tuple(node.attributes.get_ints("qkv_hidden_sizes", ()))
    if sizes:
        return int(sizes[0]) if len(set(sizes)) == 1 else None
    d = dims(weights)
    if d is not None and len(d) == 2 and isinstance(d[1], int) and d[1] % 3 == 0:
        return d[1] // 3
    src = weights.producer()
    concat = src is not None and src.op_type == "Concat" and len(src.inputs) == 3
    if concat and src.attributes.get_int("axis", 0) in (1, -1):
        first = dims(src.inputs[0])  # onnxscript's packing of the three projections
        return first[1] if first is not None and len(first) == 2 and isinstance(first[1], int) else None
    w = const(weights)
    return w.shape[1] // 3 if w is not None and w.ndim == 2 and w.shape[1] % 3 == 0 else None


def mask_kind(mask, x) -> tuple[str, str]:
    """What ``mask_index`` holds (:data:`END`, :data:`RAW`, :data:`FULL`), or "" and why it cannot say.

    Read from its producer (``EmbedLayerNormalization``'s second output and a ``ReduceSum`` over the keys
    without kept dims are ``[B]`` key end positions), else from its shape.
    """
    src = mask.producer()
    if src is not None and src.op_type == "EmbedLayerNormalization" and mask.index() == 1:
        return END, ""
    if src is not None and src.op_type == "ReduceSum" and not src.attributes.get_int("keepdims", 1):
        return END, ""
    d = dims(mask)
    if d is not None:
        if len(d) == 1:
            xd = dims(x)
            if xd is not None and same_dim(d[0], xd[0]):
                return END, ""
            return "", (f"its 1-D mask index {mask.name} is {d}, not known to be [batch] key end positions "
                        f"(a [2 x batch] index with start positions has no MultiHeadAttention form)")
        if len(d) in (2, 3):
            return (RAW if len(d) == 2 else FULL), ""
        return "", f"its mask index {mask.name} is {len(d)}-D; only 1-D [batch], 2-D and 3-D masks are mapped"
    where = node_label(src) if src is not None else "a graph input"
    return "", f"the shape of its mask index {mask.name} (from {where}) is unknown"


def read_packed(node, kinds: dict | None = None) -> tuple[PackedAttention | None, str]:
    """The parts of the packed ``Attention`` ``node``, or None and why it is not taken apart.

    ``kinds``: mask value → its kind, as read at an earlier layer of the same pass (every layer reads the one
    mask; a later layer's input often has no shape left to compare the mask's length with).
    """
    label = node_label(node)
    present = node.outputs[1] if len(node.outputs) > 1 else None
    if any(_input(node, i) is not None for i in (4, 6)) or _used(present):
        return None, f"{label} reads or writes a KV cache (past/present); the alternatives are mapped without one"
    for attr, what in (("unidirectional", "causal (unidirectional=1)"), ("do_rotary", "rotary (do_rotary=1)")):
        if node.attributes.get_int(attr, 0):
            return None, f"{label} is {what} attention; the alternatives map bidirectional encoder attention only"
    heads = node.attributes.get_int("num_heads", 0)
    x, weights, bias = node.inputs[0], node.inputs[1], _input(node, 2)
    hidden = _hidden(node, weights)
    if heads <= 0 or not hidden or hidden % heads:
        sizes = list(node.attributes.get_ints("qkv_hidden_sizes", ()))
        return None, (f"{label}'s Q, K and V sizes are not known to be equal and a multiple of its {heads} heads "
                      f"(qkv_hidden_sizes {sizes or 'unset'}, weights {dims(weights)})")
    mask, attention_bias = _input(node, 3), _input(node, 5)
    kind = ""
    if mask is not None:
        if attention_bias is not None:
            return None, f"{label} has both a mask index and an attention bias; only one of them is mapped"
        kind, why = (kinds[mask], "") if kinds is not None and mask in kinds else mask_kind(mask, x)
        if not kind:
            return None, f"{label}: {why}"
        if kinds is not None:
            kinds[mask] = kind
    scale = node.attributes.get_float("scale", 0.0) or None
    fill = node.attributes.get_float("mask_filter_value", None)
    return PackedAttention(node, x, weights, bias, mask, kind, attention_bias, heads, hidden, scale, fill), ""


class Builder:
    """New nodes for one pass of a rule, and the constants and masks every layer shares (made once per graph)."""

    def __init__(self, graph):
        self.graph, self.nodes, self._shared = graph, [], {}
        #: Mask value → its kind (``read_packed``'s memo for this pass).
        self.mask_kinds: dict = {}

    def take(self) -> list:
        """The nodes made since the last call (to insert before the next kernel)."""
        out, self.nodes = self.nodes, []
        return out

    def op(self, op_type: str, inputs, **attrs):
        n = ir.node(op_type, inputs, attributes=attrs)
        self.nodes.append(n)
        return n.outputs[0]

    def i64(self, name: str, values):
        key = ("i64", name)
        if key not in self._shared:
            self._shared[key] = initializer(self.graph, f"attn_alt_{name}", np.array(values, dtype=np.int64))
        return self._shared[key]

    def shared(self, key, build):
        """``build()``'s value, made once for ``key`` in this pass (every layer reads the same mask)."""
        if key not in self._shared:
            self._shared[key] = build()
        return self._shared[key]

    def over_queries(self, value, x):
        """``value`` ``[., ., 1|S, L]`` expanded to ``[., ., S, L]`` (S: ``x``'s sequence)."""
        seq = self.op("Shape", [x], start=1, end=2)
        target = self.op("Concat", [self.i64("ones2", [1, 1]), seq, self.i64("one1", [1])], axis=0)
        return self.op("Expand", [value, target])


def project(b: Builder, p: PackedAttention, *, add_bias: bool) -> list:
    """Q, K and V ``[B, S, H]`` from ``p``'s input, written with ``b``.

    One MatMul over the packed ``[H_in, 3H]`` weights (the bias added first when ``add_bias``: the standard
    op has no bias input; MultiHeadAttention takes the packed bias itself), then a Split with explicit sizes
    (valid from opset 13 to 23 alike). Chosen over three MatMuls on sliced weights by measurement
    (``docs/encoders.md``); it also needs no weight copies, and takes onnxscript's computed ``Concat`` weights.
    """
    out = b.op("MatMul", [p.x, p.weights])
    if add_bias and p.bias is not None:
        out = b.op("Add", [out, p.bias])
    split = ir.node("Split", [out, b.i64(f"split_{p.hidden}", [p.hidden] * 3)], attributes={"axis": -1},
                    num_outputs=3)
    b.nodes.append(split)
    for o in split.outputs:
        o.type = p.x.type
    return list(split.outputs)


def keep_mask(b: Builder, p: PackedAttention):
    """The bool ``[B, 1, S, L]`` "may attend" mask of ``p``'s ``mask_index``, one for every layer reading it.

    Written out over the query axis: ONNX Runtime 1.31's standard ``Attention`` refuses a ``[B, 1, 1, L]``
    mask broadcast over it (``standard_attention.py``).
    """

    def build():
        if p.mask_kind == FULL:  # [B, S, L]
            return b.op("Unsqueeze", [b.op("Cast", [p.mask], to=ir.DataType.BOOL), b.i64("axis1", [1])])
        if p.mask_kind == END:  # key j is real when j < end
            seq = b.op("Squeeze", [b.op("Shape", [p.x], start=1, end=2)])
            positions = b.op("Range", [b.i64("zero", 0), seq, b.i64("one", 1)])
            ends = b.op("Unsqueeze", [b.op("Cast", [p.mask], to=ir.DataType.INT64), b.i64("axis1", [1])])
            keep2 = b.op("Less", [positions, ends])
        else:  # RAW: [B, L], nonzero where the key is real
            keep2 = b.op("Cast", [p.mask], to=ir.DataType.BOOL)
        return b.over_queries(b.op("Unsqueeze", [keep2, b.i64("axes12", [1, 2])]), p.x)

    return b.shared(("keep", id(p.mask)), build)


def float_bias(b: Builder, p: PackedAttention):
    """``p``'s float attention bias with the query axis written out (``[B|1, 1|N, S, L]``) for the standard op."""
    bias, d, xd = p.attention_bias, dims(p.attention_bias), dims(p.x)
    if d is not None and len(d) == 4 and xd is not None and same_dim(d[2], xd[1]) and d[2] != 1:
        return bias
    return b.shared(("bias", id(bias)), lambda: b.over_queries(bias, p.x))


class PackedAttentionAlternative(Rule):
    """What the rules that run a packed ``Attention`` on another kernel share: opt-in, after the attention step
    (last in the ort chain: ORT's embed_layer_norm and postprocess steps rewire an ``Attention`` node's mask input
    by op type, whatever its domain), anchored on the contrib op, each match read by :func:`read_packed`.
    A subclass sets its catalog row and ``rewrite``; ``blocked`` (set in ``begin``) refuses every node with its
    words."""

    prerequisites = ("attention",)
    default_on = False
    alternative_to = "attention"
    after = {"ort": "bias_skip_layer_norm", "onnxscript": "attention"}
    anchors = ("Attention",)
    anchor_domain = "com.microsoft"
    matches_packed = ("each packed com.microsoft.Attention the attention step wrote (no KV cache, bidirectional, "
                      "equal Q, K and V sizes; a [B] end-position, [B, L] or [B, S, L] mask index, or a float "
                      "attention bias)")
    unfused_note = "packed Attention nodes were left as they are; the reasons say why"
    blocked = ""

    def begin(self, model) -> None:
        self._b = Builder(model.graph)

    def end(self) -> None:
        self._b = None

    def match(self, node) -> Match:
        if self.blocked:
            return Match.fail(self.blocked, node)
        p, why = read_packed(node, self._b.mask_kinds)
        return Match(p=p) if p is not None else Match.fail(why)
