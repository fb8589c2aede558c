"""SiLU → ``com.microsoft.QuickGelu`` (workbench rule).

NomicBERT and EuroBERT gate their MLP with SwiGLU: ``silu(x W_gate) * (x W_up)``, and both
exporters write ``silu`` as ``Mul(x, Sigmoid(x))``. ONNX Runtime's ``QuickGelu`` computes
``x * sigmoid(alpha * x)``: with ``alpha = 1`` it is SiLU in one kernel. The gate's multiply
stays a plain ``Mul``: ONNX Runtime has no CPU kernel for a whole gated MLP (GeGLU, SwiGLU).
"""

from __future__ import annotations

from ..graph_utils import readers
from ..lazy import ir
from ..rule import Match, Rewrite, Rule


class SiluRule(Rule):
    """``Mul(x, Sigmoid(x))`` → ``QuickGelu(x, alpha=1)``."""

    name = "encoder_silu"
    title = "QuickGelu from SiLU (workbench rule)"
    matches = "SiLU written as x * Sigmoid(x), the gate activation of NomicBERT's and EuroBERT's SwiGLU MLP"
    rewrites = "Sigmoid(x) -> Mul(x)  =>  com.microsoft.QuickGelu(x, alpha=1)"
    emits = "QuickGelu"
    effect = ("2 kernels become 1 per layer; the gate's multiply stays a plain Mul (ONNX Runtime has no CPU kernel "
              "for a whole gated MLP)")
    session = ("QuickGeluFusion",)
    in_bert = False
    after = {"onnxscript": "tanh_gelu"}
    anchors = ("Sigmoid",)
    fused_note = ("the gated MLP's multiply stays a plain Mul: ONNX Runtime has no CPU kernel for a whole "
                  "gated MLP (SwiGLU, GeGLU)")

    def match(self, sig) -> Match | None:
        x, users = sig.inputs[0], readers(sig.outputs[0])
        if len(users) != 1 or users[0].op_type != "Mul" or x not in users[0].inputs:
            return None  # a sigmoid that is no SiLU: nothing to say
        return Match(x=x, mul=users[0])

    def rewrite(self, m: Match) -> Rewrite:
        node = ir.node("QuickGelu", [m.x], attributes={"alpha": 1.0}, domain="com.microsoft",
                       name=f"{m.mul.name or 'silu'}/QuickGelu")
        return Rewrite([node], {m.mul.outputs[0]: node.outputs[0]}, scope=m.mul)
