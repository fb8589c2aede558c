"""Layered drawing of a directed graph with boxes of given sizes, in pixels, on igraph's Sugiyama layout.

igraph (``python-igraph``: wheels on every platform, no system binary) breaks cycles (Eades' feedback arc
set) and sorts the graph for the longest-path ranks; :mod:`workbench.graph.ordering` orders each rank with
igraph's Sugiyama layout (barycentre sweeps) and puts dummy vertices where edges skip ranks. What igraph leaves out, done here: the x of each
item from its box (a box is as wide as its full label, so no label is cut and no two boxes overlap), ranks
split where they are wider than the picture, expanded clusters (an opened group) ranked as one unit and given
a column of their own, the y of each rank from its tallest box, and each edge's route: down from its
source, through the gaps its dummy vertices keep in the ranks it skips (one lane per source), into its
target, so no edge crosses a box it does not end at.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from .columns import clear_boxes
from .ordering import order


#: Horizontal gap between two boxes of one rank, and room kept for an edge passing between them (pixels).
GAP = 10.0
#: Half the width an edge passing through a rank needs.
LANE = 3.0
#: Vertical gap between the boxes of two consecutive ranks.
RANK_GAP = 16.0
#: The closest two ranks come when a tall picture must fit its height (rows of nodes are one 11 px line of label
#: text tall, so the labels of two ranks stay this far apart).
MIN_RANK_GAP = 5.0
#: Placement sweeps (down and up) that pull each item towards its neighbours.
SWEEPS = 6


@dataclass(frozen=True)
class Size:
    """An item's box around its anchor (where edges end): ``left`` and ``right`` of it, ``half`` above it and
    ``below`` under it (``half`` where None: a box centred on its anchor)."""

    left: float
    right: float
    half: float
    below: float | None = None

    @property
    def down(self) -> float:
        """How far the box reaches under its anchor."""
        return self.half if self.below is None else self.below


@dataclass
class Drawing:
    """Where each item goes (``x``, ``y`` of its anchor, ``rank``) and each edge's bend points (flat x, y, ...)."""

    x: list[float]
    y: list[float]
    rank: list[int]
    routes: list[list[float]]
    bounds: tuple[float, float, float, float]  # x0, y0, x1, y1 of every box


def layered(sizes: Sequence[Size], edges: Sequence[tuple[int, int]], *, top: Sequence[int] = (),
            clusters: Sequence[str | None] | None = None, width: float | None = None,
            height: float | None = None) -> Drawing:
    """Place ``sizes`` (one per item) for ``edges`` (source, target), ranks growing downwards.

    Args:
        top: items kept on the first rank (what feeds the view from outside).
        clusters: a name per item (or None): a cluster is ranked as one unit (no other item shares its ranks)
            and its items sit in one column, so a box around them holds nothing else.
        width, height: the room the picture gets (pixels). A rank wider than ``width`` (its boxes and the
            lanes of edges passing it) is split: its items with most slack below go to a new rank under it;
            every box is kept within ``width``. Ranks are :data:`RANK_GAP` apart, closer (down to
            :data:`MIN_RANK_GAP`) where that keeps the picture within ``height``.
    """
    n = len(sizes)
    if n == 0:
        return Drawing([], [], [], [[] for _ in edges], (0.0, 0.0, 0.0, 0.0))
    base = _ranks(n, edges, set(top), clusters)
    best, budget, ranks = _fit(base, sizes, edges, set(top), clusters, width, height)
    # The exact order, placed again; where it comes out wider than the picture (an opened group's column
    # pushes what passes it aside), on ranks split for a little less.
    for _ in range(3):
        tries = [_attempt(sizes, edges, ranks, clusters, width, exact=True, flip=flip) for flip in (True, False)
                 ] if clusters and any(c is not None for c in clusters) else [
                     _attempt(sizes, edges, ranks, clusters, width, exact=True)]
        fits = [t for t in tries if not width or _wide(t) <= max(width + 1, _wide(best))]
        if fits:
            best = fits[0]
            break
        budget -= max(min(_wide(t) for t in tries) - width, GAP)
        ranks = _bounded(base, sizes, edges, budget, set(top))
    x, rank, rows, chains, left, right = best
    up = [max([sizes[k].half for k in row if k < n], default=LANE) for row in rows]
    down = [max([sizes[k].down for k in row if k < n], default=LANE) for row in rows]
    gap = RANK_GAP
    if height and len(rows) > 1:
        gap = max(MIN_RANK_GAP, min(RANK_GAP, (height - sum(up) - sum(down)) / (len(rows) - 1)))
    return _draw(x, rank, rows, (up, down), chains, left, right, n, gap)


