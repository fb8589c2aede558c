"""The fewest crossings an order of fixed ranks can have, found as an integer program solved by HiGHS.

For small views (a layer, the whole model collapsed) the crossing-minimal order of every rank at once is an
integer program small enough to solve in a fraction of a second: one 0/1 variable per pair of vertices in a
rank (which is left), transitivity on every triple, and one variable per pair of edge segments between two
ranks that is 1 where their ends are in opposite order (Jünger and Mutzel's formulation). HiGHS (``highspy``:
wheels on every platform) solves it, started from the heuristic's order; its node limit keeps the result the
same on every machine. Without ``highspy``, or for a view too large, the heuristic's order stands.
"""

from __future__ import annotations

import importlib.util
from itertools import combinations
from typing import Sequence

#: Views with more pairs of edge segments that could cross than this are left to the heuristic.
MAX_PAIRS = 500
#: Branch-and-bound nodes HiGHS may explore (a deterministic bound; the best order found so far is kept).
MAX_NODES = 500
#: A safety bound on the solver's time, seconds (on a normal machine the node limit comes first).
MAX_SECONDS = 1.0


def exact_rows(rank: list[int], links: list[tuple[int, int, int]], rows: list[list[int]],
               clusters: Sequence[str | None] | None = None,
               part: str = "inside") -> tuple[list[list[int]], int] | None:
    """The crossing-minimal rows for vertices ranked ``rank`` joined by ``links`` (upper vertex, lower vertex,
    how many edges run along it), starting from ``rows``, each of ``clusters`` (a name per vertex, or None)
    kept side by side in every rank; with the program's crossings. With clusters only one ``part`` of the
    order is solved, the rest kept as in ``rows``: "inside" each cluster, or "outside" them (what sits on one
    side of every cluster in its rank). None when the program is too large, or HiGHS is not installed."""
    if importlib.util.find_spec("highspy") is None:
        return None
    import highspy  # lazy: only views with crossings left after the heuristic need the solver

    where = {k: i for row in rows for i, k in enumerate(row)}
    # With clusters the whole program (kept side by side by constraints) is slow to solve even when small:
    # the order inside the clusters is solved with the rest kept, then the rest with the inside kept.
    program = _Program(rows, where, clusters, part=part if clusters is not None else "all")
    if not program.var or program.pairs(rank, links) > MAX_PAIRS:
        return None
    found = _solve(highspy, *program.build(rank, links, highspy.kHighsInf), len(program.var), program.start())
    if found is None:
        return None
    value, x = found
    return [sorted(row, key=lambda k: sum(1 for o in row if o != k and program.is_left(x, o, k)))
            for row in rows], int(round(value + program.offset))


class _Program:
    """The integer program over the rows' pair orders: a 0/1 variable per free pair (``a`` left of ``b``), a
    constant (the order of the rows given) for the others. Free: every pair of a rank ("all"), the pairs of one
    cluster ("inside"), or the pairs outside every cluster on the same side of each ("outside"); so each
    cluster stays side by side."""

    def __init__(self, rows: list[list[int]], where: dict[int, int], clusters, part: str):
        self.rows, self.where, self.cl = rows, where, clusters
        self.var: dict[tuple[int, int], int] = {}
        for row in rows:
            members = [where[k] for k in row if clusters is not None and clusters[k] is not None]
            for a, b in combinations(sorted(row), 2):
                if part == "all" or (part == "inside" and clusters[a] is not None and clusters[a] == clusters[b]) or (
                        part == "outside" and clusters[a] is None and clusters[b] is None
                        and all((where[a] < m) == (where[b] < m) for m in members)):
                    self.var[a, b] = len(self.var)
        self.offset = 0.0

    def left(self, a: int, b: int) -> tuple[int | None, float, float]:
        """"a left of b" as coef * x[i] + const (i None: a constant)."""
        if (a, b) in self.var:
            return self.var[a, b], 1.0, 0.0
        if (b, a) in self.var:
            return self.var[b, a], -1.0, 1.0
        return None, 0.0, float(self.where[a] < self.where[b])

    def is_left(self, x: list[float], a: int, b: int) -> bool:
        i, coef, const = self.left(a, b)
        return (coef * x[i] + const if i is not None else const) > 0.5

    def start(self) -> list[float]:
        return [float(self.where[a] < self.where[b]) for a, b in self.var] + self._z_start

    def pairs(self, rank: list[int], links: list[tuple[int, int, int]]) -> int:
        """How many pairs of links could cross and depend on a variable."""
        self._pairs = [(s, t) for s, t in _pairs(rank, links)
                       if self.left(s[0], t[0])[0] is not None or self.left(s[1], t[1])[0] is not None]
        return len(self._pairs)

    def build(self, rank, links, inf: float) -> tuple[list[float], list[tuple[dict[int, float], float, float]]]:
        """Costs and constraints: transitivity, and each pair's crossing."""
        cost, cons, self._z_start = [0.0] * len(self.var), [], []
        for row in self.rows:
            for a, b, c in combinations(sorted(row), 3):
                if (a, b) in self.var and (b, c) in self.var and (a, c) in self.var:
                    cons.append(({self.var[a, b]: 1.0, self.var[b, c]: 1.0, self.var[a, c]: -1.0}, 0.0, 1.0))
        for (a, b, w1), (c, d, w2) in self._pairs:
            (i, si, ci), (j, sj, cj) = self.left(a, c), self.left(b, d)
            if i is None or j is None:  # crossing = |x - k|: linear in the one variable
                (v, sv, cv), k = ((j, sj, cj), ci) if i is None else ((i, si, ci), cj)
                sign = 1.0 if k < 0.5 else -1.0  # crossing = x' (k = 0) or 1 - x' (k = 1), x' = sv * x + cv
                cost[v] += sign * sv * w1 * w2
                self.offset += (sign * cv + (1.0 if k > 0.5 else 0.0)) * w1 * w2
                continue
            z = len(cost)
            cost.append(float(w1 * w2))
            for sign in (1.0, -1.0):  # z >= +-(left(a, c) - left(b, d))
                coef = {z: 1.0}
                coef[i] = coef.get(i, 0.0) - sign * si
                coef[j] = coef.get(j, 0.0) + sign * sj
                cons.append((coef, sign * (ci - cj), inf))
            self._z_start.append(float((self.where[a] < self.where[c]) != (self.where[b] < self.where[d])))
        return cost, cons


