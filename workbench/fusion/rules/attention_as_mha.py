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
from ..rule import Match, Rewrite
from .packed_attention import PackedAttention, PackedAttentionAlternative, project


class AttentionAsMhaRule(PackedAttentionAlternative):
    """Each packed ``Attention`` → its projection + ``MultiHeadAttention`` (separate Q, K, V)."""

    name = "attention_as_mha"
    title = "Attention run as MultiHeadAttention (alternative kernel, workbench rule)"
    matches = PackedAttentionAlternative.matches_packed
    rewrites = ("Attention(x, W, b, mask_index | attention_bias)  =>  Split(MatMul(x, W)) -> "
                "MultiHeadAttention(q, k, v, b, key_padding_mask | attention_bias)")
    emits = "MultiHeadAttention"
    effect = ("another of ONNX Runtime's attention kernels for the same answers: separate Q, K and V, the bias "
              "added inside; off by default, for a plan to keep where it is faster on the workload")
    absent = "nothing to run as MultiHeadAttention: no packed com.microsoft.Attention (the attention step writes it)"
    label = "attention_as_mha"

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
