"""What changed between two snapshots of a graph, and where fused nodes came from.

Nodes are keyed by name (the timeline names every node uniquely). A node is
*removed* if its name is gone, *added* if its name is new. Provenance links
each added node to the removed nodes it replaced: removed and added nodes are
joined when they share a tensor that only the changed region produces, or
when a surviving node's input was rewired from a removed node's output to an
added node's output. Each connected group is one rewrite.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import onnx

from .summary import node_layer


@dataclass
class Diff:
    """Nodes removed and added between two graphs, with provenance.

    Attributes:
        removed: names of nodes in the old graph but not the new one.
        added: names of nodes in the new graph but not the old one.
        provenance: added node name → removed node names it replaced.
        layer_of: removed or added node name → encoder layer (None if outside).
        rewired: surviving node names whose inputs changed.
    """

    removed: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    provenance: dict[str, list[str]] = field(default_factory=dict)
    layer_of: dict[str, int | None] = field(default_factory=dict)
    rewired: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.removed or self.added or self.rewired)

    def added_ops(self, after: onnx.ModelProto | None = None) -> dict[str, int]:
        """Op histogram of the added nodes (needs the new graph for op types)."""
        if after is None:
            return {}
        ops = {n.name: n.op_type for n in after.graph.node}
        return dict(Counter(ops[a] for a in self.added if a in ops))

    def to_dict(self) -> dict:
        return {"removed": list(self.removed), "added": list(self.added),
                "provenance": {k: list(v) for k, v in self.provenance.items()},
                "layer_of": dict(self.layer_of), "rewired": list(self.rewired)}


class _DSU:
    def __init__(self):
        self.parent: dict = {}

    def find(self, x):
        p = self.parent.setdefault(x, x)
        while p != self.parent.setdefault(p, p):
            self.parent[p] = self.parent[self.parent[p]]
            p = self.parent[p]
        self.parent[x] = p
        return p

    def union(self, a, b):
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[ra] = rb


def _node_index(model: onnx.ModelProto, index: dict | None) -> dict:
    if index is None:
        return {n.name: n for n in model.graph.node}
    hit = index.get(id(model))
    if hit is None or hit[0] is not model:
        hit = index[id(model)] = (model, {n.name: n for n in model.graph.node})
    return hit[1]


def _rewrite_groups(removed: list[str], added: list[str], rewired: list[str], old: dict, new: dict) -> _DSU:
    """Union removed and added nodes that share tensors they produce: one group per rewrite."""
    produced_by_removed = {o for k in removed for o in old[k].output if o}
    produced_by_added = {o for k in added for o in new[k].output if o}
    dsu = _DSU()
    for k in removed:
        node = old[k]
        dsu.find(("r", k))
        for t in node.output:
            if t:
                dsu.union(("r", k), ("t", t))
        for t in node.input:
            if t in produced_by_removed:
                dsu.union(("r", k), ("t", t))
    for k in added:
        node = new[k]
        dsu.find(("a", k))
        for t in node.output:
            if t:
                dsu.union(("a", k), ("t", t))
        for t in node.input:
            if t in produced_by_added or t in produced_by_removed:
                dsu.union(("a", k), ("t", t))
    for k in rewired:
        for t_old, t_new in zip(old[k].input, new[k].input):
            if t_old != t_new and (t_old in produced_by_removed or t_new in produced_by_added):
                dsu.union(("t", t_old), ("t", t_new))
    return dsu


def diff_models(before: onnx.ModelProto, after: onnx.ModelProto, *, index: dict | None = None) -> Diff:
    """Compare two graphs node by node and trace added nodes to removed ones.

    Args:
        before: the earlier snapshot (only ``graph.node`` is read).
        after: the later snapshot.
        index: optional cache of name → node maps, kept by a caller that
            diffs a chain of graphs it no longer edits (each graph's map is
            then built once, not twice).
    """
    old = _node_index(before, index)
    new = _node_index(after, index)
    removed = [k for k in old if k not in new]
    added = [k for k in new if k not in old]
    rewired = [k for k in new if k in old and (list(new[k].input) != list(old[k].input)
                                               or new[k].op_type != old[k].op_type)]
    d = Diff(removed=removed, added=added, rewired=rewired)
    if not removed and not added:
        return d

    dsu = _rewrite_groups(removed, added, rewired, old, new)
    # Graph outputs keep their names, so a rewrite ending at one links through it.
    groups: dict = {}
    for k in removed:
        groups.setdefault(dsu.find(("r", k)), ([], []))[0].append(k)
    for k in added:
        groups.setdefault(dsu.find(("a", k)), ([], []))[1].append(k)
    for rem, add in groups.values():
        if len(add) <= 1:
            for a in add:
                d.provenance[a] = list(rem)
        else:
            _split_by_layer(rem, add, old, new, d.provenance)

    for k in removed:
        d.layer_of[k] = node_layer(old[k])
    for k in added:
        layer = node_layer(new[k])
        if layer is None:
            votes = Counter(d.layer_of[r] for r in d.provenance.get(k, []) if d.layer_of.get(r) is not None)
            if votes:
                layer = votes.most_common(1)[0][0]
        d.layer_of[k] = layer
    return d


def _split_by_layer(rem: list[str], add: list[str], old: dict, new: dict, prov: dict) -> None:
    """Share one rewrite group among several added nodes, layer by layer.

    Per-layer fusions are often joined by a helper they share (one mask
    computation feeds every layer's Attention); each removed node goes to
    the added nodes of its own encoder layer, or to the ones it touches.
    """
    # Only computed tensors link nodes: an exporter shares one initializer among equal weights (the zero
    # biases of random weights), which would tie every layer's nodes together.
    computed = {t for n in list(old.values()) + list(new.values()) for t in n.output if t}

    def tensors(n):
        return {t for t in list(n.input) + list(n.output) if t in computed}

    rem_t = {r: tensors(old[r]) for r in rem}
    add_t = {a: tensors(new[a]) for a in add}
    rem_layer = {r: node_layer(old[r]) for r in rem}
    add_layer = {}
    for a in add:
        layer = node_layer(new[a])
        if layer is None:
            votes = Counter(rem_layer[r] for r in rem if rem_layer[r] is not None and rem_t[r] & add_t[a])
            layer = votes.most_common(1)[0][0] if votes else None
        add_layer[a] = layer
    for a in add:
        prov[a] = []
    for r in rem:
        lay = rem_layer[r]
        targets = [a for a in add if lay is not None and add_layer[a] == lay]
        if not targets:
            targets = [a for a in add if rem_t[r] & add_t[a]]
        if not targets:
            targets = [a for a in add if add_layer[a] is None] or list(add)
        for a in targets:
            prov[a].append(r)


def provenance_chain(diffs: list[Diff], name: str) -> list[str]:
    """Follow a node back through several diffs to the original nodes.

    Args:
        diffs: diffs in timeline order (first diff is from the export).
        name: a node name in the last graph.

    Returns:
        The names of the earliest nodes it stands for (itself if unchanged).
    """
    frontier = [name]
    for d in reversed(diffs):
        nxt: list[str] = []
        for n in frontier:
            nxt.extend(d.provenance.get(n, [n]) if n in d.provenance else [n])
        frontier = list(dict.fromkeys(nxt))
    return frontier
