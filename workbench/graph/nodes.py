"""The node table of an ONNX graph: names, ops, inputs, outputs, shapes, attributes, encoder layer of each node.

Pure data: :func:`node_table` reads a ``ModelProto`` once; :mod:`workbench.graph.layout` places it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable, Mapping

import onnx
from onnx import TensorProto, helper, numpy_helper

#: Group name of the embedding block.
EMBEDDINGS = "embeddings"
_LAYER_RE = re.compile(r"(?:^|[/._])(?:layer|layers|h|block|blocks)[._/](\d+)(?:[/._]|$)")
_EMB_RE = re.compile(r"(?:^|[/._])embeddings?(?:[/._]|$)")
_MAX_ATTR_CHARS = 60


@dataclass(frozen=True)
class NodeInfo:
    """One ONNX node, as the views need it."""

    id: str  # unique within the graph (the node name, or op#index when unnamed)
    name: str
    op_type: str
    domain: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: tuple[tuple[str, str], ...] = ()
    group: str | None = None  # "embeddings", "layer 0", ... or None
    #: The module path the exporter recorded for the node (``("inner", "rotary_emb")``), without the op's own name.
    scope: tuple[str, ...] = ()

    @property
    def fused(self) -> bool:
        """A contrib op (``com.microsoft``): what a fusion emits."""
        return self.domain == "com.microsoft"

    @property
    def layer(self) -> int | None:
        if self.group and self.group.startswith("layer "):
            return int(self.group[6:])
        return None


@dataclass
class NodeTable:
    """Every node of one graph, plus the tensors that connect them."""

    nodes: list[NodeInfo]
    graph_inputs: tuple[str, ...]
    graph_outputs: tuple[str, ...]
    shapes: dict[str, str] = field(default_factory=dict)  # tensor -> "float[batch,sequence,768]"
    initializers: frozenset[str] = frozenset()
    hidden: int = 0  # nodes left out of this table for readability (see without_constants)
    #: Single-number constants (initializers and Constant nodes) by tensor name: what a group's name may quote.
    scalars: dict[str, float] = field(default_factory=dict)

    def __post_init__(self):
        self.by_id = {n.id: n for n in self.nodes}
        self.by_name = {n.name: n for n in self.nodes if n.name}
        self.producer: dict[str, str] = {}
        for n in self.nodes:
            for o in n.outputs:
                if o:
                    self.producer[o] = n.id

    @property
    def groups(self) -> list[str]:
        """Group names in graph order: embeddings, layer 0, layer 1, ..."""
        seen: dict[str, None] = {}
        for n in self.nodes:
            if n.group:
                seen.setdefault(n.group)
        return sorted(seen, key=layer_order)

    @property
    def layers(self) -> list[int]:
        return sorted({n.layer for n in self.nodes if n.layer is not None})

    def members(self, group: str) -> list[str]:
        return [n.id for n in self.nodes if n.group == group]

    def resolve(self, names: Iterable[str]) -> set[str]:
        """Node ids for node names (or ids) from a diff or a profile."""
        out = set()
        for name in names:
            if name in self.by_id:
                out.add(name)
            elif name in self.by_name:
                out.add(self.by_name[name].id)
        return out

    def hover(self, node_id: str) -> str:
        """HTML hover text: op type, name, inputs and outputs with shapes, attributes."""
        n = self.by_id[node_id]
        dom = f" <i>({n.domain})</i>" if n.domain and n.domain != "ai.onnx" else ""
        lines = [f"<b>{n.op_type}</b>{dom}", html_escape(n.name or n.id)]
        if n.group:
            lines.append(f"group: {n.group}")
        for label, tensors in (("in", n.inputs), ("out", n.outputs)):
            for t in tensors[:6]:
                if not t:
                    continue
                kind = " (weight)" if t in self.initializers else ""
                lines.append(f"{label}: {html_escape(shorten(t, 48))} {self.shapes.get(t, '')}{kind}")
            if len(tensors) > 6:
                lines.append(f"{label}: ... {len(tensors) - 6} more")
        for k, v in n.attrs[:6]:
            lines.append(f"{html_escape(k)} = {html_escape(v)}")
        return "<br>".join(lines)


def html_escape(s: str) -> str:
    """``s`` safe inside a hover's HTML (``&``, ``<``, ``>`` escaped)."""
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def shorten(s: str, n: int) -> str:
    """``s`` cut to its last ``n`` characters behind an ellipsis when longer."""
    return s if len(s) <= n else "…" + s[-(n - 1):]


def layer_order(g: str) -> tuple[int, int]:
    """Order of a node group: embeddings, then layers by number, then the rest."""
    if g == EMBEDDINGS:
        return (0, 0)
    if g.startswith("layer "):
        return (1, int(g[6:]))
    return (2, 0)


