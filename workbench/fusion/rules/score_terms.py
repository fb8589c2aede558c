"""What an encoder adds to its attention scores before the softmax, read back to the Q·K product.

BERT adds one padding mask. MPNet adds a relative-position bias (computed
once per forward pass, shared by every layer) and then the mask; DeBERTa adds
its content-to-position and position-to-content scores on ``[B*N, S, L]``,
reshapes to ``[B, N, S, L]`` and masks with ``masked_fill`` (a ``Where``).
This module walks from a ``Softmax``'s input down to the ``MatMul`` of Q and
K, collecting each term on the way, and builds the one 4-D bias that
``MultiHeadAttention`` takes (``attention_bias``): the terms summed outside
the kernel, exactly as the model computed them.

Terms:
  * ``("add", value)``: a tensor added to the scores (4-D, or 3-D ``[B*N, S, L]``
    when a Reshape to 4-D follows);
  * ``("where", cond, fill)``: ``Where(cond, fill, scores)`` with a fill at or below
    -1e4 (a masked_fill), which adds ``Where(cond, fill, 0)``.
"""

from __future__ import annotations

import numpy as np

from ..graph_utils import SCALE_OPS, const, dims, initializer, node_label, scalar
from ..lazy import ir

#: A masked_fill constant at or below this is a mask (float32's lowest, -1e9, fp16's -65504 ...).
MASK_FILL = -1e4
#: The bias floor: finite after an fp16 conversion (largest fp16: 65504), far below any real score.
FLOOR = -30000.0


def _depth_to_matmul(value: ir.Value, limit: int = 6) -> int | None:
    """Steps from ``value`` down to a MatMul through adds, scales, reshapes and masks; None if none."""
    for depth in range(limit):
        node = value.producer()
        if node is None:
            return None
        op = node.op_type
        if op == "MatMul":
            return depth
        if op in SCALE_OPS:
            value = node.inputs[1] if scalar(node.inputs[0]) is not None else node.inputs[0]
        elif op == "Add":
            sides = [d for d in (_depth_to_matmul(i, limit - depth - 1) for i in node.inputs) if d is not None]
            return depth + 1 + min(sides) if sides else None
        elif op == "Reshape":
            value = node.inputs[0]
        elif op == "Where" and len(node.inputs) == 3:
            value = node.inputs[2] if scalar(node.inputs[1]) is not None else node.inputs[1]
        else:
            return None
    return None


def _mask_fill(node: ir.Node) -> tuple[ir.Value, ir.Value, int] | None:
    """(cond, fill, index of the scores input) when ``node`` is a masked_fill ``Where``; else None."""
    if node.op_type != "Where" or len(node.inputs) != 3:
        return None
    for fill_at, scores_at in ((1, 2), (2, 1)):
        f = scalar(node.inputs[fill_at])
        if f is not None and f <= MASK_FILL and scalar(node.inputs[scores_at]) is None:
            return node.inputs[0], node.inputs[fill_at], scores_at
    return None


