"""The tanh approximation of GELU (``gelu_new``, ALBERT's activation) → ``com.microsoft.FastGelu`` (workbench rule).

transformers' ``NewGELUActivation`` computes::

    0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x**3)))

and both exporters write it as ``Mul(Mul(x, 0.5), Add(Tanh(Mul(Add(x, Mul(Pow(x, 3), 0.044715)), 0.797...)), 1))``,
which onnxscript's GELU rules do not match (they expect another order of the factors). This rule starts
at each ``Tanh``, reads the constants back and the products forward, and writes ``FastGelu(x)``, or
``FastGelu(y, bias)`` when ``x = Add(y, bias)`` is the feed-forward projection's bias add read by nothing else.
FastGelu is the same formula, so the result is exact to float rounding.
"""

from __future__ import annotations

import math

import onnx_ir as ir

from .graph_utils import const, node_label, finish, scalar

_C1 = math.sqrt(2.0 / math.pi)
_C2 = 0.044715


def _readers(value: ir.Value) -> list[ir.Node]:
    return [u[0] if isinstance(u, tuple) else u.node for u in value.uses()]


def _scaled(value: ir.Value, factor: float) -> ir.Value | None:
    """``a`` when ``value = Mul(a, c)`` (either order) with ``c`` ≈ ``factor``; else None."""
    node = value.producer()
    if node is None or node.op_type != "Mul":
        return None
    for i in (0, 1):
        c = scalar(node.inputs[i])
        if c is not None and math.isclose(c, factor, rel_tol=1e-4):
            return node.inputs[1 - i]
    return None


def _cube_term(value: ir.Value, x: ir.Value) -> bool:
    """True when ``value`` is ``0.044715 * x**3`` (Pow(x, 3) or x*x*x)."""
    cube = _scaled(value, _C2)
    node = cube.producer() if cube is not None else None
    if node is None:
        return False
    if node.op_type == "Pow":
        return node.inputs[0] is x and scalar(node.inputs[1]) == 3.0
    return node.op_type == "Mul" and x in node.inputs


def _match(tanh: ir.Node) -> tuple[ir.Value | None, ir.Value | None, str]:
    """(x, the output to replace) of the GELU around ``tanh``; or why not, naming the node."""
    inner = _scaled(tanh.inputs[0], _C1)
    add = inner.producer() if inner is not None else None
    if add is None or add.op_type != "Add":
        return None, None, f"{node_label(tanh)}'s input is not sqrt(2/pi) * (x + 0.044715 x^3)"
    x = next((add.inputs[i] for i in (0, 1) if _cube_term(add.inputs[1 - i], add.inputs[i])), None)
    if x is None:
        return None, None, f"{node_label(add)} does not add 0.044715 x^3 to x"
    readers = _readers(tanh.outputs[0])
    one = readers[0] if len(readers) == 1 else None
    if one is None or one.op_type != "Add" or not any(scalar(i) == 1.0 for i in one.inputs):
        return None, None, f"{node_label(tanh)} is not followed by 1 + tanh(.)"
    readers = _readers(one.outputs[0])
    prod = readers[0] if len(readers) == 1 and readers[0].op_type == "Mul" else None
    if prod is None:
        return None, None, f"1 + tanh(.) after {node_label(tanh)} is not multiplied by x / 2"
    other = prod.inputs[1] if prod.inputs[0] is one.outputs[0] else prod.inputs[0]
    if _scaled(other, 0.5) is x:
        return x, prod.outputs[0], ""  # Mul(Mul(x, 0.5), 1 + tanh)
    if other is x:
        after = _readers(prod.outputs[0])
        if len(after) == 1 and _scaled(after[0].outputs[0], 0.5) is prod.outputs[0]:
            return x, after[0].outputs[0], ""  # Mul(Mul(x, 1 + tanh), 0.5)
    return None, None, f"{node_label(prod)} does not multiply 1 + tanh(.) by x / 2"


def fuse_tanh_gelu(model: ir.Model) -> tuple[int, list[str]]:
    """Replace every tanh-approximated GELU by ``FastGelu``; (count, reasons for those left)."""
    graph = model.graph
    count, reasons = 0, []
    for tanh in [n for n in graph if n.op_type == "Tanh"]:
        x, out, why = _match(tanh)
        if x is None:
            reasons.append(f"tanh gelu: {why}")
            continue
        inputs = [x]
        bias_add = x.producer()
        if bias_add is not None and bias_add.op_type == "Add" and len(_readers(x)) == 3:  # Pow, Add, Mul(0.5)
            for i in (0, 1):
                b = const(bias_add.inputs[i])
                if b is not None and b.ndim == 1:
                    inputs = [bias_add.inputs[1 - i], bias_add.inputs[i]]  # the bias goes inside the kernel
                    break
        node = ir.node("FastGelu", inputs, domain="com.microsoft", name=f"{tanh.name or 'gelu'}/FastGelu")
        graph.insert_before(out.producer(), [node])
        node.outputs[0].shape, node.outputs[0].type = out.shape, out.type
        ir.convenience.replace_all_uses_with(out, node.outputs[0], replace_graph_outputs=True)
        count += 1
    finish(model, count)
    return count, reasons
