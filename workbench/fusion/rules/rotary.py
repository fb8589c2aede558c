"""Rotary position embeddings → ``com.microsoft.RotaryEmbedding`` (workbench rule).

ModernBERT, NomicBERT, GTE v1.5 and EuroBERT rotate each head's queries and
keys by the token's position. transformers writes it as ``rotate_half``::

    rot = Concat(Neg(Slice(x, [H/2:])), Slice(x, [:H/2]), axis=-1)
    y   = Add(Mul(x, cos), Mul(rot, sin))          # x: [B, N, S, H], cos/sin: [1|B, 1, S, H]

and both torch exporters keep those seven nodes per projection, plus the
``cos``/``sin`` tables computed from the positions in every forward pass.
onnxscript's own rule finds the arithmetic but not the tables of an encoder
(its cos/sin-cache rule expects a decoder's ``position_ids`` input), and ONNX
Runtime's optimizer has no rule for these exports at all.

This rule evaluates the ``cos`` and ``sin`` sub-graphs once, at
:data:`CACHE_LENGTH` positions, with ONNX Runtime (they depend only on the
sequence length, which the rule checks), keeps half of each row (``rotate_half``
writes every angle twice) as the ``cos_cache`` / ``sin_cache`` initializers,
and writes ``RotaryEmbedding(x, position_ids=[0], cos_cache, sin_cache)``:
position ``s`` reads row ``s``, as in the model. ONNX Runtime's kernel takes
the 4-D ``[B, N, S, H]`` input the exporters produce, so no transpose is added.
"""

from __future__ import annotations

import numpy as np
import onnx

from ..graph_utils import dims, fold_ints, initializer, node_label, only_consumer, readers
from ..lazy import ir
from ..rule import Match, Rewrite, Rule

#: Positions the cos/sin tables cover: the longest ``max_position_embeddings`` of the rotary families.
CACHE_LENGTH = 8192
_INT_MAX = 2**62


def _half_slice(node: ir.Node | None, x: ir.Value, head: int) -> str | None:
    """"lo" or "hi" when ``node`` slices ``x``'s last axis to its first or second half, else None."""
    if node is None or node.op_type != "Slice" or node.inputs[0] is not x or len(node.inputs) < 3:
        return None
    starts, ends = fold_ints(node.inputs[1]), fold_ints(node.inputs[2])
    axes = fold_ints(node.inputs[3]) if len(node.inputs) > 3 and node.inputs[3] is not None else None
    steps = fold_ints(node.inputs[4]) if len(node.inputs) > 4 and node.inputs[4] is not None else None
    if starts is None or ends is None or starts.size != 1 or ends.size != 1:
        return None
    rank = len(x.shape) if x.shape is not None else None
    if axes is None or axes.size != 1 or rank is None or int(axes.reshape(-1)[0]) not in (-1, rank - 1):
        return None
    if steps is not None and int(steps.reshape(-1)[0]) != 1:
        return None
    s, e = int(starts.reshape(-1)[0]), int(ends.reshape(-1)[0])
    if s == 0 and e == head // 2:
        return "lo"
    if s == head // 2 and (e >= head or e >= _INT_MAX // 4):
        return "hi"
    return None


def _other(node: ir.Node, value: ir.Value) -> ir.Value | None:
    a, b = node.inputs[0], node.inputs[1]
    return b if a is value else a if b is value else None


