"""Layered layout of an ONNX graph: coordinates for one view (the node table is in ``nodes.py``, markers in ``markers.py``).

Pure data in, pure data out: :func:`node_table` reads a ``ModelProto`` once
(names, ops, inputs, outputs, shapes, attributes, encoder layer of each
node); :func:`layout_graph` turns a node table into coordinates for one view:
one encoder layer, or the whole model with some layers collapsed into boxes.
The drawing lives in :mod:`workbench.viz.graph`.

Coordinates are pixels of the picture at full size: each item's box holds its
symbol and its full label (:func:`item_size`), and igraph's Sugiyama layout
(:mod:`workbench.graph.layered`) ranks, orders and places the boxes and routes
each edge through the gaps between them. Items that read only initializers, and a
layer view's input markers, sit just above their first reader (not pinned to the top row).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from .groups import describe, group_key, view_groups
from .layered import Size, layered
from .markers import layer_io
from .nodes import NodeTable, html_escape


@dataclass
class Box:
    """A rectangle around the nodes of one group (an expanded encoder layer)."""

    group: str
    x0: float
    y0: float
    x1: float
    y1: float


#: Width of one label character at the label font size (9 px), in pixels.
CHAR_PX = 5.6
#: Height of one line of label text, in pixels.
TEXT_PX = 11.0
#: Symbol size of each kind of item, in pixels (a fused operator's diamond is :data:`FUSED_EXTRA` larger).
SYMBOL_PX = {"node": 11, "group": 26, "in": 15, "out": 15, "input": 13, "output": 13}
FUSED_EXTRA = 4
#: Operators a fusion emits, drawn as a diamond :data:`FUSED_EXTRA` px larger than other nodes.
FUSED_SYMBOL_OPS = frozenset({
    "Attention", "MultiHeadAttention", "SkipLayerNormalization", "EmbedLayerNormalization", "BiasGelu", "FastGelu",
    "GemmFastGelu", "BiasAdd", "SkipSimplifiedLayerNormalization", "SimplifiedLayerNormalization", "BiasSplitGelu",
    "QuickGelu", "RotaryEmbedding", "GroupQueryAttention"})
#: The width a view is laid out for when the caller gives none: the app's pane (520 px) less its margins.
FIT_WIDTH = 500
#: Views of up to this many items are fitted to the width (larger ones draw no labels).
FIT_LIMIT = 160
#: The tallest picture (height over width) a view is laid out for, ranks closer where needed.
MAX_ASPECT = 1.35
#: Room around an expanded group's members, inside its box.
BOX_PAD = 6.0


def item_size(kind: str, label: str) -> Size:
    """The box an item needs around its symbol's centre: the symbol, and its full label beside it (a layer view's
    markers: centred above, or below for "out", and nothing on the other side). Across, every node keeps room
    for a fused operator's larger diamond; up and down, only a fused operator's row needs it (a row of other
    nodes is one line of label text tall)."""
    r = (SYMBOL_PX[kind] + (FUSED_EXTRA if kind == "node" else 0)) / 2  # across: room for any node's symbol
    text = CHAR_PX * len(label)
    if kind == "in":
        return Size(max(r, text / 2), max(r, text / 2), r + 3 + TEXT_PX, r)
    if kind == "out":
        return Size(max(r, text / 2), max(r, text / 2), r, r + 3 + TEXT_PX)
    tall = (SYMBOL_PX[kind] + (FUSED_EXTRA if kind == "node" and label in FUSED_SYMBOL_OPS else 0)) / 2
    return Size(r, r + 3 + text + 2, max(tall, TEXT_PX / 2))


@dataclass
class Layout:
    """Coordinates of one view, in pixels at full size. ``y`` grows downwards (rank 0 at the top, at y = 0).

    ``kind`` per item: "node" (a real node), "group" (a collapsed group, its
    members in ``members``), "in" / "out" (in a one-layer view: a labelled
    marker for what feeds the layer from outside, one per role, or for where
    its results go; the nodes it stands for in ``members``), "input" /
    "output" (graph inputs and outputs). ``routes[j]``: the bend points
    (x0, y0, x1, y1, ...) of ``edges[j]`` between its ends; ``bounds``: the
    box (x0, y0, x1, y1) around every item and its label.
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
    rank: list[int] | None = None
    routes: list[list[float]] | None = None
    bounds: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)

    def __len__(self) -> int:
        return len(self.ids)

    def index(self) -> dict[str, int]:
        return {i: k for k, i in enumerate(self.ids)}

    @property
    def depth(self) -> int:
        """The number of ranks."""
        return max(self.rank) + 1 if self.rank else 0


