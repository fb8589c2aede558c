"""Layered drawing of a directed graph with boxes of given sizes, in pixels: igraph's Sugiyama layout.

igraph (``python-igraph``, wheels on every platform, no system binary) ranks the items (longest path, cycles
broken by a feedback arc set), orders each rank to reduce crossings (barycentre sweeps) and puts a dummy vertex
where an edge skips a rank. What igraph leaves out, done here: the x of each item from its box (a box is as
wide as its full label, so no label is cut and no two boxes overlap), the y of each rank from its tallest box,
and each edge's route: down from its source, through the gaps between boxes of the ranks it skips (its dummy
vertices), into its target, so no edge crosses a box it does not end at.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import igraph

#: Horizontal gap between two boxes of one rank, and room kept for an edge passing between them (pixels).
GAP = 10.0
#: Half the width an edge passing through a rank needs.
LANE = 3.0
#: Vertical gap between the boxes of two consecutive ranks.
RANK_GAP = 16.0
#: The closest two ranks come when a tall picture must fit its height.
MIN_RANK_GAP = 8.0
#: Placement sweeps (down and up) that pull each item towards its neighbours.
SWEEPS = 6


@dataclass(frozen=True)
class Size:
    """An item's box around its anchor (where edges end): ``left`` and ``right`` of it, ``half`` its half height."""

    left: float
    right: float
    half: float


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
        clusters: a name per item (or None): items of one cluster sit side by side in each rank, so a box
            around them holds no other item of those ranks.
        width, height: the room the picture gets (pixels). A rank wider than ``width`` (its boxes and the
            lanes of edges passing it) is split: its items with most slack below go to a new rank under it;
            every box is kept within ``width``. Ranks are :data:`RANK_GAP` apart, closer (down to
            :data:`MIN_RANK_GAP`) where that keeps the picture within ``height``.
    """
    n = len(sizes)
    if n == 0:
        return Drawing([], [], [], [[] for _ in edges], (0.0, 0.0, 0.0, 0.0))
    base = _ranks(n, edges, set(top))
    budget = width
    for _ in range(4):  # a split rank's new ranks carry lanes for edges that skip them: split again if need be
        ranks = _bounded(base, sizes, edges, budget, set(top)) if width else base
        rank, chains, rows = _extend(n, edges, ranks)
        m = len(rank)
        left = [s.left for s in sizes] + [LANE] * (m - n)
        right = [s.right for s in sizes] + [LANE] * (m - n)
        need = max(sum(left[k] + right[k] + GAP for k in row) - GAP for row in rows)
        if not width or need <= width or budget < width / 3:
            break
        budget -= need - width
    cl: list[str | None] = [None] * m
    if clusters is not None:
        cl[:n] = clusters
        for chain in chains:  # an edge between two members of a cluster runs inside its box
            if cl[chain[0]] is not None and cl[chain[0]] == cl[chain[-1]]:
                for d in chain[1:-1]:
                    cl[d] = cl[chain[0]]
        rows = [_contiguous(row, cl) for row in rows]
    up: list[list[int]] = [[] for _ in range(m)]
    down: list[list[int]] = [[] for _ in range(m)]
    for chain in chains:
        for a, b in zip(chain, chain[1:]):
            lo, hi = (a, b) if rank[a] < rank[b] else (b, a)
            down[lo].append(hi)
            up[hi].append(lo)
    x = _place_x(rows, left, right, up, down, n, width)
    if clusters is not None:
        _clear_boxes(x, rows, rank, cl, left, right)
    half = [max([sizes[k].half for k in row if k < n], default=LANE) for row in rows]
    gap = RANK_GAP
    if height and len(rows) > 1:
        gap = max(MIN_RANK_GAP, min(RANK_GAP, (height - 2 * sum(half)) / (len(rows) - 1)))
    return _draw(x, rank, rows, half, chains, left, right, n, gap)


def _extend(n: int, edges: Sequence[tuple[int, int]],
            ranks: list[int]) -> tuple[list[int], list[list[int]], list[list[int]]]:
    """igraph's Sugiyama layout on ``ranks``: the rank of every item and dummy vertex (one per rank an edge
    skips), each edge's chain of vertices, and each rank's vertices in igraph's order."""
    g = igraph.Graph(n=n, edges=list(edges), directed=True)
    lay = g.layout_sugiyama(layers=ranks, hgap=1, vgap=1, maxiter=100)
    pos = [c[0] for c in lay.coords[:n]]
    rank = list(ranks)
    chains: list[list[int]] = []
    for (u, v), pts in zip(edges, lay.edge_routing):
        pts = sorted((tuple(p) for p in pts), key=lambda p: p[1], reverse=rank[u] > rank[v])
        chain = [u]
        for px, py in pts:
            pos.append(px)
            rank.append(int(round(py)))
            chain.append(len(pos) - 1)
        chains.append(chain + [v])
    rows: list[list[int]] = [[] for _ in range(max(rank) + 1)]
    for k in sorted(range(len(pos)), key=lambda k: pos[k]):
        rows[rank[k]].append(k)
    return rank, chains, rows