def match_rotary(neg: ir.Node) -> tuple[dict | None, str]:
    """The parts of one ``rotate_half`` rotation around ``neg``, or None and why not (the tables not read yet)."""
    hi = neg.inputs[0].producer() if neg.inputs[0] is not None else None
    if hi is None or hi.op_type != "Slice":
        return None, f"{node_label(neg)} does not negate a Slice"
    x = hi.inputs[0]
    shape = dims(x)
    if shape is None or len(shape) != 4 or not isinstance(shape[-1], int):
        return None, f"the input of {node_label(hi)} is not a 4-D [batch, heads, sequence, head size] tensor"
    head = shape[-1]
    if _half_slice(hi, x, head) != "hi":
        return None, f"{node_label(hi)} does not take the second half of the head"
    cat = only_consumer(neg.outputs[0])
    if cat is None or cat.op_type != "Concat" or len(cat.inputs) != 2 or cat.inputs[0] is not neg.outputs[0]:
        return None, f"the negated half of {node_label(neg)} does not go first into one Concat"
    if cat.attributes.get_int("axis", 0) not in (-1, 3):
        return None, f"{node_label(cat)} does not join on the last axis"
    lo = cat.inputs[1].producer()
    if _half_slice(lo, x, head) != "lo":
        return None, f"the second input of {node_label(cat)} is not the first half of the same head"
    mul_sin = only_consumer(cat.outputs[0])
    if mul_sin is None or mul_sin.op_type != "Mul":
        return None, f"the rotated half from {node_label(cat)} is not multiplied by a sine table"
    sin = _other(mul_sin, cat.outputs[0])
    add = only_consumer(mul_sin.outputs[0])
    if add is None or add.op_type != "Add":
        return None, f"{node_label(mul_sin)} is not added to the cosine term"
    cos_term = _other(add, mul_sin.outputs[0])
    mul_cos = cos_term.producer() if cos_term is not None else None
    if mul_cos is None or mul_cos.op_type != "Mul" or x not in mul_cos.inputs:
        return None, f"{node_label(add)} does not add x * cos to the rotated half"
    cos = _other(mul_cos, x)
    for name, table in (("cos", cos), ("sin", sin)):
        t = dims(table)
        if t is None or len(t) != 4 or t[1] != 1 or t[-1] != head:
            return None, f"the {name} table of {node_label(add)} is not [1|batch, 1, sequence, {head}]"
    return {"x": x, "cos": cos, "sin": sin, "add": add, "head": head}, ""


def _ancestors(graph: ir.Graph, outputs: list[ir.Value], limit: int = 200):
    """The nodes computing ``outputs``, the graph inputs and initializers they read; or a reason."""
    nodes, inputs, inits, seen = set(), {}, {}, set()
    stack = list(outputs)
    while stack:
        v = stack.pop()
        if v is None or id(v) in seen:
            continue
        seen.add(id(v))
        if v.is_graph_input():
            inputs[v.name] = v
            continue
        p = v.producer()
        if p is None:
            if v.const_value is None:
                return None, "reads a value with neither producer nor data"
            inits[v.name] = v
            continue
        if p not in nodes:
            nodes.add(p)
            if len(nodes) > limit:
                return None, f"is computed by more than {limit} nodes"
            if p.op_type == "Shape" and not p.inputs[0].is_graph_input():
                # Only the shape of this tensor matters: it is fed as a placeholder of that shape.
                inputs[p.inputs[0].name] = p.inputs[0]
                continue
            stack.extend(i for i in p.inputs if i is not None)
    for v in inputs.values():
        if any(r in nodes and r.op_type != "Shape" for r in readers(v)):
            return None, f"depends on the values of input {v.name}, not only on the sequence length"
    order = {n: i for i, n in enumerate(graph)}
    return (sorted(nodes, key=order.get), inputs, inits), ""


def evaluate_tables(model: ir.Model, values: list[ir.Value], length: int = CACHE_LENGTH):
    """Run the sub-graph computing ``values`` for one sequence of ``length`` tokens; arrays or a reason."""
    import onnxruntime as ort

    found, why = _ancestors(model.graph, values)
    if found is None:
        return None, why
    nodes, inputs, inits = found
    g = onnx.GraphProto(name="tables")
    g.node.extend(ir.serde.serialize_node(n) for n in nodes)
    for name, v in inits.items():
        t = ir.serde.serialize_tensor(v.const_value)
        t.name = name
        g.initializer.append(t)
    feeds = {}
    for name, v in inputs.items():
        d = dims(v) or [None, None]
        # Batch 1 first; every other symbolic dimension is the sequence (encoders: [batch, sequence, ...]).
        shape = [1] + [x if isinstance(x, int) else length for x in d[1:]]
        np_type = v.dtype.numpy() if v.dtype is not None else np.int64
        feeds[name] = np.ones(shape, dtype=np_type)
        g.input.append(onnx.helper.make_tensor_value_info(name, int(v.dtype), shape))
    for v in values:
        g.output.append(onnx.helper.make_tensor_value_info(v.name, int(v.dtype or 1), None))
    opsets = [onnx.helper.make_opsetid(d, int(ver)) for d, ver in model.opset_imports.items()]
    proto = onnx.helper.make_model(g, opset_imports=opsets, ir_version=min(int(model.ir_version or 10), 10))
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    try:
        sess = ort.InferenceSession(proto.SerializeToString(), so, providers=["CPUExecutionProvider"])
        return sess.run(None, feeds), ""
    except Exception as e:  # an op ORT cannot run on its own: leave the rotation as it is
        return None, f"could not be evaluated on its own ({str(e).strip().splitlines()[0][:120]})"


