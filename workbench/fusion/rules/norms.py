"""Norms the engines leave in the encoders of 2025 (workbench rules).

* :class:`RmsNormRule` (``encoder_rms_norm``): RMSNorm written out (EuroBERT's TorchScript export), ::

      Mul(weight, Mul(x, 1 / Sqrt(ReduceMean(Pow(x, 2), [-1]) + eps)))   (Div(1, .) or Reciprocal; Casts allowed)

  becomes ``SimplifiedLayerNormalization(x, weight, epsilon=eps)``.
* :class:`SkipNormRule` (``encoder_skip_norm``): a residual ``Add`` feeding a ``LayerNormalization`` (with or *without* a bias:
  ModernBERT's norms have none, and both engines' rules insist on one; ONNX Runtime's even crashes)
  or a ``SimplifiedLayerNormalization`` becomes ``SkipLayerNormalization`` /
  ``SkipSimplifiedLayerNormalization``; the sum, when the next residual reads it, is the kernel's
  fourth output.
"""

from __future__ import annotations

import numpy as np

from ..graph_utils import const, dims, node_label, readers, scalar
from ..lazy import ir
from ..rule import Match, Rewrite, Rule

_PASS = ("Cast",)


def _through(value: ir.Value) -> ir.Value:
    """Skip Casts back to the real producer."""
    for _ in range(3):
        p = value.producer()
        if p is None or p.op_type not in _PASS:
            break
        value = p.inputs[0]
    return value


def _producer(value: ir.Value | None, op: str) -> ir.Node | None:
    if value is None:
        return None
    p = _through(value).producer()
    return p if p is not None and p.op_type == op else None


def _rms_parts(mul_w: ir.Node) -> tuple[dict | None, str]:
    """x, weight and epsilon of one written-out RMSNorm ending in ``mul_w``; or why not."""
    for i in (0, 1):
        w = const(mul_w.inputs[i])
        if w is None or w.ndim != 1:
            continue
        inner = _producer(mul_w.inputs[1 - i], "Mul")
        if inner is None:
            continue
        for j in (0, 1):
            x, inv = inner.inputs[j], inner.inputs[1 - j]
            rec = _through(inv).producer()
            if rec is None:
                continue
            if rec.op_type == "Reciprocal":
                sq = _producer(rec.inputs[0], "Sqrt")
            elif rec.op_type == "Div" and scalar(rec.inputs[0]) == 1.0:
                sq = _producer(rec.inputs[1], "Sqrt")
            else:
                continue
            add = _producer(sq.inputs[0], "Add") if sq is not None else None
            if add is None:
                continue
            eps = scalar(add.inputs[1]) if scalar(add.inputs[1]) is not None else scalar(add.inputs[0])
            mean = _producer(add.inputs[0], "ReduceMean") or _producer(add.inputs[1], "ReduceMean")
            pw = _producer(mean.inputs[0], "Pow") if mean is not None else None
            if pw is None or eps is None or scalar(pw.inputs[1]) != 2.0:
                continue
            if _through(pw.inputs[0]) is not _through(x):
                continue
            axes = const(mean.inputs[1]) if len(mean.inputs) > 1 and mean.inputs[1] is not None else None
            axes = axes if axes is not None else np.array(mean.attributes.get_ints("axes", []) or [])
            xd = dims(x)
            if axes.size != 1 or xd is None or int(axes[0]) not in (-1, len(xd) - 1):
                return None, f"{node_label(mean)} is not over the last axis"
            return {"x": x, "weight": mul_w.inputs[i], "eps": float(eps)}, ""
    return None, f"{node_label(mul_w)} does not scale a written-out RMS norm"


