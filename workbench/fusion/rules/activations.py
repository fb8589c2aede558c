"""SiLU → ``com.microsoft.QuickGelu`` (workbench rule).

NomicBERT and EuroBERT gate their MLP with SwiGLU: ``silu(x W_gate) * (x W_up)``, and both
exporters write ``silu`` as ``Mul(x, Sigmoid(x))``. ONNX Runtime's ``QuickGelu`` computes
``x * sigmoid(alpha * x)``: with ``alpha = 1`` it is SiLU in one kernel. The gate's multiply
stays a plain ``Mul``: ONNX Runtime has no CPU kernel for a whole gated MLP (GeGLU, SwiGLU).
"""

from __future__ import annotations

import onnx_ir as ir

from .graph_utils import inherit_scope, finish


def fuse_silu(model: ir.Model) -> tuple[int, list[str]]:
    """``Mul(x, Sigmoid(x))`` → ``QuickGelu(x, alpha=1)``; (count, reasons)."""
    graph, count = model.graph, 0
    for sig in [n for n in graph if n.op_type == "Sigmoid"]:
        x = sig.inputs[0]
        users = [u[0] if isinstance(u, tuple) else u.node for u in sig.outputs[0].uses()]
        if len(users) != 1 or users[0].op_type != "Mul" or x not in users[0].inputs:
            continue
        mul = users[0]
        node = ir.node("QuickGelu", [x], attributes={"alpha": 1.0}, domain="com.microsoft",
                       name=f"{mul.name or 'silu'}/QuickGelu")
        inherit_scope([node], mul)
        graph.insert_before(mul, node)
        node.outputs[0].shape, node.outputs[0].type = mul.outputs[0].shape, mul.outputs[0].type
        ir.convenience.replace_all_uses_with(mul.outputs[0], node.outputs[0], replace_graph_outputs=True)
        count += 1
    finish(model, count)
    return count, []