def _fit(base: list[int], sizes: Sequence[Size], edges: Sequence[tuple[int, int]], top: set[int],
         clusters: Sequence[str | None] | None, width: float | None, height: float | None):
    """The trial drawing (heuristic order) that keeps most of its full size within ``width`` x ``height``,
    with the width budget and the ranks it was split for. A split rank's new ranks carry lanes for the edges
    that skip them, and an expanded cluster's box pushes other items aside: while the picture is wider than
    ``width``, the ranks are split again for less."""
    budget = width
    best, best_fit, best_ranks, best_budget = None, -1.0, base, width
    for _ in range(5):
        ranks = _bounded(base, sizes, edges, budget, top) if width else base
        tried = _attempt(sizes, edges, ranks, clusters, width, exact=False)
        wide = _wide(tried)
        # How much of full size the picture keeps when scaled into width x height (rows at least 28 px apart).
        fit = min(1.0, (width or wide) / wide) * min(1.0, (height or 1e9) / (28.0 * len(tried[2])))
        if fit > best_fit:
            best, best_fit, best_ranks, best_budget = tried, fit, ranks, budget
        if not width or wide <= width + 1 or budget < width / 3:
            break
        budget -= max(wide - width, GAP)
    return best, best_budget, best_ranks


def _wide(tried) -> float:
    x, _, _, _, left, right = tried
    return max(x[k] + right[k] for k in range(len(x))) - min(x[k] - left[k] for k in range(len(x)))


def _attempt(sizes: Sequence[Size], edges: Sequence[tuple[int, int]], ranks: list[int],
             clusters: Sequence[str | None] | None, width: float | None, exact: bool, flip: bool = True):
    """The order of ``ranks`` (:func:`~workbench.graph.ordering.order`), then x of every vertex; also each vertex's
    rank, the ranks' vertices, each edge's chain of vertices, and each vertex's room left and right of its anchor."""
    n = len(sizes)
    o = order(n, edges, ranks, exact=exact, clusters=clusters, flip=flip)
    rank, chains, rows = o.rank, o.chains, o.rows
    m = len(rank)
    cl = o.clusters or [None] * m
    left = [s.left for s in sizes] + [LANE] * (m - n)
    right = [s.right for s in sizes] + [LANE] * (m - n)
    source = list(range(n)) + [0] * (m - n)  # edges from one source that skip a rank share one lane through it
    for chain in chains:
        for d in chain[1:-1]:
            source[d] = chain[0]
    up: list[list[int]] = [[] for _ in range(m)]
    down: list[list[int]] = [[] for _ in range(m)]
    for a, b in sorted({(a, b) for chain in chains for a, b in zip(chain, chain[1:])}):
        lo, hi = (a, b) if rank[a] < rank[b] else (b, a)
        down[lo].append(hi)
        up[hi].append(lo)
    x = _place_x(rows, left, right, up, down, n, width, source)
    if any(c is not None for c in cl):
        clear_boxes(x, rows, rank, cl, left, right, n, width, source, GAP)
    return x, rank, rows, chains, left, right