def group_of_name(*names: str) -> str | None:
    """The encoder group a node or tensor name points at, from its scope path."""
    for s in names:
        if not s:
            continue
        m = _LAYER_RE.search(s)
        if m:
            return f"layer {int(m.group(1))}"
        if _EMB_RE.search(s):
            return EMBEDDINGS
    return None


def _scopes(node) -> list[str]:
    """The module scopes the dynamo exporter wrote on ``node`` (outermost first; the last is the op's own)."""
    for p in getattr(node, "metadata_props", ()):
        if p.key == "pkg.torch.onnx.name_scopes":
            return re.findall(r"'([^']*)'", p.value)
    return []


def _module_path(node) -> tuple[str, ...]:
    """Where in the PyTorch module tree ``node`` was made: dynamo's deepest module scope, else the TorchScript
    name's path (``/inner/rotary_emb/Cos`` → ``("inner", "rotary_emb")``); () when neither says."""
    scopes = _scopes(node)
    if scopes:
        modules = [s for s in scopes[:-1] if s]
        return tuple(modules[-1].split(".")) if modules else ()
    parts = [p for p in (node.name or "").split("/") if p]
    return tuple(parts[:-1]) if len(parts) > 1 and (node.name or "").startswith("/") else ()


def _scalars(g) -> dict[str, float]:
    """Tensor name → value of every one-element numeric initializer or Constant output (weights skipped)."""
    out: dict[str, float] = {}
    tensors = [(t.name, t) for t in g.initializer if not t.dims or all(d == 1 for d in t.dims)]
    tensors += [(n.output[0], a.t) for n in g.node if n.op_type == "Constant" and n.output
                for a in n.attribute if a.name == "value" and (not a.t.dims or all(d == 1 for d in a.t.dims))]
    for name, t in tensors:
        try:
            v = numpy_helper.to_array(t)
            if v.size == 1 and v.dtype.kind in "iuf":
                out[name] = float(v.reshape(-1)[0])
        except Exception:  # an external or stub tensor: not a value to quote
            continue
    return out


def _scope_group(node) -> str | None:
    """The encoder group of the module scopes the dynamo exporter wrote on ``node``, if any.

    The dynamo exporter names nodes after ops (``node_MatMul_52``); the module
    path (``['', 'inner', 'inner.encoder', 'inner.encoder.layer.0', ..., 'linear']``)
    is in the node's metadata. The innermost scope that names a group wins.
    """
    for scope in reversed(_scopes(node)):
        grp = group_of_name(scope.replace(".", "/"))
        if grp:
            return grp
    return None


def _attr_text(a) -> str:
    try:
        v = helper.get_attribute_value(a)
    except Exception:  # an attribute kind onnx cannot read: still show its name
        return "?"
    if hasattr(v, "dims"):  # a TensorProto
        return f"tensor{list(v.dims)}"
    if isinstance(v, bytes):
        v = v.decode("utf-8", "replace")
    if isinstance(v, (list, tuple)) and v and hasattr(v[0], "dims"):
        return f"{len(v)} tensors"
    if hasattr(v, "node"):  # a subgraph
        return f"graph ({len(v.node)} nodes)"
    t = str(v)
    return t if len(t) <= _MAX_ATTR_CHARS else t[: _MAX_ATTR_CHARS - 1] + "…"


def _type_text(tp) -> str:
    if not tp.HasField("tensor_type"):
        return ""
    tt = tp.tensor_type
    try:
        elem = TensorProto.DataType.Name(tt.elem_type).lower()
    except ValueError:
        elem = "?"
    if not tt.HasField("shape"):
        return elem
    dims = [d.dim_param if d.dim_param else (str(d.dim_value) if d.HasField("dim_value") else "?") for d in tt.shape.dim]
    return f"{elem}[{','.join(dims)}]"


def infer_shapes(model) -> dict[str, str]:
    """Tensor → "dtype[dims]" for the graph, without copying weight data.

    Shape inference runs on a light copy whose initializers are declared as
    inputs (type and dims only), so a 440 MB model is inferred in well under a
    second. Contrib ops get no shapes (onnx does not know them); that is fine
    for hover text.
    """
    g = model.graph
    shapes: dict[str, str] = {}
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        shapes[vi.name] = _type_text(vi.type)
    inits = {}
    for t in g.initializer:
        inits[t.name] = f"{onnx.TensorProto.DataType.Name(t.data_type).lower()}[{','.join(map(str, t.dims))}]"
    shapes.update(inits)
    try:
        light = onnx.GraphProto()
        light.name = g.name
        light.node.extend(g.node)
        light.input.extend(g.input)
        light.output.extend(g.output)
        declared = {i.name for i in g.input}
        for t in g.initializer:
            if t.name not in declared:
                light.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
        m = onnx.ModelProto()
        m.ir_version = model.ir_version
        m.opset_import.extend(model.opset_import)
        m.graph.CopyFrom(light)
        inferred = onnx.shape_inference.infer_shapes(m, check_type=False, strict_mode=False)
        for vi in inferred.graph.value_info:
            shapes.setdefault(vi.name, _type_text(vi.type))
    except Exception:  # a graph onnx cannot infer (cycles, unknown ops): names only
        pass
    return shapes


