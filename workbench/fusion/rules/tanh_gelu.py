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

from ..graph_utils import const, node_label, readers, scalar
from ..lazy import ir
from ..rule import Match, Rewrite, Rule

_C1 = math.sqrt(2.0 / math.pi)
_C2 = 0.044715


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


def _product(tanh: ir.Node, one: ir.Node, x: ir.Value) -> ir.Value | None:
    """The output that computes ``x / 2 * (1 + tanh(.))`` from ``one = 1 + tanh(.)``, either factor order."""
    after = readers(one.outputs[0])
    prod = after[0] if len(after) == 1 and after[0].op_type == "Mul" else None
    if prod is None:
        return None
    other = prod.inputs[1] if prod.inputs[0] is one.outputs[0] else prod.inputs[0]
    if _scaled(other, 0.5) is x:
        return prod.outputs[0]  # Mul(Mul(x, 0.5), 1 + tanh)
    if other is x:
        last = readers(prod.outputs[0])
        if len(last) == 1 and _scaled(last[0].outputs[0], 0.5) is prod.outputs[0]:
            return last[0].outputs[0]  # Mul(Mul(x, 1 + tanh), 0.5)
    return None


class TanhGeluRule(Rule):
    """Every tanh-approximated GELU → ``FastGelu`` (with the projection's bias inside when it can)."""

    name = "tanh_gelu"
    title = "FastGelu from GELU's tanh approximation (workbench rule)"
    matches = ("gelu_new as transformers writes it (ALBERT): 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * "
               "x^3))), in the factor order onnxscript's GELU rules do not match; the projection's bias add goes inside")
    rewrites = ("Pow(x, 3) -> Mul(0.044715) -> Add(x) -> Mul(0.7979) -> Tanh -> Add(1) -> Mul(Mul(x, 0.5))  =>  "
                "com.microsoft.FastGelu(x[, bias])")
    emits = "FastGelu"
    effect = ("about 8 element-wise kernels (and the bias add) become 1 in every feed-forward block; same formula, "
              "so exact to rounding")
    in_bert = False
    after = {"onnxscript": "fast_gelu"}
    anchors = ("Tanh",)
    label = "tanh gelu"
    unfused_note = "a tanh was found but not fused as GELU; the reasons name where reading it stopped"

    def match(self, tanh) -> Match:
        inner = _scaled(tanh.inputs[0], _C1)
        add = inner.producer() if inner is not None else None
        if add is None or add.op_type != "Add":
            return Match.fail("{node}'s input is not sqrt(2/pi) * (x + 0.044715 x^3)", tanh)
        x = next((add.inputs[i] for i in (0, 1) if _cube_term(add.inputs[1 - i], add.inputs[i])), None)
        if x is None:
            return Match.fail("{node} does not add 0.044715 x^3 to x", add)
        after = readers(tanh.outputs[0])
        one = after[0] if len(after) == 1 else None
        if one is None or one.op_type != "Add" or not any(scalar(i) == 1.0 for i in one.inputs):
            return Match.fail("{node} is not followed by 1 + tanh(.)", tanh)
        out = _product(tanh, one, x)
        if out is None:
            prod = readers(one.outputs[0])
            what = node_label(prod[0]) if len(prod) == 1 and prod[0].op_type == "Mul" else None
            return Match.fail(f"{what} does not multiply 1 + tanh(.) by x / 2" if what else
                              "1 + tanh(.) after {node} is not multiplied by x / 2", tanh)
        return Match(x=x, out=out, bias=self._bias(x), tanh=tanh)

    @staticmethod
    def _bias(x: ir.Value) -> tuple | None:
        """(input, bias) when ``x = Add(input, bias)`` is a projection's bias add read only by this GELU."""
        add = x.producer()
        if add is None or add.op_type != "Add" or len(readers(x)) != 3:  # Pow, Add, Mul(0.5)
            return None
        for i in (0, 1):
            b = const(add.inputs[i])
            if b is not None and b.ndim == 1:
                return add.inputs[1 - i], add.inputs[i]  # the bias goes inside the kernel
        return None

    def rewrite(self, m: Match) -> Rewrite:
        node = ir.node("FastGelu", list(m.bias) if m.bias else [m.x], domain="com.microsoft",
                       name=f"{m.tanh.name or 'gelu'}/FastGelu")
        return Rewrite([node], {m.out: node.outputs[0]})