def _ranks(n: int, edges: Sequence[tuple[int, int]], top: set[int],
           clusters: Sequence[str | None] | None = None) -> list[int]:
    """Longest-path ranks; a source not in ``top`` sits just above its first reader. A cluster is ranked as one
    unit as tall as its own ranks (its members ranked among themselves the same way), so its box shares no
    rank with an item that feeds it or reads from it."""
    unit = list(range(n))
    inner, tall = [0] * n, [1] * n
    members: dict[str, list[int]] = {}
    for k, c in enumerate(clusters or ()):
        if c is not None:
            members.setdefault(c, []).append(k)
    for ks in members.values():
        local = {k: i for i, k in enumerate(ks)}
        rs = _layering(len(ks), [(local[u], local[v]) for u, v in edges if u in local and v in local], set())
        for k in ks:
            unit[k], inner[k] = ks[0], rs[local[k]]
        tall[ks[0]] = max(rs) + 1
    ids = {u: i for i, u in enumerate(sorted(set(unit)))}
    outer = _layering(len(ids), sorted({(ids[unit[u]], ids[unit[v]]) for u, v in edges if unit[u] != unit[v]}),
                      {ids[unit[k]] for k in top}, [tall[u] for u in sorted(ids)])
    rank = [outer[ids[unit[k]]] + inner[k] for k in range(n)]
    remap = {r: i for i, r in enumerate(sorted(set(rank)))}
    return [remap[r] for r in rank]


def _layering(n: int, edges: list[tuple[int, int]], top: set[int], tall: list[int] | None = None) -> list[int]:
    """Longest-path layering of ``n`` units ``tall`` ranks each (igraph breaks cycles: Eades' feedback arc set,
    the heuristic its Sugiyama layout uses), sources other than ``top`` pulled down to their first reader."""
    tall = tall or [1] * n
    import igraph  # lazy, as above

    g = igraph.Graph(n=n, edges=edges, directed=True)
    cut = set(g.feedback_arc_set(method="eades")) if not g.is_dag() else set()
    dag = [e for i, e in enumerate(edges) if i not in cut]
    preds: list[list[int]] = [[] for _ in range(n)]
    succ: list[list[int]] = [[] for _ in range(n)]
    for u, v in dag:
        preds[v].append(u)
        succ[u].append(v)
    rank = [0] * n
    for v in igraph.Graph(n=n, edges=dag, directed=True).topological_sorting():
        rank[v] = max((rank[u] + tall[u] for u in preds[v]), default=0)
    for k in range(n):
        if not preds[k] and k not in top and succ[k]:
            rank[k] = max(rank[k], min(rank[w] for w in succ[k]) - tall[k])
    return rank


def _bounded(ranks: list[int], sizes: Sequence[Size], edges: Sequence[tuple[int, int]], budget: float,
             top: set[int]) -> list[int]:
    """``ranks`` with each rank wider than ``budget`` split: its items with the most slack below move one rank
    down (a new rank under it), the first row keeping at least one item (and the ``top`` items)."""
    n = len(sizes)
    succ: list[list[int]] = [[] for _ in range(n)]
    for u, v in edges:
        succ[u].append(v)
    rows: list[list[int]] = [[] for _ in range(max(ranks) + 1)]
    for k in range(n):
        rows[ranks[k]].append(k)
    out = [0] * n
    r_new = 0
    for r, row in enumerate(rows):
        passing = len({u for u, v in edges if ranks[u] < r < ranks[v]}) * (2 * LANE + GAP)  # a lane per source
        slack = {k: min((ranks[w] for w in succ[k]), default=len(rows)) - r for k in row}
        order = sorted(row, key=lambda k: (k not in top, slack[k], k))
        while order:  # each new rank also holds a lane for every edge from the ranks split off above it
            used, keep = passing + sum(len(succ[k]) for k in row if k not in order) * (2 * LANE + GAP), []
            for k in order:
                w = sizes[k].left + sizes[k].right + GAP
                if keep and used + w > budget and k not in top:
                    continue
                keep.append(k)
                used += w
            for k in keep:
                out[k] = r_new
            r_new += 1
            order = [k for k in order if k not in set(keep)]
    return out