def layout_graph(table: NodeTable, *, layer: int | None = None, collapsed: Iterable[str] | None = None,
                 show_io: bool = True, title: str = "", groups: Mapping[str, str] | None = None,
                 width: float = FIT_WIDTH) -> Layout:
    """Coordinates for one view of ``table``.

    Args:
        table: from :func:`node_table`.
        layer: show only this encoder layer; what feeds it from outside is
            drawn as a few labelled markers, one per role (hidden states,
            attention mask, shape, other), and what it passes on as one "out"
            marker. ``None`` shows the whole model.
        collapsed: in the whole-model view, the groups drawn as one box each
            ("embeddings", "attention mask", "layer 3", "final norm", ...). ``None``
            collapses every group; an empty set expands everything.
        show_io: draw the graph inputs and outputs as items.
        groups: node id → its group in the whole-model view (default :func:`~workbench.graph.groups.view_groups`).
        width: the pixels the picture gets across (the app's pane less its margins): wider ranks are split,
            and ranks come closer where the picture would be over :data:`MAX_ASPECT` times as tall (views of
            up to :data:`FIT_LIMIT` items; larger ones draw no labels and are scaled to fit).
    """
    v = _Items()
    if layer is not None:
        own = _layer_items(v, table, layer)
        title = title or own
    else:
        vg = dict(groups) if groups is not None else view_groups(table)
        _model_items(v, table, vg, set(vg.values()) if collapsed is None else set(collapsed), show_io)
        title = title or f"whole model: {len(table.nodes)} nodes"
    _, edge_set = _edges(v, table, io=layer is None and show_io)
    edges = sorted(edge_set)
    labels = [f"{it[1]} ({len(v.members[it[0]])})" if it[2] == "group" else it[1] for it in v.items]
    sizes = [item_size(it[2], label) for it, label in zip(v.items, labels)]
    fit = len(sizes) <= FIT_LIMIT
    d = layered(sizes, edges,
                clusters=[v.group_of.get(it[0]) if it[2] == "node" else None for it in v.items],
                width=width - 10 if fit else None, height=MAX_ASPECT * width - 40 if fit else None)
    boxes = [] if layer is not None else _boxes(v, d.x, d.y, sizes)
    x0, y0, x1, y1 = d.bounds
    for b in boxes:
        x0, y0, x1, y1 = min(x0, b.x0), min(y0, b.y0 - TEXT_PX), max(x1, b.x1), max(y1, b.y1)
    return Layout(ids=[it[0] for it in v.items], labels=labels, kinds=[it[2] for it in v.items],
                  ops=[it[3] for it in v.items], x=d.x, y=d.y, edges=edges, boxes=boxes,
                  members=v.members, hover=_hovers(v, table), title=title, rank=d.rank, routes=d.routes,
                  bounds=(x0, y0, x1, y1))


class _Items:
    """What a view draws, while it is built: items, the nodes each stands for, and how edges map onto them."""

    def __init__(self):
        self.items: list[tuple[str, str, str, str]] = []  # (id, label, kind, op)
        self.members: dict[str, list[str]] = {}
        self.rep: dict[str, str] = {}  # node id -> item id drawn for it
        self.ext: dict[str, str] = {}  # layer view: outside tensor -> the marker item drawn for it
        self.out_item = None
        self.marker_hover: dict[str, str] = {}
        self.group_of: dict[str, str] = {}  # whole-model view: node id -> its group (drawn expanded or not)

    def add(self, iid: str, label: str, kind: str, op: str) -> None:
        self.items.append((iid, label, kind, op))


def _layer_items(v: _Items, table: NodeTable, layer: int) -> str:
    """One encoder layer's nodes and the markers for what feeds it and where its results go; its title."""
    g = f"layer {layer}"
    inside = [n for n in table.nodes if n.group == g]
    if not inside:
        raise ValueError(f"no nodes in encoder layer {layer}")
    view = layer_io(table, layer, inside, {n.id for n in inside})
    for m in view.markers:
        v.add(m.id, m.label, "in", m.label)
        v.members[m.id] = list(m.members)
        for nid in m.members:
            v.rep.setdefault(nid, m.id)
        for t in m.tensors:
            v.ext[t] = m.id
        v.marker_hover[m.id] = m.hover
    for n in inside:
        v.add(n.id, n.op_type, "node", n.op_type)
        v.rep[n.id] = n.id
    if view.out is not None:
        v.add(view.out.id, view.out.label, "out", view.out.label)
        v.members[view.out.id] = list(view.out.members)
        for nid in view.out.members:
            v.rep.setdefault(nid, view.out.id)
        v.marker_hover[view.out.id] = view.out.hover
        v.out_item = view.out
    return f"encoder layer {layer}: {len(inside)} nodes"