def scores_and_terms(sm: ir.Node) -> tuple[dict | None, str]:
    """From Softmax ``sm`` down to Q·K: {"mm", "scale", "terms", "target4"}; or why not, naming the node."""
    value, terms, factor, target4 = sm.inputs[0], [], 1.0, None
    node = scaled_at = None
    for _ in range(12):
        node = value.producer()
        if node is None:
            return None, f"the input of {node_label(sm)} is a graph input, not a Q·K product"
        op = node.op_type
        if op == "MatMul":
            return {"mm": node, "scale": factor, "terms": terms, "target4": target4}, ""
        if op in SCALE_OPS:
            a, b = node.inputs[0], node.inputs[1]
            f = scalar(b)
            if f is None and op == "Mul":
                f, a = scalar(a), b
            if f is None:
                return None, f"{node_label(node)} scales the scores before {node_label(sm)} by a computed tensor, not a constant"
            scaled_at = scaled_at or node
            factor = factor * f if op == "Mul" else factor / f
            value = a
        elif op in ("Add", "Where") and scaled_at is not None:
            return None, (f"{node_label(scaled_at)} scales the scores and what {node_label(node)} adds to them "
                          f"(not fused: the bias would need the scale too)")
        elif op == "Add":
            depth = [_depth_to_matmul(i) for i in node.inputs]
            if depth[0] is None and depth[1] is None:
                break
            side = 0 if depth[1] is None or (depth[0] is not None and depth[0] <= depth[1]) else 1
            terms.append(("add", node.inputs[1 - side]))
            value = node.inputs[side]
        elif op == "Where":
            fill = _mask_fill(node)
            if fill is None:
                break
            terms.append(("where", fill[0], fill[1]))
            value = node.inputs[fill[2]]
        elif op == "Reshape":
            src, out = dims(node.inputs[0]), dims(node.outputs[0])
            if src is None or out is None or len(src) != 3 or len(out) != 4 or target4 is not None:
                break
            target4 = node.inputs[1]  # DeBERTa: scores on [B*N, S, L] viewed as [B, N, S, L]
            value = node.inputs[0]
        else:
            break
    return None, (f"the scores before {node_label(sm)} stop at {node_label(node)}: not a Q·K product plus added "
                  f"or masked terms")


def heads4(value: ir.Value, head: int | None = None) -> ir.Value | None:
    """The ``[B, N, S, H]`` tensor behind ``value`` (itself when 4-D; back through Reshapes when ``[B*N, S, H]``).

    ``head`` None accepts any 4-D tensor (the TorchScript export leaves the head size symbolic there).
    """
    for _ in range(3):
        d = dims(value)
        if d is not None and len(d) == 4 and (head is None or d[3] == head):
            return value
        node = value.producer()
        if node is None or node.op_type not in ("Reshape", "Identity"):
            return None
        value = node.inputs[0]
    return None


def term_dims_ok(terms: list, target4: ir.Value | None) -> str:
    """"" when every term is a 4-D tensor (or 3-D with a reshape to 4-D) and one covers [., ., S, L]; else why not."""
    full = False
    for t in terms:
        d = dims(t[1])
        if d is None:
            return f"a term added to the scores ({t[1].name}) has no known shape"
        if len(d) == 3 and target4 is not None:
            full = True
            continue
        if len(d) != 4:
            return f"a term added to the scores ({t[1].name}) is {len(d)}-D, not [batch|1, heads|1, sequence, keys]"
        full = full or d[2] != 1
    return "" if full or not terms else "the terms added to the scores are [., ., 1, keys], not a row per query as the kernel needs"


def build_bias(graph: ir.Graph, terms: list, target4: ir.Value | None, cache: dict) -> tuple[ir.Value, list[ir.Node]]:
    """The one 4-D attention bias summing ``terms`` (floored at -30000); new nodes to insert before the kernel.

    Equal term lists (MPNet's shared position bias and mask) give one bias for every layer (``cache``).
    A padded query whose keys are all masked gets -inf everywhere in some exports; the kernel's softmax
    would give NaN, which later layers read through V, so a finite floor keeps the row finite while masked
    keys still get weight 0.
    """
    key = tuple((t[0], *(id(v) for v in t[1:])) for t in terms) + (id(target4),)
    if key in cache:
        return cache[key], []
    new: list[ir.Node] = []
    total = None
    for t in terms:
        if t[0] == "where":
            zero = cache.setdefault("zero", initializer(graph, "mha_bias_zero", np.array(0.0, dtype=np.float32)))
            n = ir.node("Where", [t[1], t[2], zero])
        elif len(dims(t[1]) or ()) == 3:
            n = ir.node("Reshape", [t[1], target4])
        else:
            n = None
        if n is not None:
            new.append(n)
        v = n.outputs[0] if n is not None else t[1]
        if total is not None:
            s = ir.node("Add", [total, v])
            new.append(s)
            v = s.outputs[0]
        total = v
    floor = cache.setdefault("floor", initializer(graph, "mha_bias_floor", np.array(FLOOR, dtype=np.float32)))
    mx = ir.node("Max", [total, floor])
    new.append(mx)
    kind = next((t[1].type for t in terms if t[0] == "add" and t[1].type is not None), None)
    for n in new:  # later passes read the element type
        n.outputs[0].type = kind or ir.TensorType(ir.DataType.FLOAT)
    cache[key] = mx.outputs[0]
    return mx.outputs[0], new