def _draw(x: list[float], rank: list[int], rows: list[list[int]], extent: tuple[list[float], list[float]],
          chains: list[list[int]], left: list[float], right: list[float], n: int, gap: float) -> Drawing:
    """Ranks stacked ``gap`` apart (each reaching ``extent``'s up above its line and down under it); each edge's
    route: out of its source's box, through the gap its dummy vertices keep in each rank it passes, into its
    target's box."""
    up, down = extent
    ys = [0.0] * len(rows)
    for r in range(1, len(rows)):
        ys[r] = ys[r - 1] + down[r - 1] + gap + up[r]

    def side(r: int, sign: int) -> float:  # the y where an edge leaves rank r downwards (sign 1) or upwards
        return ys[r] + (down[r] if sign > 0 else -up[r])

    routes = []
    for chain in chains:
        u, v = chain[0], chain[-1]
        sign = 1 if rank[v] >= rank[u] else -1
        pts = [x[u], side(rank[u], sign)]
        for d in chain[1:-1]:
            pts += [x[d], side(rank[d], -sign), x[d], side(rank[d], sign)]
        pts += [x[v], side(rank[v], -sign)]
        routes.append([round(p, 2) for p in pts])
    return Drawing(x=[round(x[k], 2) for k in range(n)], y=[ys[rank[k]] for k in range(n)], rank=rank[:n],
                   routes=routes, bounds=(min(x[k] - left[k] for k in range(len(x))), -up[0],  # lanes too
                                          max(x[k] + right[k] for k in range(len(x))), ys[-1] + down[-1]))


def _place_x(rows: list[list[int]], left: list[float], right: list[float], up: list[list[int]],
             down: list[list[int]], n: int, width: float | None, source: list[int]) -> list[float]:
    """x of every item and dummy: each rank in its order, boxes apart, pulled towards their neighbours (and
    every box between 0 and ``width``, where its rank fits)."""
    x = [0.0] * len(left)
    for row in rows:
        at = 0.0
        for j, k in enumerate(row):
            at += (right[row[j - 1]] + GAP + left[k]) if j else 0.0
            x[k] = at
    for s in range(SWEEPS):
        down_sweep = s % 2 == 0
        for row in (rows[1:] if down_sweep else rows[-2::-1]):
            want, weight = [], []
            for k in row:
                nb = (up[k] if down_sweep else down[k]) or (down[k] if down_sweep else up[k])
                want.append(sum(x[u] for u in nb) / len(nb) if nb else x[k])
                weight.append((1.0 if k < n else 2.0) * (1.0 if nb else 0.1))
            gaps = [0.0 if a >= n and b >= n and source[a] == source[b] else right[a] + GAP + left[b]
                    for a, b in zip(row, row[1:])]
            bounds = (left[row[0]], width - right[row[-1]]) if width else None
            for k, v in zip(row, _ordered_fit(want, weight, gaps, bounds)):
                x[k] = v
            j = 0
            while j < len(row):  # a run of one source's lanes: one line
                e = j
                while e + 1 < len(row) and gaps[e] == 0.0:
                    e += 1
                mean = sum(x[k] for k in row[j:e + 1]) / (e + 1 - j)
                for k in row[j:e + 1]:
                    x[k] = mean
                j = e + 1
    return x


def _ordered_fit(want: list[float], weight: list[float], gaps: list[float],
                 bounds: tuple[float, float] | None = None) -> list[float]:
    """Positions closest to ``want`` (weighted least squares) in order, consecutive ones at least ``gaps`` apart,
    the first at least ``bounds[0]``, the last at most ``bounds[1]`` (where the gaps leave room for both).

    With ``o`` the running sum of the gaps, ``q = p - o`` must not decrease: an isotonic regression, solved by
    pooling adjacent violators; bounds on the first and last clamp every ``q``.
    """
    offset = [0.0]
    for gp in gaps:
        offset.append(offset[-1] + gp)
    blocks: list[list[float]] = []  # [mean, weight, count]
    for w, wt, o in zip(want, weight, offset):
        blocks.append([w - o, wt, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            m2, w2, c2 = blocks.pop()
            m1, w1, c1 = blocks[-1]
            blocks[-1] = [(m1 * w1 + m2 * w2) / (w1 + w2), w1 + w2, c1 + c2]
    out = []
    for mean, _, count in blocks:
        out += [mean] * count
    if bounds is not None:
        lo, hi = bounds[0], max(bounds[0], bounds[1] - offset[-1])
        out = [min(hi, max(lo, q)) for q in out]
    return [q + o for q, o in zip(out, offset)]


__all__ = ["Drawing", "GAP", "MIN_RANK_GAP", "RANK_GAP", "Size", "layered"]