def solvable(rank: list[int], links: list[tuple[int, int, int]]) -> bool:
    """Whether :func:`exact_rows` takes on this view (small enough, and HiGHS installed)."""
    return 0 < len(_pairs(rank, links)) <= MAX_PAIRS and importlib.util.find_spec("highspy") is not None


def _pairs(rank: list[int], links: list[tuple[int, int, int]]) -> list[tuple[tuple[int, int, int], ...]]:
    """The pairs of links between the same two ranks that could cross (no shared end)."""
    return [(s, t) for r_links in _by_gap(rank, links).values() for s, t in combinations(r_links, 2)
            if s[0] != t[0] and s[1] != t[1]]


def _by_gap(rank: list[int], links: list[tuple[int, int, int]]) -> dict[int, list[tuple[int, int, int]]]:
    out: dict[int, list[tuple[int, int, int]]] = {}
    for a, b, w in links:
        out.setdefault(rank[a], []).append((a, b, w))
    return out


def _solve(highspy, cost: list[float], cons, n_binary: int, start: list[float]) -> tuple[float, list[float]] | None:
    """Minimise ``cost`` over 0/1 variables (the first ``n_binary`` integral) under ``cons`` from ``start``."""
    # HiGHS's own class: highspy's wrapper prints a banner on stdout the first time one is made in a process.
    h = getattr(getattr(highspy, "_core", None), "_Highs", highspy.Highs)()
    # Crossings are whole numbers: a bound within one of the best order found proves it optimal.
    for key, value in (("output_flag", False), ("mip_max_nodes", MAX_NODES), ("time_limit", MAX_SECONDS),
                       ("threads", 1), ("mip_abs_gap", 0.999), ("presolve", "off")):  # presolve: slower here
        h.setOptionValue(key, value)
    n = len(cost)
    h.addCols(n, cost, [0.0] * n, [1.0] * n, 0, [], [], [])
    h.changeColsIntegrality(n_binary, list(range(n_binary)), [highspy.HighsVarType.kInteger] * n_binary)
    starts, index, value, lower, upper = [], [], [], [], []
    for coef, lo, hi in cons:
        starts.append(len(index))
        index += list(coef)
        value += list(coef.values())
        lower.append(lo)
        upper.append(hi)
    h.addRows(len(cons), lower, upper, len(index), starts, index, value)
    sol = highspy.HighsSolution()
    sol.col_value = start
    h.setSolution(sol)
    h.run()
    info = h.getInfo()
    if info.primal_solution_status != 2:  # no feasible order found (2: feasible)
        return None
    return info.objective_function_value, list(h.getSolution().col_value)


__all__ = ["MAX_NODES", "MAX_PAIRS", "exact_rows", "solvable"]
