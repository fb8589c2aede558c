"""Small helpers every rule shares: constants, shapes, the readers of a value, names, the clean-up after a pass.

Most of the workbench's rules walk an ``onnx_ir`` graph directly instead of
using onnxscript's pattern language: the encoders of 2025 write the same
computation in several shapes (one exporter folds a reshape the other keeps, a
head split is a 5-D view in one family and two Reshapes in another), and a
walk that reads the tensors' symbolic shapes follows all of them with one
piece of code. Every refusal is a sentence naming the node
(:func:`node_label`), as "why not fused" shows it.

``onnx_ir`` is imported on first use (``lazy.ir``), so the rules' catalog rows
and chain places are read without it.
"""

from __future__ import annotations

import numpy as np

from .lazy import LazyModule, ir
from ..graph.summary import LAYER_RE

ir_utils = LazyModule("onnxscript.rewriter._ir_utils")  # onnxscript's own helpers (get_numpy_value)

#: Ops that scale attention scores by a constant.
SCALE_OPS = ("Mul", "Div")


def const(value: ir.Value | None) -> np.ndarray | None:
    """The value as a numpy array when it is a constant (initializer or Constant node), else None."""
    for _ in range(4):  # the TorchScript exporter shares equal weights through Identity nodes
        if value is None or value.is_graph_input():
            return None
        node = value.producer()
        if node is None or node.op_type != "Identity":
            break
        value = node.inputs[0]
    try:
        return ir_utils.get_numpy_value(value)
    except Exception:  # an external tensor that cannot be read: not a constant we can use
        return None


def scalar(value: ir.Value | None) -> float | None:
    """A single-element constant as a float, else None."""
    c = const(value)
    if c is None or c.size != 1:
        return None
    return float(c.reshape(-1)[0])


def dims(value: ir.Value | None) -> list | None:
    """The value's shape as a list of ints and symbol names (None for unknown dims), or None."""
    if value is None or value.shape is None:
        return None
    out = []
    for d in value.shape:
        if isinstance(d, int):
            out.append(d)
        else:
            name = getattr(d, "value", None)
            out.append(str(name) if name is not None else None)
    return out


def same_dim(a, b) -> bool:
    """True when two shape entries are known and equal (ints or symbols)."""
    return a is not None and b is not None and a == b


def readers(value: ir.Value) -> list[ir.Node]:
    """The nodes that read ``value`` (one entry per use)."""
    return [u[0] if isinstance(u, tuple) else u.node for u in value.uses()]


def only_consumer(value: ir.Value) -> ir.Node | None:
    """The one node that reads ``value``, or None when it has several readers or is a graph output."""
    users = readers(value)
    if len(users) != 1 or value.is_graph_output():
        return None
    return users[0]


def unique_name(graph: ir.Graph | None, name: str) -> str:
    """``name``, or ``name_1``, ``name_2``, ... when ``graph`` has an initializer of that name already."""
    if graph is None or name not in graph.initializers:
        return name
    k = 1
    while f"{name}_{k}" in graph.initializers:
        k += 1
    return f"{name}_{k}"


def initializer(graph: ir.Graph, name: str, array: np.ndarray) -> ir.Value:
    """Register ``array`` as a new initializer named after ``name`` (made unique) and return its value."""
    name = unique_name(graph, name)
    tensor = ir.tensor(array, name=name)
    value = ir.Value(name=name, shape=ir.Shape(array.shape), type=ir.TensorType(tensor.dtype), const_value=tensor)
    graph.register_initializer(value)
    return value


def node_label(node: ir.Node) -> str:
    """``Op name`` and, when the name or export scope says it, ``(layer N)``."""

    layer = None
    for text in (node.name or "", *node.metadata_props.values()):
        m = LAYER_RE.search(text)
        if m:
            layer = int(m.group(1))
            break
    where = f" (layer {layer})" if layer is not None else ""
    return f"{node.op_type} {node.name or '(unnamed)'}{where}"


def remove_unused(model: ir.Model) -> None:
    import onnx_ir.passes.common as common_passes

    common_passes.RemoveUnusedNodesPass()(model)


def finish(model: ir.Model, count: int, *, contrib: bool = True) -> None:
    """After ``count`` rewrites: drop the nodes nothing reads any more and declare ``com.microsoft`` if used."""
    if not count:
        return
    remove_unused(model)
    if contrib and "com.microsoft" not in model.opset_imports:
        model.opset_imports["com.microsoft"] = 1


def fold_ints(value: ir.Value | None, depth: int = 0) -> np.ndarray | None:
    """Integer shape arithmetic the exporter left unfolded (``Div(Gather(Shape(x), -1), 2)``), evaluated.

    Reads static dimensions through ``Shape``; None when any entry needed is symbolic or the
    computation uses an op this small evaluator does not know.
    """
    if value is None or depth > 12:
        return None
    c = const(value)
    if c is not None:
        return c if c.dtype.kind in "iu" else None
    node = value.producer()
    if node is None:
        return None
    op, ins = node.op_type, node.inputs
    if op == "Shape":
        shape = dims(ins[0])
        if shape is None:
            return None
        start = node.attributes.get_int("start", 0)
        end = node.attributes.get_int("end", len(shape))
        part = shape[start:end]
        return np.array([d if isinstance(d, int) else -(1 << 40) for d in part], dtype=np.int64)
    args = [fold_ints(i, depth + 1) for i in ins if i is not None]
    if any(a is None for a in args):
        return None
    if op in ("Cast", "Identity"):
        out = args[0]
    elif op == "Gather":
        out = np.take(args[0], args[1], axis=node.attributes.get_int("axis", 0))
    elif op == "Unsqueeze":
        out = args[0].reshape(-1) if args[0].ndim == 0 else np.expand_dims(args[0], tuple(int(a) for a in args[1]))
    elif op == "Squeeze":
        out = np.squeeze(args[0])
    elif op == "Concat":
        out = np.concatenate([a.reshape(-1) for a in args])
    elif op in ("Div", "Mul", "Add", "Sub"):
        fn = {"Div": np.floor_divide, "Mul": np.multiply, "Add": np.add, "Sub": np.subtract}[op]
        out = fn(args[0], args[1])
    else:
        return None
    if np.any(np.abs(out) >= (1 << 39)):  # a symbolic dimension reached the result
        return None
    return np.asarray(out, dtype=np.int64)


def inherit_scope(nodes, anchor: ir.Node) -> None:
    """Give new nodes the anchor's export metadata (the dynamo exporter's module scopes name the layer)."""
    for n in nodes:
        for k, v in anchor.metadata_props.items():
            n.metadata_props.setdefault(k, v)
