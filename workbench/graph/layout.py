"""Layered layout of an ONNX graph: node table, encoder-layer groups, coordinates.

Pure data in, pure data out: :func:`node_table` reads a ``ModelProto`` once
(names, ops, inputs, outputs, shapes, attributes, encoder layer of each
node); :func:`layout_graph` turns a node table into coordinates for one view:
one encoder layer, or the whole model with some layers collapsed into boxes.
The plotly drawing lives in :mod:`workbench.viz.graph`.

The layering is longest-path from the graph inputs, then a few barycentre
sweeps to order the nodes of each rank; nodes that read only initializers
(TorchScript's weight-sharing ``Identity``, ``Constant``) sit just above their
first consumer instead of at the top, where they would draw long edges.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable, Mapping

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
        return sorted(seen, key=_group_key)

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
        lines = [f"<b>{n.op_type}</b>{dom}", _esc(n.name or n.id)]
        if n.group:
            lines.append(f"group: {n.group}")
        for label, tensors in (("in", n.inputs), ("out", n.outputs)):
            for t in tensors[:6]:
                if not t:
                    continue
                kind = " (weight)" if t in self.initializers else ""
                lines.append(f"{label}: {_esc(_short(t, 48))} {self.shapes.get(t, '')}{kind}")
            if len(tensors) > 6:
                lines.append(f"{label}: ... {len(tensors) - 6} more")
        for k, v in n.attrs[:6]:
            lines.append(f"{_esc(k)} = {_esc(v)}")
        return "<br>".join(lines)


def _esc(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _short(s: str, n: int) -> str:
    return s if len(s) <= n else "…" + s[-(n - 1):]


def _group_key(g: str) -> tuple[int, int]:
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


def _scope_group(node) -> str | None:
    """The encoder group of the module scopes the dynamo exporter wrote on ``node``, if any.

    The dynamo exporter names nodes after ops (``node_MatMul_52``); the module
    path (``['', 'inner', 'inner.encoder', 'inner.encoder.layer.0', ..., 'linear']``)
    is in the node's metadata. The innermost scope that names a group wins.
    """
    for p in getattr(node, "metadata_props", ()):
        if p.key == "pkg.torch.onnx.name_scopes":
            for scope in reversed(re.findall(r"'([^']*)'", p.value)):
                grp = group_of_name(scope.replace(".", "/"))
                if grp:
                    return grp
    return None


def _attr_text(a) -> str:
    from onnx import helper

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
    from onnx import TensorProto

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
    import onnx
    from onnx import helper

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
                      attrs=tuple((a.name, _attr_text(a)) for a in n.attribute), group=group[nid])
             for nid, n, _ in raw]
    return NodeTable(nodes=nodes, graph_inputs=tuple(i.name for i in g.input),
                     graph_outputs=tuple(o.name for o in g.output),
                     shapes=infer_shapes(model) if shapes else {},
                     initializers=frozenset(t.name for t in g.initializer))


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
                     shapes=table.shapes, initializers=table.initializers)


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
                     hidden=table.hidden + len(table.nodes) - len(keep))


# --------------------------------------------------------------------------- layout


@dataclass
class Box:
    """A rectangle around the nodes of one group (an expanded encoder layer)."""

    group: str
    x0: float
    y0: float
    x1: float
    y1: float


@dataclass
class Layout:
    """Coordinates of one view. ``y`` grows downwards (rank 0 at the top).

    ``kind`` per item: "node" (a real node), "group" (a collapsed group, its
    members in ``members``), "in" / "out" (in a one-layer view: a labelled
    marker for what feeds the layer from outside, one per role, or for where
    its results go; the nodes it stands for in ``members``), "input" /
    "output" (graph inputs and outputs).
    """

    ids: list[str]
    labels: list[str]
    kinds: list[str]
    ops: list[str]
    x: list[float]
    y: list[float]
    edges: list[tuple[int, int]]
    boxes: list[Box]
    members: dict[str, list[str]]
    hover: list[str]
    title: str = ""

    def __len__(self) -> int:
        return len(self.ids)

    def index(self) -> dict[str, int]:
        return {i: k for k, i in enumerate(self.ids)}

    @property
    def depth(self) -> int:
        return int(max(self.y)) + 1 if self.y else 0

    @property
    def width(self) -> int:
        return int(max(self.x) - min(self.x)) + 1 if self.x else 0


def _rank_and_order(n: int, preds: list[list[int]], sweeps: int = 4,
                    pinned: frozenset[int] = frozenset()) -> tuple[list[int], list[float]]:
    """Longest-path ranks and barycentre x positions for a DAG of ``n`` items.

    Items are expected in topological order (ONNX requires it); a back edge
    (an invalid graph) is ignored rather than looped on. ``pinned`` items
    without predecessors stay on the top rank instead of being pulled down.
    """
    succs: list[list[int]] = [[] for _ in range(n)]
    for v in range(n):
        for u in preds[v]:
            if u < v:
                succs[u].append(v)
    rank = [0] * n
    floating = []  # items with no predecessors that are not sources of the graph flow
    for v in range(n):
        ps = [u for u in preds[v] if u < v]
        if ps:
            rank[v] = 1 + max(rank[u] for u in ps)
        else:
            floating.append(v)
    # Pull predecessor-free items down next to their first consumer.
    for v in reversed(floating):
        if succs[v] and v not in pinned:
            rank[v] = max(0, min(rank[w] for w in succs[v]) - 1)
    # Compact the ranks the pulling emptied.
    used = sorted(set(rank))
    remap = {r: i for i, r in enumerate(used)}
    rank = [remap[r] for r in rank]
    by_rank: list[list[int]] = [[] for _ in used]
    for v in range(n):
        by_rank[rank[v]].append(v)
    pos = [0.0] * n
    for row in by_rank:
        for k, v in enumerate(row):
            pos[v] = k - (len(row) - 1) / 2
    for s in range(sweeps):
        down = s % 2 == 0
        rows = by_rank if down else by_rank[::-1]
        for row in rows:
            if len(row) < 2:
                if row:
                    nb = (preds[row[0]] if down else succs[row[0]]) or (succs[row[0]] if down else preds[row[0]])
                    if nb:
                        pos[row[0]] = 0.5 * pos[row[0]] + 0.5 * sum(pos[u] for u in nb) / len(nb)
                continue
            bary = {}
            for v in row:
                nb = (preds[v] if down else succs[v]) or (succs[v] if down else preds[v])
                bary[v] = sum(pos[u] for u in nb) / len(nb) if nb else pos[v]
            row.sort(key=lambda v: (bary[v], pos[v]))
            # Place in order, centred on the mean barycentre, one unit apart.
            centre = sum(bary.values()) / len(row)
            for k, v in enumerate(row):
                pos[v] = centre + k - (len(row) - 1) / 2
    return rank, pos


def layout_graph(table: NodeTable, *, layer: int | None = None, collapsed: Iterable[str] | None = None,
                 show_io: bool = True, title: str = "") -> Layout:
    """Coordinates for one view of ``table``.

    Args:
        table: from :func:`node_table`.
        layer: show only this encoder layer; what feeds it from outside is
            drawn as a few labelled markers, one per role (hidden states,
            attention mask, shape, other), and what it passes on as one "out"
            marker. ``None`` shows the whole model.
        collapsed: in the whole-model view, the groups drawn as one box each
            ("embeddings", "layer 3", ...). ``None`` collapses every encoder
            layer; an empty set expands everything.
        show_io: draw the graph inputs and outputs as items.
    """
    items: list[tuple[str, str, str, str]] = []  # (id, label, kind, op)
    members: dict[str, list[str]] = {}
    rep: dict[str, str] = {}  # node id -> item id drawn for it
    ext: dict[str, str] = {}  # layer view: outside tensor -> the marker item drawn for it
    out_item = None
    if layer is not None:
        g = f"layer {layer}"
        inside = [n for n in table.nodes if n.group == g]
        if not inside:
            raise ValueError(f"no nodes in encoder layer {layer}")
        inside_ids = {n.id for n in inside}
        view = _layer_io(table, layer, inside, inside_ids)
        for m in view.markers:
            items.append((m.id, m.label, "in", m.label))
            members[m.id] = list(m.members)
            for nid in m.members:
                rep.setdefault(nid, m.id)
            for t in m.tensors:
                ext[t] = m.id
        marker_hover = {m.id: m.hover for m in view.markers}
        for n in inside:
            items.append((n.id, n.op_type, "node", n.op_type))
            rep[n.id] = n.id
        if view.out is not None:
            items.append((view.out.id, view.out.label, "out", view.out.label))
            members[view.out.id] = list(view.out.members)
            for nid in view.out.members:
                rep.setdefault(nid, view.out.id)
            marker_hover[view.out.id] = view.out.hover
            out_item = view.out
        title = title or f"encoder layer {layer}: {len(inside)} nodes"
    else:
        coll = {g for g in table.groups if g.startswith("layer ")} if collapsed is None else set(collapsed)
        if show_io:
            for name in table.graph_inputs:
                if name not in table.initializers:
                    items.append((f"input:{name}", name, "input", "input"))
        placed: set[str] = set()
        for n in table.nodes:
            if n.group in coll:
                gid = f"group:{n.group}"
                members.setdefault(gid, []).append(n.id)
                rep[n.id] = gid
                if gid not in placed:
                    placed.add(gid)
                    items.append((gid, n.group, "group", n.group))
            else:
                items.append((n.id, n.op_type, "node", n.op_type))
                rep[n.id] = n.id
        if show_io:
            for name in table.graph_outputs:
                items.append((f"output:{name}", name, "output", "output"))
        title = title or f"whole model: {len(table.nodes)} nodes"
    index = {it[0]: k for k, it in enumerate(items)}
    preds: list[set[int]] = [set() for _ in items]
    edges: set[tuple[int, int]] = set()
    inp = {name: index.get(f"input:{name}") for name in table.graph_inputs}
    for n in table.nodes:
        v_id = rep.get(n.id)
        if v_id is None or items[index[v_id]][2] not in ("node", "group"):
            continue
        v = index[v_id]
        for t in n.inputs:
            p = table.producer.get(t)
            if t in ext:
                u = index[ext[t]]
            elif p is not None:
                u_id = rep.get(p)
                if u_id is None or u_id == v_id:
                    continue
                u = index[u_id]
            elif inp.get(t) is not None:
                u = inp[t]
            else:
                continue
            preds[v].add(u)
            edges.add((u, v))
        if layer is None and show_io:
            for t in n.outputs:
                k = index.get(f"output:{t}")
                if k is not None:
                    preds[k].add(v)
                    edges.add((v, k))
        if out_item is not None and set(n.outputs) & out_item.tensors:
            k = index[out_item.id]
            preds[k].add(v)
            edges.add((v, k))
    # Groups collapse several nodes into one item placed at its first member;
    # a later member's input may come from an item placed after it. Order the
    # items topologically so ranking sees a DAG.
    order = _topo(len(items), preds)
    pos_of = {old: new for new, old in enumerate(order)}
    p2 = [sorted(pos_of[u] for u in preds[old]) for old in order]
    # A layer view's input markers stay on the top row: the eye finds what comes in where it starts reading.
    pinned = frozenset(pos_of[k] for k, it in enumerate(items) if it[2] == "in")
    rank, xpos = _rank_and_order(len(order), p2, pinned=pinned)
    x = [0.0] * len(items)
    y = [0.0] * len(items)
    for new, old in enumerate(order):
        x[old] = xpos[new]
        y[old] = float(rank[new])
    if layer is not None:
        _spread_markers(items, x, y)
    boxes = []
    if layer is None:
        by_group: dict[str, list[int]] = {}
        for k, (iid, _, kind, _) in enumerate(items):
            if kind == "node":
                g = table.by_id[iid].group
                if g and g.startswith("layer "):
                    by_group.setdefault(g, []).append(k)
        for g, ks in sorted(by_group.items(), key=lambda kv: _group_key(kv[0])):
            boxes.append(Box(g, min(x[k] for k in ks) - 0.6, min(y[k] for k in ks) - 0.6,
                             max(x[k] for k in ks) + 0.6, max(y[k] for k in ks) + 0.6))
    hover = []
    for iid, label, kind, _ in items:
        if kind == "node":
            hover.append(table.hover(iid))
        elif kind in ("in", "out"):
            hover.append(marker_hover[iid])
        elif kind == "group":
            ms = members[iid]
            ops: dict[str, int] = {}
            for m in ms:
                op = table.by_id[m].op_type
                ops[op] = ops.get(op, 0) + 1
            top = ", ".join(f"{op} {c}" for op, c in sorted(ops.items(), key=lambda kv: -kv[1])[:8])
            hover.append(f"<b>{label}</b>: {len(ms)} nodes<br>{top}<br><i>click to expand</i>")
        else:
            hover.append(f"<b>graph {kind}</b><br>{_esc(label)} {table.shapes.get(label, '')}")
    labels = [f"{it[1]} ({len(members[it[0]])})" if it[2] == "group" else it[1] for it in items]
    return Layout(ids=[it[0] for it in items], labels=labels, kinds=[it[2] for it in items],
                  ops=[it[3] for it in items], x=x, y=y, edges=sorted(edges), boxes=boxes,
                  members=members, hover=hover, title=title)


@dataclass(frozen=True)
class Marker:
    """One labelled item standing for what a layer view leaves out (its inputs' producers, its consumers)."""

    id: str
    label: str
    role: str
    members: tuple[str, ...]  # the node ids it stands for
    tensors: frozenset[str]  # the tensors it carries into (or out of) the layer
    hover: str


@dataclass(frozen=True)
class LayerIO:
    markers: list[Marker]
    out: Marker | None


#: Input roles of a layer view, in the order their markers claim nodes: (role, label, what it stands for).
INPUT_ROLES = (
    ("hidden", "hidden states", "the hidden states this layer transforms"),
    ("mask", "attention mask", "the attention mask, as the graph prepares it for attention"),
    ("shape", "shape", "batch and sequence sizes read from an input's shape"),
    ("other", "other inputs", "other values computed outside this layer"),
)
INPUT_ROLES_LABEL = tuple((r, label) for r, label, _ in INPUT_ROLES)
_INT_TYPES = ("int", "uint", "bool")


def _op_counts(table: NodeTable, ids: Iterable[str], top: int = 6) -> str:
    ops: dict[str, int] = {}
    for i in ids:
        op = table.by_id[i].op_type
        ops[op] = ops.get(op, 0) + 1
    ranked = sorted(ops.items(), key=lambda kv: (-kv[1], kv[0]))
    text = ", ".join(f"{op} {c}" for op, c in ranked[:top])
    return text + (f", {len(ranked) - top} more op types" if len(ranked) > top else "")


def _layer_io(table: NodeTable, layer: int, inside: list[NodeInfo], inside_ids: set[str]) -> LayerIO:
    """The markers of a one-layer view: one per role of what flows in, one for what flows out.

    A tensor from outside the layer is "hidden" when an embedding block or another
    layer makes it (or it is EmbedLayerNormalization's first output), "mask" when
    its out-of-layer ancestry reads an input named like a mask (or it is
    EmbedLayerNormalization's mask index), "shape" when it is an integer, else
    "other". Each marker stands for the producers of its tensors and for their
    out-of-layer, out-of-group ancestors (the mask and shape plumbing), each node
    counted under the first role that claims it.
    """
    g = f"layer {layer}"
    ext: dict[str, str | None] = {}  # tensor -> producer id (None: a graph input)
    for n in inside:
        for t in n.inputs:
            if not t or t in table.initializers or t in ext:
                continue
            p = table.producer.get(t)
            if p in inside_ids:
                continue
            if p is None and t not in table.graph_inputs:
                continue
            ext[t] = p

    def ancestry(p: str) -> set[str]:
        """``p`` and its ancestors that sit in no group (stops at embeddings and layers)."""
        seen, stack = set(), [p]
        while stack:
            u = stack.pop()
            if u in seen or u in inside_ids:
                continue
            seen.add(u)
            if table.by_id[u].group is not None:
                continue
            for t in table.by_id[u].inputs:
                q = table.producer.get(t)
                if q is not None and q not in seen:
                    stack.append(q)
        return seen

    def reads_mask(ids: set[str]) -> bool:
        for u in ids:
            if table.by_id[u].group is None and any(
                    t in table.graph_inputs and "mask" in t.lower() for t in table.by_id[u].inputs):
                return True
        return False

    roles: dict[str, str] = {}
    cones: dict[str, set[str]] = {}
    for t, p in ext.items():
        dtype = table.shapes.get(t, "").split("[")[0]
        if p is None:
            roles[t] = "mask" if "mask" in t.lower() else "shape" if dtype.startswith(_INT_TYPES) else "other"
            cones[t] = set()
            continue
        pn = table.by_id[p]
        cone = ancestry(p)
        cones[t] = cone
        if pn.op_type == "EmbedLayerNormalization":
            roles[t] = "mask" if t in pn.outputs[1:2] else "hidden"
        elif pn.group is not None and not dtype.startswith(_INT_TYPES):
            roles[t] = "hidden"
        elif reads_mask(cone):
            roles[t] = "mask"
        elif dtype.startswith(_INT_TYPES) or pn.op_type in ("Shape", "Size"):
            roles[t] = "shape"
        else:
            roles[t] = "other"
    markers = []
    # Each tensor's own producer belongs to its role's marker; then the plumbing behind it, first come first served.
    claimed: dict[str, str] = {}
    for role, _, _ in INPUT_ROLES:
        for t, p in ext.items():
            if p is not None and roles[t] == role:
                claimed.setdefault(p, role)
    for role, _, _ in INPUT_ROLES:
        for t in ext:
            if roles[t] == role:
                for u in cones[t]:
                    claimed.setdefault(u, role)
    for role, label, what in INPUT_ROLES:
        tensors = [t for t in ext if roles[t] == role]
        if not tensors:
            continue
        ids = [u for u, r in claimed.items() if r == role]
        order = {n.id: k for k, n in enumerate(table.nodes)}
        ids.sort(key=order.__getitem__)
        if role == "hidden":
            srcs = sorted({table.by_id[ext[t]].group or table.by_id[ext[t]].op_type for t in tensors if ext[t]})
            origin = "from " + (", ".join(srcs) if srcs else "the graph inputs")
        else:
            origin = ""
        lines = [f"<b>{label}</b>{' ' + _esc(origin) if origin else ''}", f"<i>{what}</i>"]
        if ids:
            lines.append(f"stands for {len(ids)} node{'s' if len(ids) != 1 else ''} outside {g}: "
                         f"{_op_counts(table, ids)}")
        else:  # its producers are another marker's (EmbedLayerNormalization makes hidden states and mask index)
            owners = sorted({dict(INPUT_ROLES_LABEL)[claimed[ext[t]]] for t in tensors if ext[t] in claimed})
            if owners:
                lines.append(f"made by the node{'s' if len(owners) > 1 else ''} behind {_esc(', '.join(owners))}")
        for t in tensors[:4]:
            src = f" ← {table.by_id[ext[t]].op_type}" if ext[t] else " (graph input)"
            lines.append(f"in: {_esc(_short(t, 40))} {table.shapes.get(t, '')}{_esc(src)}")
        if len(tensors) > 4:
            lines.append(f"in: ... {len(tensors) - 4} more")
        markers.append(Marker(id=f"in:{role}", label=label, role=role, members=tuple(ids),
                              tensors=frozenset(tensors), hover="<br>".join(lines)))
    # What leaves the layer: tensors read by nodes outside it, or graph outputs.
    outs: dict[str, list[str]] = {}
    for n in table.nodes:
        if n.id in inside_ids:
            continue
        for t in n.inputs:
            if t and table.producer.get(t) in inside_ids:
                outs.setdefault(t, []).append(n.id)
    for t in table.graph_outputs:
        if table.producer.get(t) in inside_ids:
            outs.setdefault(t, [])
    # Integer values handed on (dynamo shares a layer's shape Concat with the next) are named in the hover,
    # not drawn: an edge from deep in the layer's plumbing to "out" reads as a second output.
    sizes = [t for t in outs if table.shapes.get(t, "").startswith(_INT_TYPES)]
    if len(sizes) < len(outs):
        outs = {t: cs for t, cs in outs.items() if t not in sizes}
    else:
        sizes = []
    out = None
    if outs:
        order = {n.id: k for k, n in enumerate(table.nodes)}
        consumers = sorted({c for cs in outs.values() for c in cs}, key=order.__getitem__)
        dests = sorted({table.by_id[c].group or table.by_id[c].op_type for c in consumers},
                       key=lambda d: _group_key(d) if d == EMBEDDINGS or d.startswith("layer ") else (3, 0))
        if any(t in table.graph_outputs for t in outs):
            dests.append("graph output")
        label = "to " + (dests[0] if len(dests) == 1 else f"{dests[0]} +{len(dests) - 1}")
        lines = [f"<b>out</b>: what {g} passes on, to {_esc(', '.join(dests))}"]
        if consumers:
            lines.append(f"stands for the {len(consumers)} node{'s' if len(consumers) != 1 else ''} that read it: "
                         f"{_op_counts(table, consumers)}")
        for t in list(outs)[:4]:
            lines.append(f"out: {_esc(_short(t, 40))} {table.shapes.get(t, '')}")
        if sizes:
            lines.append(f"also hands on {len(sizes)} shape value{'s' if len(sizes) != 1 else ''} (not drawn)")
        out = Marker(id="out:", label=label, role="out", members=tuple(consumers), tensors=frozenset(outs),
                     hover="<br>".join(lines))
    return LayerIO(markers=markers, out=out)


#: Left-to-right order of the input markers.
TOP_ROW_ORDER = ("hidden", "shape", "other", "mask")
#: Horizontal distance (in layout units) kept between a layer view's input markers, whose labels sit above them.
MARKER_GAP = 3.0


def _spread_markers(items: list[tuple[str, str, str, str]], x: list[float], y: list[float]) -> None:
    """Space the input markers of the top row apart (in their barycentre order) and centre the out marker.

    Their labels are drawn above (below, for "out") the marker, centred, so they
    need room to each side rather than to the right.
    """
    # A fixed order, the mask last: its edge goes to the middle of the layer, and from the side it does not
    # run down through the nodes of the first rows.
    rank = {f"in:{r}": j for j, r in enumerate(TOP_ROW_ORDER)}
    ins = sorted((k for k, it in enumerate(items) if it[2] == "in" and y[k] == 0.0),
                 key=lambda k: (rank.get(items[k][0], len(rank)), x[k]))
    body = [x[k] for k, it in enumerate(items) if it[2] == "node"]
    lo, hi = (min(body), max(body)) if body else (0.0, 0.0)
    if len(ins) > 1:
        gap = max(MARKER_GAP, (hi - lo) / (len(ins) - 1))
        start = (lo + hi) / 2 - gap * (len(ins) - 1) / 2
        for j, k in enumerate(ins):
            x[k] = start + j * gap
    elif ins:
        x[ins[0]] = min(max(x[ins[0]], lo), hi)


def _topo(n: int, preds: list[set[int]]) -> list[int]:
    """Kahn's order, stable on the original order; leftovers (a cycle) appended."""
    import heapq

    indeg = [len(p) for p in preds]
    succ: list[list[int]] = [[] for _ in range(n)]
    for v, ps in enumerate(preds):
        for u in ps:
            succ[u].append(v)
    heap = [v for v in range(n) if indeg[v] == 0]
    heapq.heapify(heap)
    out = []
    while heap:
        u = heapq.heappop(heap)
        out.append(u)
        for v in succ[u]:
            indeg[v] -= 1
            if indeg[v] == 0:
                heapq.heappush(heap, v)
    if len(out) < n:
        seen = set(out)
        out.extend(v for v in range(n) if v not in seen)
    return out
