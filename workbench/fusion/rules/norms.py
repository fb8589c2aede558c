"""Norms the engines leave in the encoders of 2025 (workbench rules).

* ``fuse_rms_norm``: RMSNorm written out (EuroBERT's TorchScript export), ::

      Mul(weight, Mul(x, 1 / Sqrt(ReduceMean(Pow(x, 2), [-1]) + eps)))   (Div(1, .) or Reciprocal; Casts allowed)

  becomes ``SimplifiedLayerNormalization(x, weight, epsilon=eps)``.
* ``fuse_skip_norms``: a residual ``Add`` feeding a ``LayerNormalization`` (with or *without* a bias:
  ModernBERT's norms have none, and both engines' rules insist on one; ONNX Runtime's even crashes)
  or a ``SimplifiedLayerNormalization`` becomes ``SkipLayerNormalization`` /
  ``SkipSimplifiedLayerNormalization``; the sum, when the next residual reads it, is the kernel's
  fourth output.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from .graph_utils import const, dims, inherit_scope, node_label, finish, scalar

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


def fuse_rms_norm(model: ir.Model) -> tuple[int, list[str]]:
    """Written-out RMSNorms → ``SimplifiedLayerNormalization``; (count, reasons)."""
    graph, count, reasons = model.graph, 0, []
    for sq in [n for n in graph if n.op_type == "Sqrt"]:
        # Walk forward from the Sqrt to the weight Mul: Sqrt -> Div/Reciprocal -> Mul(x) -> (Cast) -> Mul(w).
        node = sq
        for _ in range(5):
            users = [u[0] if isinstance(u, tuple) else u.node for u in node.outputs[0].uses()]
            if len(users) != 1:
                node = None
                break
            node = users[0]
            if node.op_type == "Mul" and const(node.inputs[0]) is not None or (
                    node.op_type == "Mul" and const(node.inputs[1]) is not None):
                break
        if node is None or node.op_type != "Mul":
            continue
        parts, why = _rms_parts(node)
        if parts is None:
            reasons.append(f"rms norm: {why}")
            continue
        out = node.outputs[0]
        new = ir.node("SimplifiedLayerNormalization", [parts["x"], parts["weight"]],
                      attributes={"epsilon": parts["eps"], "axis": -1}, name=f"{node.name or 'rms'}/SimplifiedLayerNorm")
        inherit_scope([new], node)
        graph.insert_before(node, new)
        new.outputs[0].shape, new.outputs[0].type = out.shape, parts["x"].type
        if out.dtype is not None and parts["x"].dtype is not None and out.dtype != parts["x"].dtype:
            continue  # a mixed-precision norm: leave it as written
        ir.convenience.replace_all_uses_with(out, new.outputs[0], replace_graph_outputs=True)
        count += 1
    finish(model, count, contrib=False)
    return count, reasons


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


def fuse_skip_norms(model: ir.Model) -> tuple[int, list[str]]:
    """Residual Add → (Simplified)LayerNormalization → the Skip kernels, bias or not; (count, reasons)."""
    graph, count, reasons = model.graph, 0, []
    for ln in [n for n in graph if n.op_type in ("LayerNormalization", "SimplifiedLayerNormalization")]:
        add = ln.inputs[0].producer()
        if add is None or add.op_type != "Add" or len(ln.outputs) > 1 and any(o.uses() for o in ln.outputs[1:]):
            continue
        a, b = add.inputs
        if any(_from_lookup(v) for v in (a, b)):
            continue  # the embeddings' sum (word + position + type lookups), not a residual
        if not (_is_activation(a) and _is_activation(b)):
            reasons.append(f"skip norm: {node_label(add)} before {node_label(ln)} does not add two activations")
            continue
        if ln.attributes.get_int("axis", -1) not in (-1, 2):
            reasons.append(f"skip norm: {node_label(ln)} is not over the last axis")
            continue
        eps = ln.attributes.get_float("epsilon", 1e-5)
        simplified = ln.op_type == "SimplifiedLayerNormalization"
        beta_value = ln.inputs[2] if not simplified and len(ln.inputs) > 2 else None
        zeros = const(beta_value) if beta_value is not None else None
        # The TorchScript exporter writes an absent bias as a zeros constant; a model's own bias parameter
        # (named ...bias, all zeros in a freshly initialised BERT) is a real one, for the engines' own rules.
        if beta_value is not None and (zeros is None or np.any(zeros) or "bias" in (beta_value.name or "").lower()):
            continue
        op = "SkipSimplifiedLayerNormalization" if simplified else "SkipLayerNormalization"
        gamma = ln.inputs[1]
        beta = ln.inputs[2] if not simplified and len(ln.inputs) > 2 else None
        inputs = [a, b, gamma] + ([] if simplified else [beta])
        new = ir.node(op, inputs, attributes={"epsilon": eps}, domain="com.microsoft", num_outputs=4,
                      name=f"{ln.name or 'norm'}/{op}")
        inherit_scope([new], ln)
        graph.insert_before(ln, new)
        new.outputs[0].shape, new.outputs[0].type = ln.outputs[0].shape, ln.outputs[0].type
        new.outputs[3].shape, new.outputs[3].type = add.outputs[0].shape, add.outputs[0].type
        ir.convenience.replace_all_uses_with(ln.outputs[0], new.outputs[0], replace_graph_outputs=True)
        ir.convenience.replace_all_uses_with(add.outputs[0], new.outputs[3], replace_graph_outputs=True)
        count += 1
    finish(model, count)
    return count, reasons
