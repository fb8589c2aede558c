"""An opened group's column in a layered drawing: its members moved into one column, what passes it beside it.

Pure geometry on the x of every vertex of a ranked, ordered drawing (:mod:`workbench.graph.layered`): the
order (:mod:`workbench.graph.ordering`) keeps each group's vertices side by side in every rank, so each
group gets a column of its own, as wide as its widest rank, and everything else in its ranks goes to the
side the order puts it on.
"""

from __future__ import annotations

from typing import Sequence


def clear_boxes(x: list[float], rows: list[list[int]], rank: list[int], cl: Sequence[str | None],
                left: list[float], right: list[float], n: int, width: float | None, source: Sequence[int],
                gap: float) -> None:
    """Give each cluster a column of its own: its vertices of each rank moved inside one interval (as wide as
    its widest rank, beside the columns given before), then everything else in the ranks it spans moved out
    of it, to the side the rank's order puts it on (edges passing by run outside the box)."""
    placed: list[tuple[float, float, int, int, str]] = []  # x0, x1, first and last rank, cluster
    for c in dict.fromkeys(k for k in cl if k is not None):
        span: dict[int, list[int]] = {}
        for k, ck in enumerate(cl):
            if ck == c:
                span.setdefault(rank[k], []).append(k)
        ext = {r: (min(x[k] - left[k] for k in ks), max(x[k] + right[k] for k in ks)) for r, ks in span.items()}
        wide = max(b - a for a, b in ext.values())
        mids = sorted((a + b) / 2 for a, b in ext.values())
        x0 = mids[len(mids) // 2] - wide / 2
        if width:  # room beside the column for what each rank's order puts left and right of it
            need = [_beside(rows[r], cl, c, left, right, source, n, gap) for r in span]
            lo, hi = max(a for a, _ in need), width - wide - max(b for _, b in need)
            x0 = min(max(x0, lo), hi) if lo <= hi else (lo + hi) / 2
        for p0, p1, r0, r1, _ in sorted(placed, key=lambda p: abs((p[0] + p[1]) / 2 - x0 - wide / 2)):
            if r0 <= max(span) and min(span) <= r1 and x0 < p1 + gap and p0 - gap < x0 + wide:
                x0 = p1 + 2 * gap if x0 + wide / 2 > (p0 + p1) / 2 else p0 - 2 * gap - wide  # beside, not over
        placed.append((x0, x0 + wide, min(span), max(span), c))
        for r, ks in span.items():
            shift = max(x0 - ext[r][0], min(0.0, x0 + wide - ext[r][1]))
            for k in ks:
                x[k] += shift
    _outside(x, rows, cl, left, right, n, width, source, gap, {c: (a, b) for a, b, _, _, c in placed})


def _outside(x: list[float], rows: list[list[int]], cl: Sequence[str | None], left: list[float],
             right: list[float], n: int, width: float | None, source: Sequence[int], gap: float,
             walls: dict[str, tuple[float, float]]) -> None:
    """The rest of each rank outside the columns (``walls``), in the rank's order, which keeps each cluster
    side by side; one source's lanes side by side are one line."""
    for row in rows:
        units = _lanes(row, source, n)
        floor, ceiling = [float("-inf")] * len(units), [float("inf")] * len(units)
        for j, unit in enumerate(units):
            c = cl[unit[0]]
            if c is not None:
                a, b = walls[c]
                for i in range(len(units)):
                    if cl[units[i][0]] != c:
                        ceiling[i] = min(ceiling[i], a - gap) if i < j else ceiling[i]
                        floor[i] = max(floor[i], b + gap) if i > j else floor[i]
        order = list(range(len(units)))
        edge = float("-inf")
        for j in order:  # left to right: past the walls and the boxes before
            k = units[j][0]
            if cl[k] is None:
                x[k] = max(x[k], floor[j] + left[k], edge + gap + left[k])
            edge = x[k] + right[k]
        edge = width + gap if width else float("inf")  # within the picture where there is room
        for j in reversed(order):  # right to left: before the walls and the boxes after
            k = units[j][0]
            if cl[k] is None:
                x[k] = min(x[k], ceiling[j] - right[k], edge - gap - right[k])
            edge = x[k] - left[k]
        edge = float("-inf")
        for unit in units:  # where there was no room, apart again (wider than the picture: another split is tried)
            k = unit[0]
            x[k] = max(x[k], edge + gap + left[k]) if cl[k] is None else x[k]
            edge = x[k] + right[k]
            for d in unit[1:]:
                x[d] = x[k]


def _lanes(row: list[int], source: Sequence[int], n: int) -> list[list[int]]:
    """``row`` in runs: the dummy vertices of one source side by side make one run (one lane), else one each."""
    units: list[list[int]] = []
    for k in row:
        if units and k >= n and units[-1][-1] >= n and source[units[-1][-1]] == source[k]:
            units[-1].append(k)
        else:
            units.append([k])
    return units


def _beside(row: list[int], cl: Sequence[str | None], c: str, left: list[float], right: list[float],
            source: Sequence[int], n: int, gap: float) -> tuple[float, float]:
    """The room the items of ``row`` before and after cluster ``c``'s members take, with their gaps."""
    units = _lanes(row, source, n)
    at = [j for j, unit in enumerate(units) if cl[unit[0]] == c]
    if not at:
        return 0.0, 0.0
    room = [left[unit[0]] + right[unit[0]] + gap for unit in units]
    return sum(room[:at[0]]), sum(room[at[-1] + 1:])


__all__ = ["clear_boxes"]