def head_size(q4: ir.Value) -> int | None:
    """The head size of ``[B, N, S, H]`` when H is symbolic: the hidden size split by the Reshape before, over N."""
    d = dims(q4)
    if d is None or len(d) != 4:
        return None
    if isinstance(d[3], int):
        return d[3]
    node = q4.producer()
    if node is None or node.op_type != "Transpose" or tuple(node.attributes.get_ints("perm", ())) != (0, 2, 1, 3):
        return None
    split = node.inputs[0].producer()
    src = dims(split.inputs[0]) if split is not None and split.op_type == "Reshape" else None
    if src is None or not isinstance(src[-1], int) or not isinstance(d[1], int) or src[-1] % d[1]:
        return None
    return src[-1] // d[1]


_UNKNOWN = 1 << 40  # stands for a symbolic dimension; a result this large means one was used


def eval_scalar(value: ir.Value, subs: dict, depth: int = 0) -> float | None:
    """A scale computed at run time from shapes (DeBERTa's TorchScript ``sqrt(q.size(-1) * 3)``), evaluated.

    ``subs`` gives symbolic dimensions their known size (the head size the export left symbolic); None when
    any other dimension is symbolic or an op is not one of the few this evaluator knows.
    """
    if value is None or depth > 12:
        return None
    with np.errstate(all="ignore"):
        out = _eval(value, subs, depth, np, const)
    if out is None or out.size != 1:
        return None
    f = float(out.reshape(-1)[0])
    return f if np.isfinite(f) and abs(f) < _UNKNOWN / 2 else None  # an unknown dimension reached the result


def _eval(value, subs, depth, np, const):
    c = const(value)
    if c is not None:
        return np.asarray(c)
    node = value.producer()
    if node is None or depth > 12:
        return None
    op = node.op_type
    if op == "Shape":
        d = dims(node.inputs[0])
        if d is None:
            return None
        d = [subs.get(x, x) for x in d]
        start, end = node.attributes.get_int("start", 0), node.attributes.get_int("end", len(d))
        return np.array([x if isinstance(x, int) else -_UNKNOWN for x in d[start:end]], dtype=np.int64)
    args = [_eval(i, subs, depth + 1, np, const) if i is not None else None for i in node.inputs]
    if any(a is None for a in args[:1]) or (op not in ("Slice",) and any(a is None for a in args)):
        return None
    if op == "Slice":
        starts, ends = args[1], args[2]
        axes = args[3] if len(args) > 3 and args[3] is not None else np.arange(len(starts))
        out = args[0]
        for s, e, a in zip(starts, ends, axes):
            out = np.take(out, np.arange(out.shape[a])[slice(int(s), int(min(e, 1 << 62)))], axis=int(a))
        return out
    if op in ("Squeeze", "Unsqueeze", "Identity"):
        return args[0].reshape(-1) if op == "Unsqueeze" and args[0].ndim == 0 else (
            np.squeeze(args[0]) if op == "Squeeze" else args[0])
    if op == "Gather":
        return np.take(args[0], args[1], axis=node.attributes.get_int("axis", 0))
    if op == "Cast":
        return args[0].astype(np.float64)
    if op == "Sqrt":
        return np.sqrt(args[0].astype(np.float64))
    if op in ("Mul", "Div", "Add", "Sub"):
        a, b = args[0].astype(np.float64), args[1].astype(np.float64)
        return {"Mul": a * b, "Div": a / b if np.all(b) else None, "Add": a + b, "Sub": a - b}[op]
    return None
