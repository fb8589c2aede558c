"""What the two graph panes show for the selected step, as plain data (no widgets).

Node tables and layouts are cached per snapshot object: a toggle hands back the cached snapshots of
every step before the one it changed, so their tables and layouts are reused, not rebuilt.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from ...graph.groups import view_groups
from ...graph.layout import layout_graph
from ...graph.nodes import node_table, without_constants
from ...viz.graph import pane_height, shared_yrange
from ..state import GraphView, PairView


def step_name(step) -> str:
    return str(getattr(step, "name", step) or "export")


def items_for(lay, node_ids: set[str]) -> set[str]:
    """Layout items standing for these nodes (a collapsed group or marker stands for its members)."""
    ids = set(lay.ids)
    out = {n for n in node_ids if n in ids}
    for gid, members in lay.members.items():
        if node_ids.intersection(members):
            out.add(gid)
    return out


class GraphViews:
    """Node tables, layouts and the before/after pair of the selected step, cached per snapshot."""

    def __init__(self, size: int = 64):
        self.size = size
        self._tables: OrderedDict[tuple, tuple] = OrderedDict()
        self._layouts: OrderedDict[tuple, tuple] = OrderedDict()

    def _cached(self, cache: OrderedDict, key: tuple, owner, make):
        """LRU lookup keyed by ``owner``'s identity; ``owner`` is kept so its id is not reused."""
        hit = cache.get(key)
        if hit is not None and hit[0] is owner:
            cache.move_to_end(key)
            return hit[1]
        value = make()
        cache[key] = (owner, value)
        while len(cache) > self.size:
            cache.popitem(last=False)
        return value

    def table(self, sn, constants: bool = False):
        def make():
            layer_of = getattr(getattr(sn, "diff", None), "layer_of", None) or None
            tab = node_table(getattr(sn, "skeleton", None) or sn.model, layer_of=layer_of)
            return tab if constants else without_constants(tab)

        return self._cached(self._tables, (id(sn), constants), sn, make)

    def layout(self, sn, *, view: str = "layer", layer: int = 0, expanded=(), expand_all: bool = False,
               constants: bool = False, width: int = 500):
        key = (id(sn), constants, view, layer, tuple(sorted(expanded)), expand_all, width)

        def make():
            tab = self.table(sn, constants)
            if view == "layer" and layer in tab.layers:
                return layout_graph(tab, layer=layer, width=width)
            groups = view_groups(tab)  # layers, embeddings, attention mask, the head: each a box to open
            collapsed = [] if expand_all else [g for g in set(groups.values()) if g not in expanded]
            return layout_graph(tab, collapsed=collapsed, groups=groups, width=width)

        return self._cached(self._layouts, key, sn, make)

    def latency_map(self, sn, profile, constants: bool = False) -> dict[str, float] | None:
        """Node id → profiled ms, for the latency overlay."""
        if profile is None:
            return None
        tab = self.table(sn, constants)
        per_node: dict[str, float] = {}  # on CUDA a node has one record per GPU kernel it launched
        for r in profile.records:
            per_node[r["node"]] = per_node.get(r["node"], 0.0) + r["mean_us"]
        out = {}
        for node, us in per_node.items():
            for nid in tab.resolve([node]):
                out[nid] = us / 1e3
        return out

    def provider_map(self, sn, constants: bool = False) -> dict[str, str] | None:
        """Node id → the execution provider ONNX Runtime gave it (``sn.assignment``, recorded in the parity lane:
        :mod:`workbench.ui.steps.providers`), for the provider overlay; None until it is known."""
        a = getattr(sn, "assignment", None)
        if a is None:
            return None
        tab = self.table(sn, constants)
        return {nid: prov for name, prov in a.providers().items() for nid in tab.resolve([name])}

    def pair(self, snapshots, index: int, state, profiles: dict[int, Any] | None = None) -> PairView:
        """The before/after views of snapshot ``index`` (0: the export against itself)."""

        a = index if 0 <= index < len(snapshots) else len(snapshots) - 1
        b = max(0, a - 1)
        before, after = snapshots[b], snapshots[a]
        opts = dict(view=state.view, layer=state.layer, expanded=tuple(state.expanded),
                    expand_all=state.expand_all, constants=state.constants, width=state.pane_width - 20)
        lb, la = self.layout(before, **opts), self.layout(after, **opts)
        diff = getattr(after, "diff", None) if a != b else None
        removed = self.table(before, state.constants).resolve(getattr(diff, "removed", []) or [])
        added = self.table(after, state.constants).resolve(getattr(diff, "added", []) or [])
        sel_after, sel_before = set(), set()
        if state.selected:
            prov = getattr(diff, "provenance", {}) or {}
            tab_a = self.table(after, state.constants)
            name = tab_a.by_id[state.selected].name if state.selected in tab_a.by_id else state.selected
            origin = self.table(before, state.constants).resolve(prov.get(name, []) or prov.get(state.selected, []))
            sel_after, sel_before = {state.selected}, items_for(lb, origin)
        name = step_name(after.step)
        whole = state.view == "model"

        def note(sn) -> str:  # say what the view leaves out, so its count matches the table's
            hidden = getattr(self.table(sn, state.constants), "hidden", 0)
            return f" <span style='font-size:10px;color:#888'>(+{hidden} constants hidden)</span>" \
                if hidden and whole else ""

        profiles = profiles or {}
        lat = (lambda i, sn: self.latency_map(sn, profiles.get(i), state.constants) if state.overlay else None)
        yrange = shared_yrange(lb, la)
        height = max(360, pane_height(lb, la, width=state.pane_width, yrange=yrange))
        return PairView(
            index=a, step=name, height=height, yrange=yrange,
            before=GraphView(lb, f"before {name}: {lb.title}{note(before)}", frozenset(items_for(lb, removed)),
                             frozenset(sel_before), lat(b, before), self.provider_map(before, state.constants)),
            after=GraphView(la, f"after {name}: {la.title}{note(after)}", frozenset(items_for(la, added)),
                            frozenset(sel_after), lat(a, after), self.provider_map(after, state.constants)),
            counts_before=dict(before.histogram), counts_after=dict(after.histogram),
            diag=tuple(self._diag(after, a)), diag_warning=self._warning(after, a))

    @staticmethod
    def _diag(snap, i: int) -> list[str]:
        fused = getattr(snap, "fused", None) or {}
        lines = [f"{step_name(snap.step)} ({getattr(snap, 'engine', '') or ''}): {snap.nodes} nodes, "
                 f"{getattr(snap, 'elapsed_s', 0) or 0:.2f} s"]
        if fused:
            lines.append("fused so far: " + ", ".join(f"{k} {v}" for k, v in fused.items() if v))
        return lines

    @staticmethod
    def _warning(snap, i: int) -> str:
        d = getattr(snap, "diagnostic", None)
        if d:
            text = d if isinstance(d, str) else "; ".join(f"{k}: {v}" for k, v in dict(d).items())
            return f"why not fused: {text}"
        if i > 0 and getattr(snap, "diff", None) is not None and snap.diff.empty:
            return "this step changed nothing"
        return ""


__all__ = ["GraphViews", "items_for", "step_name"]