def _ranks(n: int, edges: Sequence[tuple[int, int]], top: set[int]) -> list[int]:
    """igraph's ranks (longest path from the sources); a source not in ``top`` sits just above its first reader."""
    g = igraph.Graph(n=n, edges=list(edges), directed=True)
    base = [int(round(c[1])) for c in g.layout_sugiyama(maxiter=1).coords[:n]]
    succ: list[list[int]] = [[] for _ in range(n)]
    has_pred = [False] * n
    for u, v in edges:
        if u != v:
            succ[u].append(v)
            has_pred[v] = True
    for k in range(n):
        if not has_pred[k] and k not in top and succ[k]:
            base[k] = max(base[k], min(base[w] for w in succ[k]) - 1)
    used = sorted(set(base))
    remap = {r: i for i, r in enumerate(used)}
    return [remap[r] for r in base]


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
        passing = sum(1 for u, v in edges if ranks[u] < r < ranks[v]) * (2 * LANE + GAP)
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


def _draw(x: list[float], rank: list[int], rows: list[list[int]], half: list[float], chains: list[list[int]],
          left: list[float], right: list[float], n: int, gap: float) -> Drawing:
    """Ranks stacked ``gap`` apart; each edge's route: out of its source's box, through the gap its dummy
    vertices keep in each rank it passes, into its target's box."""
    ys = [0.0] * len(rows)
    for r in range(1, len(rows)):
        ys[r] = ys[r - 1] + half[r - 1] + gap + half[r]
    routes = []
    for chain in chains:
        u, v = chain[0], chain[-1]
        sign = 1 if rank[v] >= rank[u] else -1
        pts = [x[u], ys[rank[u]] + sign * half[rank[u]]]
        for d in chain[1:-1]:
            pts += [x[d], ys[rank[d]] - sign * half[rank[d]], x[d], ys[rank[d]] + sign * half[rank[d]]]
        pts += [x[v], ys[rank[v]] - sign * half[rank[v]]]
        routes.append([round(p, 2) for p in pts])
    return Drawing(x=[round(x[k], 2) for k in range(n)], y=[ys[rank[k]] for k in range(n)], rank=rank[:n],
                   routes=routes, bounds=(min(x[k] - left[k] for k in range(n)), -half[0],
                                          max(x[k] + right[k] for k in range(n)), ys[-1] + half[-1]))


def _contiguous(row: list[int], cl: Sequence[str | None]) -> list[int]:
    """``row`` reordered so each cluster's vertices are side by side, at the mean place of its members."""
    where: dict[str, list[int]] = {}
    for j, k in enumerate(row):
        if cl[k] is not None:
            where.setdefault(cl[k], []).append(j)
    centre = {c: sum(js) / len(js) for c, js in where.items()}
    return [k for _, k in sorted(((centre[cl[k]] if cl[k] is not None else j, j), k) for j, k in enumerate(row))]


def _clear_boxes(x: list[float], rows: list[list[int]], rank: list[int], cl: Sequence[str | None],
                 left: list[float], right: list[float]) -> None:
    """Push what is not in a cluster out of the box around the cluster's vertices, in every rank it spans."""
    for c in dict.fromkeys(k for k in cl if k is not None):
        ks = [k for k, ck in enumerate(cl) if ck == c]
        x0, x1 = min(x[k] - left[k] for k in ks), max(x[k] + right[k] for k in ks)
        mid = (x0 + x1) / 2
        for r in range(min(rank[k] for k in ks), max(rank[k] for k in ks) + 1):
            lhs = [k for k in rows[r] if cl[k] != c and x[k] <= mid]
            rhs = [k for k in rows[r] if cl[k] != c and x[k] > mid]
            edge = x0 - GAP
            for k in reversed(lhs):
                x[k] = min(x[k], edge - right[k])
                edge = x[k] - left[k] - GAP
            edge = x1 + GAP
            for k in rhs:
                x[k] = max(x[k], edge + left[k])
                edge = x[k] + right[k] + GAP


def _place_x(rows: list[list[int]], left: list[float], right: list[float], up: list[list[int]],
             down: list[list[int]], n: int, width: float | None) -> list[float]:
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
            gaps = [right[a] + GAP + left[b] for a, b in zip(row, row[1:])]
            bounds = (left[row[0]], width - right[row[-1]]) if width else None
            for k, v in zip(row, _ordered_fit(want, weight, gaps, bounds)):
                x[k] = v
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