def _cache_of(table: np.ndarray, head: int, length: int) -> tuple[np.ndarray | None, str]:
    """Rows of the [.., S, H] table as the kernel's [S, H/2] cache (rotate_half writes each angle twice)."""
    t = np.asarray(table, dtype=np.float32).reshape(-1, length, head)
    if not np.allclose(t, t[:1], atol=1e-6):
        return None, "differs between sequences of a batch"
    t = t[0]
    if not np.allclose(t[:, : head // 2], t[:, head // 2:], atol=1e-6):
        return None, "does not repeat each angle in both halves of the head (interleaved rotary?)"
    return np.ascontiguousarray(t[:, : head // 2]), ""


class RotaryRule(Rule):
    """Every ``rotate_half`` rotation → ``RotaryEmbedding`` with cos/sin tables computed once."""

    name = "encoder_rotary"
    title = "RotaryEmbedding with its cos/sin cache (workbench rule)"
    matches = ("the rotary position embedding of ModernBERT, NomicBERT, GTE and EuroBERT as both exporters write "
               "transformers' rotate_half: x * cos + Concat(-x[..., H/2:], x[..., :H/2]) * sin on [B, N, S, H] "
               "queries and keys, with cos and sin computed from the positions in every forward pass")
    rewrites = ("Slice, Slice -> Neg -> Concat -> Mul(sin); Mul(x, cos) -> Add  =>  "
                "com.microsoft.RotaryEmbedding(x, [0], cos_cache, sin_cache)")
    emits = "RotaryEmbedding"
    effect = ("7 nodes per projection become 1 kernel and the cos/sin tables are computed once, at fusion time, "
              "for 8192 positions (onnxscript finds the arithmetic but not an encoder's tables; ONNX Runtime's "
              "optimizer has no rule for these exports)")
    in_bert = False
    after = {"onnxscript": "encoder_skip_norm"}
    anchors = ("Neg",)
    label = "rotary"
    unfused_note = "a rotate_half rotation was found but not fused; the reasons name where it stopped"

    def __init__(self, length: int = CACHE_LENGTH):
        self.length = length

    def begin(self, model) -> None:
        self._model, self._tables, self._position = model, {}, None

    def end(self) -> None:
        self._model = self._tables = None

    def match(self, neg) -> Match:
        parts, why = match_rotary(neg)
        if parts is None:
            return Match.fail(why)
        tables = self._tables_of(parts)
        if isinstance(tables, str):
            return Match.fail(tables)
        return Match(cos_cache=tables[0], sin_cache=tables[1], **parts)

    def _tables_of(self, parts: dict):
        """The cos/sin cache initializers of one rotation (evaluated once per pair of tables), or why not."""
        key = (parts["cos"].name, parts["sin"].name)
        if key not in self._tables:
            graph = self._model.graph
            arrays, why = evaluate_tables(self._model, [parts["cos"], parts["sin"]], self.length)
            if arrays is None:
                self._tables[key] = f"the cos/sin tables of {node_label(parts['add'])} {why}"
            else:
                (cos, cos_why), (sin, sin_why) = (_cache_of(a, parts["head"], self.length) for a in arrays)
                if cos is None or sin is None:
                    self._tables[key] = f"the {'cos' if cos is None else 'sin'} table {cos_why or sin_why}"
                else:
                    self._tables[key] = (initializer(graph, "rotary_cos_cache", cos),
                                         initializer(graph, "rotary_sin_cache", sin))
        return self._tables[key]

    def rewrite(self, m: Match) -> Rewrite:
        if self._position is None:
            self._position = initializer(self._model.graph, "rotary_position_start", np.zeros((1,), dtype=np.int64))
        node = ir.node("RotaryEmbedding", [m.x, self._position, m.cos_cache, m.sin_cache],
                       attributes={"interleaved": 0}, domain="com.microsoft",
                       name=f"{m.add.name or 'rotary'}/RotaryEmbedding")
        node.outputs[0].shape, node.outputs[0].type = m.x.shape, m.x.type
        return Rewrite([node], {m.add.outputs[0]: node.outputs[0]}, scope=m.add)