class RmsNormRule(Rule):
    """Written-out RMSNorms → ``SimplifiedLayerNormalization``."""

    name = "encoder_rms_norm"
    title = "SimplifiedLayerNormalization from a written-out RMS norm (workbench rule)"
    matches = ("RMSNorm as EuroBERT's TorchScript export writes it: x * 1/Sqrt(ReduceMean(x^2) + eps) * weight, with "
               "Div(1, .) or Reciprocal and Casts between")
    rewrites = ("Pow -> ReduceMean -> Add(eps) -> Sqrt -> Div(1, .) -> Mul(x) -> Mul(weight)  =>  "
                "SimplifiedLayerNormalization")
    emits = "SimplifiedLayerNormalization"
    effect = "7 element-wise kernels become 1 (onnxscript's RMS rule does not match this form)"
    session = ("SimplifiedLayerNormFusion",)
    in_bert = False
    after = {"onnxscript": "simplified_layer_norm"}
    anchors = ("Sqrt",)
    label = "rms norm"
    contrib = False
    unfused_note = "an RMS norm was found but not fused; the reasons name where it stopped"

    def match(self, sq) -> Match | None:
        # Walk forward from the Sqrt to the weight Mul: Sqrt -> Div/Reciprocal -> Mul(x) -> (Cast) -> Mul(w).
        node = sq
        for _ in range(5):
            users = readers(node.outputs[0])
            if len(users) != 1:
                return None
            node = users[0]
            if node.op_type == "Mul" and (const(node.inputs[0]) is not None or const(node.inputs[1]) is not None):
                break
        if node.op_type != "Mul":
            return None
        parts, why = _rms_parts(node)
        if parts is None:
            return Match.fail(why)
        out, x = node.outputs[0], parts["x"]
        if out.dtype is not None and x.dtype is not None and out.dtype != x.dtype:
            return Match.fail("{node} scales a mixed-precision norm (its input and output types differ): left as written",
                              node)
        return Match(mul=node, **parts)

    def rewrite(self, m: Match) -> Rewrite:
        new = ir.node("SimplifiedLayerNormalization", [m.x, m.weight], attributes={"epsilon": m.eps, "axis": -1},
                      name=f"{m.mul.name or 'rms'}/SimplifiedLayerNorm")
        new.outputs[0].shape, new.outputs[0].type = m.mul.outputs[0].shape, m.x.type
        return Rewrite([new], {m.mul.outputs[0]: new.outputs[0]}, scope=m.mul)


def _from_lookup(value: ir.Value, depth: int = 0) -> bool:
    """True for an embedding lookup (Gather) or a sum of lookups."""
    p = value.producer()
    if p is None or depth > 2:
        return False
    if p.op_type == "Gather":
        return True
    return p.op_type == "Add" and any(i is not None and _from_lookup(i, depth + 1) for i in p.inputs)


def _is_activation(value: ir.Value) -> bool:
    d = dims(value)
    return const(value) is None and (d is None or len(d) == 3)


class SkipNormRule(Rule):
    """Residual Add → (Simplified)LayerNormalization → the Skip kernels, bias or not."""

    name = "encoder_skip_norm"
    title = "Skip(Simplified)LayerNormalization without a bias (workbench rule)"
    matches = ("a residual Add of two activations feeding a LayerNormalization without a bias (ModernBERT) or an RMS "
               "norm (EuroBERT): both engines' rules insist on a bias, and ONNX Runtime's crashes on its absence")
    rewrites = ("Add(x, skip) -> LayerNormalization(gamma) | SimplifiedLayerNormalization  =>  "
                "SkipLayerNormalization(x, skip, gamma) | SkipSimplifiedLayerNormalization")
    emits = "SkipLayerNormalization"
    effect = "the residual add is done inside the norm kernel; the sum the next residual reads is its fourth output"
    session = ("SkipLayerNormFusion",)
    in_bert = False
    after = {"onnxscript": "skip_simplified_layer_norm"}
    anchors = ("LayerNormalization", "SimplifiedLayerNormalization")
    label = "skip norm"
    unfused_note = "a residual norm was found but not fused; the reasons name where it stopped"

    def match(self, ln) -> Match | None:
        add = ln.inputs[0].producer()
        if add is None or add.op_type != "Add" or len(ln.outputs) > 1 and any(o.uses() for o in ln.outputs[1:]):
            return None
        a, b = add.inputs
        if any(_from_lookup(v) for v in (a, b)):
            return None  # the embeddings' sum (word + position + type lookups), not a residual
        if not (_is_activation(a) and _is_activation(b)):
            return Match.fail(f"{node_label(add)} before {node_label(ln)} does not add two activations")
        if ln.attributes.get_int("axis", -1) not in (-1, 2):
            return Match.fail("{node} is not over the last axis", ln)
        simplified = ln.op_type == "SimplifiedLayerNormalization"
        beta = ln.inputs[2] if not simplified and len(ln.inputs) > 2 else None
        zeros = const(beta) if beta is not None else None
        # The TorchScript exporter writes an absent bias as a zeros constant; a model's own bias parameter
        # (named ...bias, all zeros in a freshly initialised BERT) is a real one, for the engines' own rules.
        if beta is not None and (zeros is None or np.any(zeros) or "bias" in (beta.name or "").lower()):
            return None
        return Match(ln=ln, add=add, simplified=simplified, beta=beta)

    def rewrite(self, m: Match) -> Rewrite:
        op = "SkipSimplifiedLayerNormalization" if m.simplified else "SkipLayerNormalization"
        a, b = m.add.inputs
        inputs = [a, b, m.ln.inputs[1]] + ([] if m.simplified else [m.beta])
        new = ir.node(op, inputs, attributes={"epsilon": m.ln.attributes.get_float("epsilon", 1e-5)},
                      domain="com.microsoft", num_outputs=4, name=f"{m.ln.name or 'norm'}/{op}")
        return Rewrite([new], {m.ln.outputs[0]: new.outputs[0], m.add.outputs[0]: new.outputs[3]})
