"""Layered layout of an ONNX graph: coordinates for one view (the node table is in ``nodes.py``, markers in ``markers.py``).

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

from dataclasses import dataclass
from typing import Iterable, Mapping

from .groups import describe, group_key, view_groups
from .markers import _layer_io, _spread_markers
# The node table lives in graph/nodes.py; its names stay importable from here, where callers found them.
from .nodes import (EMBEDDINGS, NodeInfo, NodeTable, _esc, _group_key, group_of_name, infer_shapes,  # noqa: F401
                    node_table, without_constants, without_ops)

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
                 show_io: bool = True, title: str = "", groups: Mapping[str, str] | None = None) -> Layout:
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
    """
    v = _Items()
    if layer is not None:
        own = _layer_items(v, table, layer)
        title = title or own
    else:
        vg = dict(groups) if groups is not None else view_groups(table)
        _model_items(v, table, vg, set(vg.values()) if collapsed is None else set(collapsed), show_io)
        title = title or f"whole model: {len(table.nodes)} nodes"
    preds, edges = _edges(v, table, io=layer is None and show_io)
    x, y = _place(v.items, preds)
    if layer is not None:
        _spread_markers(v.items, x, y)
    else:  # a few boxes side by side (an architecture diagram) get room for their names
        widest = max((y.count(r) for r in set(y)), default=1)
        x = [xi * max(1.0, min(6.0, 12.0 / widest)) for xi in x]
    boxes = [] if layer is not None else _boxes(v, x, y)
    labels = [f"{it[1]} ({len(v.members[it[0]])})" if it[2] == "group" else it[1] for it in v.items]
    return Layout(ids=[it[0] for it in v.items], labels=labels, kinds=[it[2] for it in v.items],
                  ops=[it[3] for it in v.items], x=x, y=y, edges=sorted(edges), boxes=boxes,
                  members=v.members, hover=_hovers(v, table), title=title)


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
    view = _layer_io(table, layer, inside, {n.id for n in inside})
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


def _place(items: list[tuple[str, str, str, str]], preds: list[set[int]]) -> tuple[list[float], list[float]]:
    """x and y of every item: ranks and barycentre order, on the items in a topological order."""
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
    return x, y


def _boxes(v: _Items, x: list[float], y: list[float]) -> list[Box]:
    """A box around each expanded group's nodes, in reading order (embeddings, mask, layers, the rest)."""
    by_group: dict[str, list[int]] = {}
    for k, (iid, _, kind, _) in enumerate(v.items):
        if kind == "node" and iid in v.group_of:
            by_group.setdefault(v.group_of[iid], []).append(k)
    return [Box(g, min(x[k] for k in ks) - 0.6, min(y[k] for k in ks) - 0.6,
                max(x[k] for k in ks) + 0.6, max(y[k] for k in ks) + 0.6)
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
            hover.append(f"<b>{_esc(label)}</b>: {len(ms)} nodes<br>" + (f"<i>{_esc(what)}</i><br>" if what else "")
                         + f"{top}<br><i>click to expand</i>")
        else:
            hover.append(f"<b>graph {kind}</b><br>{_esc(label)} {table.shapes.get(label, '')}")
    return hover


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