def _model_items(v: _Items, table: NodeTable, groups: dict[str, str], collapsed: set[str], show_io: bool) -> None:
    """The whole model: graph inputs, each collapsed group as one item (at its first node), the other nodes."""
    if show_io:
        for name in table.graph_inputs:
            if name not in table.initializers:
                v.add(f"input:{name}", name, "input", "input")
    for n in table.nodes:
        g = groups.get(n.id)
        if g is not None:
            v.group_of[n.id] = g
        if g in collapsed:
            gid = f"group:{g}"
            if gid not in v.members:
                v.add(gid, g, "group", g)
            v.members.setdefault(gid, []).append(n.id)
            v.rep[n.id] = gid
        else:
            v.add(n.id, n.op_type, "node", n.op_type)
            v.rep[n.id] = n.id
    if show_io:
        for name in table.graph_outputs:
            v.add(f"output:{name}", name, "output", "output")


def _edges(v: _Items, table: NodeTable, io: bool) -> tuple[list[set[int]], set[tuple[int, int]]]:
    """Item → its predecessors, and the edges between items (one per pair, whatever the tensors)."""
    index = {it[0]: k for k, it in enumerate(v.items)}
    preds: list[set[int]] = [set() for _ in v.items]
    edges: set[tuple[int, int]] = set()
    inp = {name: index.get(f"input:{name}") for name in table.graph_inputs}
    for n in table.nodes:
        v_id = v.rep.get(n.id)
        if v_id is None or v.items[index[v_id]][2] not in ("node", "group"):
            continue
        k = index[v_id]
        for t in n.inputs:
            p = table.producer.get(t)
            if t in v.ext:
                u = index[v.ext[t]]
            elif p is not None:
                u_id = v.rep.get(p)
                if u_id is None or u_id == v_id:
                    continue
                u = index[u_id]
            elif inp.get(t) is not None:
                u = inp[t]
            else:
                continue
            preds[k].add(u)
            edges.add((u, k))
        outs = [index.get(f"output:{t}") for t in n.outputs] if io else []
        if v.out_item is not None and set(n.outputs) & v.out_item.tensors:
            outs.append(index[v.out_item.id])
        for o in outs:
            if o is not None:
                preds[o].add(k)
                edges.add((k, o))
    return preds, edges


def _boxes(v: _Items, x: list[float], y: list[float], sizes: list[Size]) -> list[Box]:
    """A box around each expanded group's nodes and their labels, in reading order (embeddings, mask, layers...)."""
    by_group: dict[str, list[int]] = {}
    for k, (iid, _, kind, _) in enumerate(v.items):
        if kind == "node" and iid in v.group_of:
            by_group.setdefault(v.group_of[iid], []).append(k)
    p = BOX_PAD
    return [Box(g, min(x[k] - sizes[k].left for k in ks) - p, min(y[k] - sizes[k].half for k in ks) - p,
                max(x[k] + sizes[k].right for k in ks) + p, max(y[k] + sizes[k].down for k in ks) + p)
            for g, ks in sorted(by_group.items(), key=lambda kv: group_key(kv[0]))]


def _hovers(v: _Items, table: NodeTable) -> list[str]:
    hover = []
    for iid, label, kind, _ in v.items:
        if kind == "node":
            hover.append(table.hover(iid))
        elif kind in ("in", "out"):
            hover.append(v.marker_hover[iid])
        elif kind == "group":
            ms = v.members[iid]
            ops: dict[str, int] = {}
            for m in ms:
                op = table.by_id[m].op_type
                ops[op] = ops.get(op, 0) + 1
            top = ", ".join(f"{op} {c}" for op, c in sorted(ops.items(), key=lambda kv: -kv[1])[:8])
            what = describe(label)
            hover.append(f"<b>{html_escape(label)}</b>: {len(ms)} nodes<br>" + (f"<i>{html_escape(what)}</i><br>" if what else "")
                         + f"{top}<br><i>click to expand</i>")
        else:
            hover.append(f"<b>graph {kind}</b><br>{html_escape(label)} {table.shapes.get(label, '')}")
    return hover
