"""The order of the items within each rank of a layered drawing: few edge crossings, found by igraph.

igraph's Sugiyama layout orders each rank by barycentre sweeps and puts a dummy vertex where an edge skips a
rank; its result depends on the order the vertices are numbered in. As OGDF's and Graphviz's layered layouts
do (their ``runs``), it is run on a few seeded renumberings and the order with the fewest crossings kept.
What igraph leaves out, done here: each order is improved by moving single vertices (sifting, and the
``transpose`` step of Graphviz's dot), crossings are counted exactly (pairs of edge segments between two
ranks whose ends are in opposite order, once per edge along a shared segment), and where crossings are left
on a small view the exact minimum is found by HiGHS (:mod:`workbench.graph.exact`). Two kinds of dummy
vertices are tried: one per edge and rank, and one trunk per source and rank that all its long edges share.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .exact import exact_rows, solvable

#: Renumberings tried, alternately with and without trunks (the first two in the items' own order); the best
#: is kept. Each costs a few ms on a layer.
RUNS = 16
#: Renumberings tried for a trial of the ranks' widths.
TRIAL_RUNS = 2
#: Fewer renumberings for larger views: at most this many divided by the edges' total length in ranks.
BIG = 4000
#: Most rounds of :func:`_improve` over every rank.
SWEEPS = 4


@dataclass
class Order:
    """Each vertex's rank (items first, then one dummy vertex per rank an edge skips), each edge's chain of
    vertices from source to target, each rank's vertices left to right, and the crossings of that order."""

    rank: list[int]
    chains: list[list[int]]
    rows: list[list[int]]
    crossings: int
    #: Each vertex's cluster (an opened group; a dummy takes it when its edge joins two of its members), or None.
    clusters: list[str | None] | None = None


