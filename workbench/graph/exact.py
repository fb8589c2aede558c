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
               clusters: Sequence[str | None] | None = None) -> tuple[list[list[int]], int] | None:
    """The crossing-minimal rows for vertices ranked ``rank`` joined by ``links`` (upper vertex, lower vertex,
    how many edges run along it), starting from ``rows``, each of ``clusters`` (a name per vertex, or None)
    kept side by side in every rank; with their crossings. None when the view is too large or HiGHS is not
    installed."""
    pairs = _pairs(rank, links)
    if not pairs or len(pairs) > MAX_PAIRS:
        return None
    try:
        import highspy  # lazy: only views with crossings left after the heuristic need the solver
    except ImportError:
        return None
    var: dict[tuple[int, int], int] = {}
    for row in rows:
        for a, b in combinations(sorted(row), 2):
            var[a, b] = len(var)
    where = {k: i for row in rows for i, k in enumerate(row)}

    def left(a: int, b: int) -> tuple[int, float, float]:  # "a left of b" = coef * x + const
        return (var[a, b], 1.0, 0.0) if (a, b) in var else (var[b, a], -1.0, 1.0)

    cons: list[tuple[dict[int, float], float, float]] = []
    for row in rows:
        for a, b, c in combinations(sorted(row), 3):
            cons.append(({var[a, b]: 1.0, var[b, c]: 1.0, var[a, c]: -1.0}, 0.0, 1.0))
    for row in rows if clusters is not None else ():  # nothing between two members of one cluster
        for c in {clusters[k] for k in row} - {None}:
            members = [k for k in row if clusters[k] == c]
            for e in (k for k in row if clusters[k] != c):
                for m1, m2 in zip(members, members[1:]):  # e on the same side of every member
                    (i, si, ci), (j, sj, cj) = left(e, m1), left(e, m2)
                    coef = {i: si}
                    coef[j] = coef.get(j, 0.0) - sj
                    cons.append((coef, cj - ci, cj - ci))
    cost = [0.0] * len(var)
    start = [float(where[a] < where[b]) for a, b in var]
    for (a, b, w1), (c, d, w2) in pairs:
        z = len(cost)
        cost.append(float(w1 * w2))
        (i, si, ci), (j, sj, cj) = left(a, c), left(b, d)
        for sign in (1.0, -1.0):  # z >= +-(left(a, c) - left(b, d))
            coef = {z: 1.0}
            coef[i] = coef.get(i, 0.0) - sign * si
            coef[j] = coef.get(j, 0.0) + sign * sj
            cons.append((coef, sign * (ci - cj), highspy.kHighsInf))
        start.append(float((where[a] < where[c]) != (where[b] < where[d])))
    found = _solve(highspy, cost, cons, len(var), start)
    if found is None:
        return None
    value, x = found
    out = [sorted(row, key=lambda k: sum(1 for o in row if o != k and _is_left(x, var, o, k))) for row in rows]
    return out, int(round(value))


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


def _is_left(x: list[float], var: dict[tuple[int, int], int], a: int, b: int) -> bool:
    return x[var[a, b]] > 0.5 if (a, b) in var else x[var[b, a]] < 0.5


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
