"""The packed contrib ``Attention`` run as ONNX's standard ``Attention`` (opset 23) instead: an alternative kernel.

Opt-in (``default_on = False``), for a plan to choose the attention kernel by measuring it on its workload::

    Attention(x, W [H_in, 3H], b [3H], mask_index | attention_bias)
      =>  q, k, v = Split(MatMul(x, W) + b)
          Attention(q, k, v, attn_mask)   (ONNX's own op, 3-D inputs, q_num_heads = kv_num_heads = N)

The standard op splits and merges the heads itself (its 3-D form), so no Reshape or Transpose is written
around it. Its mask is bool or additive float, broadcast to ``[B, N, S, L]``: the mask index becomes one bool
``[B, 1, S, L]`` "may attend" mask shared by every layer (ONNX Runtime 1.31's kernel refuses a ``[B, 1, 1, L]``
mask broadcast over the query axis, so the query axis is written out); a float attention bias is passed as it
is, expanded over the query axis where it broadcasts. A masked key gets -inf where the packed kernel adds
``mask_filter_value`` (-10000): in float32 both weigh it 0, so answers agree within rounding; only a query
row with every key masked (a batch entry with no real token) differs.

The op needs the model's default opset raised to 23, so the rule runs only where that changes no other
op's meaning (``opset_raise.raise_blockers``: an op whose definition changed between the model's opset and
23, like ``ReduceMean`` at 18, keeps the whole graph at its opset and is named as the reason).
"""

from __future__ import annotations

from ..lazy import ir
from ..rule import Match, Rewrite
from .opset_raise import raise_blockers
from .packed_attention import PackedAttention, PackedAttentionAlternative, float_bias, keep_mask, project

#: The opset of ONNX's standard Attention.
STANDARD_ATTENTION_OPSET = 23


class AttentionAsStandardRule(PackedAttentionAlternative):
    """Each packed ``Attention`` → its projection + ONNX's standard ``Attention`` (opset 23), opset raised."""

    name = "attention_as_standard"
    title = "Attention run as ONNX's standard Attention, opset 23 (alternative kernel, workbench rule)"
    matches = PackedAttentionAlternative.matches_packed[:-1] + ("), in a model whose other ONNX ops mean the same "
                                                                 "at opset 23")
    rewrites = ("Attention(x, W, b, mask_index | attention_bias)  =>  Split(MatMul(x, W) + b) -> "
                "Attention(q, k, v, attn_mask) [opset 23, q_num_heads = kv_num_heads = N]")
    emits = "Attention"
    effect = ("ONNX Runtime's kernel for ONNX's own attention op (opset 23) for the same answers; the model's opset "
              "is raised to 23; off by default, for a plan to keep where it is faster on the workload")
    absent = ("nothing to run as the standard Attention: no packed com.microsoft.Attention (the attention step "
              "writes it)")
    label = "attention_as_standard"

    def begin(self, model) -> None:
        super().begin(model)
        self._model, self._count = model, 0
        blockers = raise_blockers(model, STANDARD_ATTENTION_OPSET)
        opset = model.opset_imports.get("", model.opset_imports.get("ai.onnx"))
        self.blocked = (f"{{node}} stays: the model's opset {opset} cannot be raised to "
                        f"{STANDARD_ATTENTION_OPSET} for ONNX's standard Attention without changing what other ops "
                        f"compute: {'; '.join(blockers)}") if blockers else ""

    def end(self) -> None:
        if self._count:
            model = self._model
            model.opset_imports.pop("ai.onnx", None)
            model.opset_imports[""] = max(STANDARD_ATTENTION_OPSET, model.opset_imports.get("", 0))
            model.ir_version = max(model.ir_version or 0, 11)  # IR 11 goes with opset 23 (onnx 1.18)
        self._model = self._b = None

    def rewrite(self, m: Match) -> Rewrite:
        p: PackedAttention = m.p
        b = self._b
        q, k, v = project(b, p, add_bias=True)
        mask = keep_mask(b, p) if p.mask is not None else float_bias(b, p) if p.attention_bias is not None else None
        attrs = {"q_num_heads": p.heads, "kv_num_heads": p.heads}
        if p.scale is not None:
            attrs["scale"] = p.scale
        inputs = [q, k, v] + ([mask] if mask is not None else [])
        att = ir.node("Attention", inputs, attributes=attrs, name=f"{p.node.name or 'Attention'}/standard")
        self._count += 1
        return Rewrite([*b.take(), att], {p.node.outputs[0]: att.outputs[0]})