def order(n: int, edges: Sequence[tuple[int, int]], ranks: Sequence[int], exact: bool = True,
          clusters: Sequence[str | None] | None = None, flip: bool = True) -> Order:
    """The order with the fewest crossings for items ranked ``ranks``: the heuristic's, then (with ``exact``,
    where crossings are left and the view is small) the exact one (:func:`~workbench.graph.exact.exact_rows`).
    Without ``exact`` (a trial of how wide some ranks come out) the heuristic makes fewer tries. Each of
    ``clusters`` (a name per item, or None) stays side by side in every rank (its box holds nothing else);
    with ``flip`` an edge passing one may be moved to its other side (:func:`_flip_sides`)."""
    runs = RUNS if exact else TRIAL_RUNS
    if exact and not any(c is not None for c in clusters or ()):  # the exact order needs only a start: one
        rank, chains = dummies(n, edges, ranks, trunks=False)  # heuristic try per kind of dummy (with clusters,
        runs = 2 if solvable(rank, _weighted(rank, chains)) else runs  # it keeps the order outside them)
    rnd = random.Random(0)
    best: Order | None = None
    runs = max(2, min(runs, BIG // max(1, len(edges) + sum(ranks[v] - ranks[u] for u, v in edges))))
    for t in range(runs):
        rank, chains = dummies(n, edges, ranks, trunks=t % 2 == 0)
        links = _links(chains)
        perm = list(range(len(rank))) if t < 2 else rnd.sample(range(len(rank)), len(rank))
        found = Order(rank, chains, _igraph_rows(rank, links, perm), 0, _clusters(n, chains, clusters, len(rank)))
        if found.clusters is not None:
            found.rows = [_contiguous(row, found.clusters) for row in found.rows]
        _improve(found)
        found.crossings = count(found)
        if best is None or found.crossings < best.crossings:
            best = found
        if best.crossings == 0:
            break
    assert best is not None
    if best.crossings and exact:  # the exact order, where the view is small: from the best order found, and
        rank, chains = dummies(n, edges, ranks, trunks=False)  # with a dummy per edge (lanes of one source
        cl = _clusters(n, chains, clusters, len(rank))  # side by side are drawn as one anyway)
        starts = [best] if chains == best.chains else [best, Order(rank, chains, [
            _contiguous(row, cl) if cl is not None else row for row in _igraph_rows(rank, _links(chains), list(
                range(len(rank))))], 0, cl)]
        for start in starts:
            if start.clusters is not None and flip:  # which side of a cluster an edge passing it runs on
                start = _flip_sides(start)
                best = start if start.crossings < best.crossings else best
            # without clusters one program; with them, the inside and the outside of the clusters in turn
            for part in ("inside", "outside", "inside") if start.clusters is not None else ("all",):
                found = exact_rows(start.rank, _weighted(start.rank, start.chains), start.rows, start.clusters, part)
                if found is not None:
                    start = Order(start.rank, start.chains, found[0], 0, start.clusters)
                    start.crossings = count(start)
                    best = start if start.crossings < best.crossings else best
    return best


def _flip_sides(o: Order) -> Order:
    """``o`` with each long edge that passes a cluster moved to the cluster's other side, in every rank it
    passes it, where that removes crossings (one edge at a time, as long as one does)."""
    cl = o.clusters
    assert cl is not None
    best = Order(o.rank, o.chains, [list(row) for row in o.rows], count(o), cl)
    for chain in sorted(o.chains, key=len, reverse=True):
        passing = [d for d in chain[1:-1] if cl[d] is None]
        if not passing:
            continue
        rows = [list(row) for row in best.rows]
        moved = False
        for d in passing:
            row = rows[o.rank[d]]
            at = [j for j, k in enumerate(row) if cl[k] is not None]
            if not at:
                continue
            row.remove(d)
            at = [j for j, k in enumerate(row) if cl[k] is not None]
            left_side = best.rows[o.rank[d]].index(d) < min(best.rows[o.rank[d]].index(row[j]) for j in at)
            row.insert(at[-1] + 1 if left_side else at[0], d)
            moved = True
        if moved:
            tried = Order(o.rank, o.chains, rows, 0, cl)
            tried.crossings = count(tried)
            if tried.crossings < best.crossings:
                best = tried
    return best


def _clusters(n: int, chains: list[list[int]], clusters: Sequence[str | None] | None,
              m: int) -> list[str | None] | None:
    """Each vertex's cluster: the items' own, and a dummy's where its edge joins two members of one cluster."""
    if clusters is None or all(c is None for c in clusters):
        return None
    cl: list[str | None] = list(clusters) + [None] * (m - n)
    inside: dict[int, set[str | None]] = {}  # a trunk's dummy is inside only if every edge along it is
    for chain in chains:
        c = clusters[chain[0]] if clusters[chain[0]] == clusters[chain[-1]] else None
        for d in chain[1:-1]:
            inside.setdefault(d, set()).add(c)
    for d, cs in inside.items():
        cl[d] = cs.pop() if len(cs) == 1 else None
    return cl


def _contiguous(row: list[int], cl: Sequence[str | None]) -> list[int]:
    """``row`` reordered so each cluster's vertices are side by side, at the mean place of its members."""
    where: dict[str, list[int]] = {}
    for j, k in enumerate(row):
        if cl[k] is not None:
            where.setdefault(cl[k], []).append(j)
    centre = {c: sum(js) / len(js) for c, js in where.items()}
    return [k for _, k in sorted(((centre[cl[k]] if cl[k] is not None else j, j), k) for j, k in enumerate(row))]


def _weighted(rank: list[int], chains: list[list[int]]) -> list[tuple[int, int, int]]:
    """Each link (upper vertex, lower vertex) with the number of edges along it."""
    weights: dict[tuple[int, int], int] = {}
    for a, b in (link for chain in chains for link in zip(chain, chain[1:])):
        lo, hi = (a, b) if rank[a] < rank[b] else (b, a)
        weights[lo, hi] = weights.get((lo, hi), 0) + 1
    return [(a, b, w) for (a, b), w in weights.items()]


def _links(chains: list[list[int]]) -> list[tuple[int, int]]:
    return sorted({(a, b) for chain in chains for a, b in zip(chain, chain[1:])})


def dummies(n: int, edges: Sequence[tuple[int, int]], ranks: Sequence[int],
            trunks: bool = True) -> tuple[list[int], list[list[int]]]:
    """A dummy vertex on each rank an edge skips, and each edge's chain of vertices. With ``trunks`` the edges
    going down from one item share one dummy per rank (a trunk, drawn as one lane, that each edge leaves
    above its target); else (and an edge going up) each edge has dummies of its own."""
    rank = list(ranks)
    trunk: dict[tuple[int, int], int] = {}
    chains: list[list[int]] = []
    for u, v in edges:
        step = 1 if rank[v] > rank[u] else -1
        chain = [u]
        for r in range(ranks[u] + step, ranks[v], step):
            key = (u, r) if step > 0 and trunks else (-1 - len(chains), r)
            if key not in trunk:
                trunk[key] = len(rank)
                rank.append(r)
            chain.append(trunk[key])
        chains.append(chain + [v])
    return rank, chains


def _igraph_rows(rank: list[int], links: list[tuple[int, int]], perm: list[int]) -> list[list[int]]:
    """igraph's Sugiyama order of each rank (every link joins two consecutive ranks), with the vertices
    numbered ``perm`` (vertex ``perm[i]`` is igraph's vertex ``i``)."""
    import igraph  # lazy: importing it pulls in its plotly drawing module, which the compute layers never need

    new = {old: i for i, old in enumerate(perm)}
    g = igraph.Graph(n=len(rank), edges=[(new[a], new[b]) for a, b in links], directed=True)
    lay = g.layout_sugiyama(layers=[rank[old] for old in perm], hgap=1, vgap=1, maxiter=100)
    pos = [0.0] * len(rank)
    coords = lay.coords  # built anew on each access
    for i, old in enumerate(perm):
        pos[old] = coords[i][0]
    rows: list[list[int]] = [[] for _ in range(max(rank) + 1)]
    for k in sorted(range(len(rank)), key=lambda k: pos[k]):
        rows[rank[k]].append(k)
    return rows


def _neighbours(o: Order) -> tuple[dict[int, list[int]], dict[int, list[int]]]:
    up: dict[int, list[int]] = {}
    down: dict[int, list[int]] = {}
    for a, b in (link for chain in o.chains for link in zip(chain, chain[1:])):  # a trunk once per edge on it
        lo, hi = (a, b) if o.rank[a] < o.rank[b] else (b, a)
        down.setdefault(lo, []).append(hi)
        up.setdefault(hi, []).append(lo)
    return up, down


def _improve(o: Order) -> None:
    """Move single vertices within their rank while that removes crossings with the ranks above and below:
    sifting (each vertex tried at every place of its rank) and Graphviz's transpose (neighbours exchanged)."""
    up, down = _neighbours(o)
    where = {k: i for row in o.rows for i, k in enumerate(row)}
    for _ in range(SWEEPS):
        moved = False
        for row in o.rows:
            if len(row) < 2:
                continue
            cost = _pair_costs(row, up, down, where)
            degree = {k: len(up.get(k, ())) + len(down.get(k, ())) for k in row}
            for v in sorted(row, key=lambda k: -degree[k]):
                rest = [k for k in row if k != v]
                here = [sum(cost[v, k] for k in rest)]  # v at place j: right of rest[:j], left of rest[j:]
                for k in rest:
                    here.append(here[-1] - cost[v, k] + cost[k, v])
                at = row.index(v)
                places = _places(rest, v, o.clusters) if o.clusters is not None else range(len(here))
                j = min(places, key=lambda i: (here[i], i != at))
                if j != at:
                    row[:] = rest[:j] + [v] + rest[j:]
                    moved = True
            for i in range(len(row) - 1):
                a, b = row[i], row[i + 1]
                if cost[b, a] < cost[a, b] and (o.clusters is None or o.clusters[a] == o.clusters[b]):
                    row[i], row[i + 1] = b, a
                    moved = True
            where.update({k: i for i, k in enumerate(row)})
        if not moved:
            break


def _pair_costs(row: list[int], up: dict[int, list[int]], down: dict[int, list[int]],
                where: dict[int, int]) -> dict[tuple[int, int], int]:
    """Crossings between the edges of ``a`` and ``b`` of ``row`` with ``a`` left of ``b``, for every pair (the
    other ranks stay put): the neighbours of ``a`` at each place times those of ``b`` at places before it."""
    index = {k: i for i, k in enumerate(row)}
    total = np.zeros((len(row), len(row)), dtype=np.int64)
    for nb in (up, down):
        width = 1 + max((where[p] for k in row for p in nb.get(k, ())), default=0)
        at = np.zeros((len(row), width + 1), dtype=np.int64)
        for k in row:
            for p in nb.get(k, ()):
                at[index[k], where[p]] += 1
        before = np.cumsum(at, axis=1) - at  # neighbours at places before each place
        total += at @ before.T
    return {(a, b): int(total[index[a], index[b]]) for a in row for b in row if a != b}


def _places(rest: list[int], v: int, cl: Sequence[str | None]) -> list[int]:
    """Where ``v`` may go in ``rest`` keeping every cluster side by side: among its own cluster's members, or
    (outside every cluster) anywhere but between two members of one."""
    if cl[v] is not None:
        own = [i for i, k in enumerate(rest) if cl[k] == cl[v]]
        return list(range(own[0], own[-1] + 2)) if own else list(range(len(rest) + 1))
    return [j for j in range(len(rest) + 1)
            if not (0 < j < len(rest) and cl[rest[j - 1]] is not None and cl[rest[j - 1]] == cl[rest[j]])]


def count(o: Order) -> int:
    """Pairs of edge segments between two consecutive ranks whose ends are in opposite order (segments that
    share an end do not cross)."""
    where = {k: i for row in o.rows for i, k in enumerate(row)}
    by_rank: dict[int, list[tuple[int, int]]] = {}
    for a, b in (link for chain in o.chains for link in zip(chain, chain[1:])):
        lo, hi = (a, b) if o.rank[a] < o.rank[b] else (b, a)
        by_rank.setdefault(o.rank[lo], []).append((where[lo], where[hi]))
    total = 0
    for segs in by_rank.values():
        segs.sort()
        for i, (a1, b1) in enumerate(segs):
            total += sum(1 for a2, b2 in segs[i + 1:] if a2 > a1 and b2 < b1)
    return total


__all__ = ["Order", "RUNS", "count", "order"]
