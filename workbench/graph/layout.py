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
from typing import Iterable

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
