"""The packed contrib ``Attention`` run as ``com.microsoft.MultiHeadAttention`` instead: an alternative kernel.

Opt-in (``default_on = False``), for a plan to choose the attention kernel by measuring it on its workload::

    Attention(x, W [H_in, 3H], b [3H], mask_index | attention_bias)
      =>  q, k, v = Split(MatMul(x, W));  MultiHeadAttention(q, k, v, b, key_padding_mask=mask_index,
                                                               attention_bias=attention_bias)

MultiHeadAttention takes the packed ``[3H]`` bias as it is (Q, K then V) and ONNX Runtime's CPU kernel reads
the same mask forms through the same code (``PrepareMask``: ``[B]`` key end positions, a ``[B, L]`` padding
mask, a ``[B, S, L]`` mask; ``mask_filter_value`` kept), so the answers are the packed kernel's. Its CPU kernel
has a flash-attention path, taken only without a mask or bias (``multihead_attention.cc``): an encoder's
padding mask keeps it on the same softmax path as ``Attention``; what differs is the projection (one MatMul and
a Split in the graph, the bias added while transposing to heads inside the kernel).
"""

from __future__ import annotations

from ..lazy import ir
from ..rule import Match, Rewrite, Rule
from .packed_attention import Builder, PackedAttention, project, read_packed


class AttentionAsMhaRule(Rule):
    """Each packed ``Attention`` → its projection + ``MultiHeadAttention`` (separate Q, K, V)."""

    name = "attention_as_mha"
    title = "Attention run as MultiHeadAttention (alternative kernel, workbench rule)"
    matches = ("each packed com.microsoft.Attention the attention step wrote (no KV cache, bidirectional, equal Q, K "
               "and V sizes; a [B] end-position, [B, L] or [B, S, L] mask index, or a float attention bias)")
    rewrites = ("Attention(x, W, b, mask_index | attention_bias)  =>  Split(MatMul(x, W)) -> "
                "MultiHeadAttention(q, k, v, b, key_padding_mask | attention_bias)")
    emits = "MultiHeadAttention"
    prerequisites = ("attention",)
    effect = ("another of ONNX Runtime's attention kernels for the same answers: separate Q, K and V, the bias "
              "added inside; off by default, for a plan to keep where it is faster on the workload")
    default_on = False
    alternative_to = "attention"
    # Last in the ort chain: ORT's embed_layer_norm and postprocess steps rewire Attention's mask input by op type.
    after = {"ort": "bias_skip_layer_norm", "onnxscript": "attention"}
    anchors = ("Attention",)
    anchor_domain = "com.microsoft"
    absent = "nothing to run as MultiHeadAttention: no packed com.microsoft.Attention (the attention step writes it)"
    label = "attention_as_mha"
    unfused_note = "packed Attention nodes were left as they are; the reasons say why"

    def begin(self, model) -> None:
        self._b = Builder(model.graph)

    def end(self) -> None:
        self._b = None

    def match(self, node) -> Match:
        p, why = read_packed(node, self._b.mask_kinds)
        return Match(p=p) if p is not None else Match.fail(why)

    def rewrite(self, m: Match) -> Rewrite:
        p: PackedAttention = m.p
        b = self._b
        q, k, v = project(b, p, add_bias=False)
        attrs = {"num_heads": p.heads}
        if p.scale is not None:
            attrs["scale"] = p.scale
        if p.mask_filter_value is not None:
            attrs["mask_filter_value"] = p.mask_filter_value
        inputs = [q, k, v, p.bias, p.mask, p.attention_bias]
        while inputs[-1] is None:
            inputs.pop()
        mha = ir.node("MultiHeadAttention", inputs, attributes=attrs,
                      domain="com.microsoft", name=f"{p.node.name or 'Attention'}/MultiHeadAttention")
        return Rewrite([*b.take(), mha], {p.node.outputs[0]: mha.outputs[0]})