def node_table(model, *, layer_of: Mapping[str, int] | None = None, shapes: bool = True) -> NodeTable:
    """Read a ModelProto into a :class:`NodeTable`.

    Args:
        model: an ``onnx.ModelProto``.
        layer_of: optional node name → encoder layer (from a fusion diff);
            wins over what the names say.
        shapes: run shape inference for the hover text.
    """
    g = model.graph
    used: set[str] = set()
    raw = []
    for i, n in enumerate(g.node):
        nid = n.name if n.name and n.name not in used else f"{n.op_type}#{i}"
        used.add(nid)
        grp = None
        if layer_of and n.name in layer_of and layer_of[n.name] is not None:
            grp = f"layer {int(layer_of[n.name])}"
        if grp is None:  # the module scope (dynamo) first: dynamo's node names say nothing about layers
            grp = _scope_group(n) or group_of_name(n.name, *n.output)
        raw.append([nid, n, grp])
    # Unnamed scopes (ORT's fused nodes, mask plumbing) take the group of their
    # neighbours when both sides agree; a fused node whose name says nothing
    # usually kept its output tensor name, which group_of_name already read.
    producer = {o: r[0] for r in raw for o in r[1].output}
    consumers: dict[str, list[str]] = {}
    for r in raw:
        for t in r[1].input:
            if t in producer:
                consumers.setdefault(producer[t], []).append(r[0])
    group = {r[0]: r[2] for r in raw}
    for _ in range(2):
        for r in raw:
            if group[r[0]] is not None:
                continue
            # Only when every consumer is in that one group: a node that also
            # feeds something outside it would turn a collapsed group into a cycle.
            succ = {group[c] for c in consumers.get(r[0], ())}
            pred = {group[producer[t]] for t in r[1].input if t in producer and group[producer[t]]}
            if len(succ) == 1 and None not in succ and (not pred or pred == succ):
                group[r[0]] = succ.pop()
    nodes = [NodeInfo(id=nid, name=n.name, op_type=n.op_type, domain=n.domain or "ai.onnx",
                      inputs=tuple(n.input), outputs=tuple(n.output),
                      attrs=tuple((a.name, _attr_text(a)) for a in n.attribute), group=group[nid],
                      scope=_module_path(n))
             for nid, n, _ in raw]
    return NodeTable(nodes=nodes, graph_inputs=tuple(i.name for i in g.input),
                     graph_outputs=tuple(o.name for o in g.output),
                     shapes=infer_shapes(model) if shapes else {},
                     initializers=frozenset(t.name for t in g.initializer), scalars=_scalars(g))


def without_ops(table: NodeTable, ops: Iterable[str] = ("Constant",)) -> NodeTable:
    """The same table without nodes of ``ops`` (e.g. Constant), for a readable view.

    Constants are leaves (they have no inputs), so dropping them removes only
    edges into their consumers; the hover of a consumer still names the tensor.
    """
    drop = set(ops)
    keep = [n for n in table.nodes if n.op_type not in drop]
    if len(keep) == len(table.nodes):
        return table
    return NodeTable(nodes=keep, graph_inputs=table.graph_inputs, graph_outputs=table.graph_outputs,
                     shapes=table.shapes, initializers=table.initializers, scalars=table.scalars)


def without_constants(table: NodeTable) -> NodeTable:
    """The table without the nodes that only hold a value: ``Constant``, and ``Identity`` of a weight.

    TorchScript exports share tied weights through ``Identity(initializer)``
    and write shape arguments as ``Constant`` nodes; in a layer view they form
    a row of look-alike nodes above their consumers. Both are leaves (they
    read nothing but stored values), so dropping them removes only edges into
    consumers, whose hover still names the tensor.
    """
    def holds_a_value(n: NodeInfo) -> bool:
        if n.op_type == "Constant":
            return True
        return n.op_type == "Identity" and all(t in table.initializers for t in n.inputs if t)

    keep = [n for n in table.nodes if not holds_a_value(n)]
    if len(keep) == len(table.nodes):
        return table
    return NodeTable(nodes=keep, graph_inputs=table.graph_inputs, graph_outputs=table.graph_outputs,
                     shapes=table.shapes, initializers=table.initializers,
                     hidden=table.hidden + len(table.nodes) - len(keep), scalars=table.scalars)


# --------------------------------------------------------------------------- layout
