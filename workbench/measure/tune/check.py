"""The rule that keeps a tuned plan honest: never slower than the graphs it started from, on its workload.

This machine's plan comes from an ablation: each step switched off alone, its effect judged against a noise
band. Steps that hurt alone can help together, a busy minute can mislead one ablation, and a fused kernel
can lose to the unfused graph at the shapes a user serves. So the plan is measured once more against the
unfused graph and the full plan, interleaved, on the same workload, and :func:`decide` keeps it only when it
runs at least as fast as the faster of the two, within :func:`tolerance_pct`; otherwise the faster of them
is what ships, and :meth:`PlanCheck.words` says why. ``tune`` applies the same rule once more to its own
interleaved run at the end (what a busy ablation got wrong), the app and ``workbench bench``'s ``tuned``
variant use the checked plan.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass

TUNED, FULL, UNFUSED = "tuned", "full plan", "unfused"
#: What each graph is called in a sentence.
NAMES = {TUNED: "this machine's plan", FULL: "the full plan", UNFUSED: "the unfused graph"}
#: The most a kept plan may trail the faster of the others, in percent, however wide the noise band.
MAX_TOLERANCE_PCT = 2.0


def tolerance_pct(band_pct: float) -> float:
    """How far behind the best graph a plan may measure and still count as "as fast": the noise band, at most
    :data:`MAX_TOLERANCE_PCT` (so a shipped plan is never more than 2% behind what it replaced)."""
    return min(max(float(band_pct or 0.0), 0.0), MAX_TOLERANCE_PCT)


def round_ratio(slower_ms: list[float], faster_ms: list[float]) -> float | None:
    """How many times longer the first ran than the second: the median of the ratios within each round (run i of
    each falls in the same interleaved round, so load that comes and goes cancels); None without runs."""
    pairs = [a / b for a, b in zip(slower_ms, faster_ms) if a and b]
    return statistics.median(pairs) if pairs else None


@dataclass(frozen=True)
class PlanCheck:
    """Which graph a workload ships and why.

    Attributes:
        ships: :data:`TUNED`, :data:`FULL` or :data:`UNFUSED`.
        speed: each graph's speed against the unfused graph (1.0; 1.10 = 10% more work done per second),
            measured round by round in one interleaved run.
        tolerance_pct: how far behind the best a kept graph may be (:func:`tolerance_pct`).
        measured: where the figures come from ("in the ablation", "in a check after the ablation", ...).
        workload: the workload's words.
        plan_words: what this machine's plan changes ("switch off skip_layer_norm"; "" when it is the full plan).
    """

    ships: str
    speed: dict
    tolerance_pct: float
    measured: str
    workload: str = ""
    plan_words: str = ""

    @property
    def kept(self) -> bool:
        """The tuned plan (or, when it is the full plan, the full plan) ships."""
        return self.ships == TUNED or (self.ships == FULL and TUNED not in self.speed)

    def words(self) -> str:
        """One sentence: what ran how fast, and what ships."""
        s = self.speed
        figs = ", ".join(f"{NAMES[g]} {s[g]:.2f}x" for g in (TUNED, FULL) if g in s)
        head = f"against the unfused graph, {figs} on {self.workload or 'this workload'} ({self.measured})"
        plan = f" ({self.plan_words})" if self.plan_words else ""
        if self.ships == TUNED:
            return f"{head}: this machine's plan{plan} is kept"
        if TUNED in s:
            return (f"{head}: this machine's plan{plan} trails the faster of the two by more than "
                    f"{self.tolerance_pct:.1f}%, so {NAMES[self.ships]} ships instead")
        if self.ships == FULL:
            return f"{head}: the full plan is kept"
        return (f"{head}: the fused graph trails the unfused graph by more than {self.tolerance_pct:.1f}%, so the "
                f"unfused graph ships for this workload (fusion costs time here)")

    def to_dict(self) -> dict:
        return {**asdict(self), "kept": self.kept, "words": self.words()}

    @classmethod
    def from_dict(cls, d: dict | None) -> "PlanCheck | None":
        if not d:
            return None
        return cls(d["ships"], dict(d["speed"]), float(d["tolerance_pct"]), d["measured"], d.get("workload", ""),
                   d.get("plan_words", ""))


def decide(speed: dict, band_pct: float, measured: str, workload: str = "", plan_words: str = "") -> PlanCheck:
    """The graph to ship from ``speed`` (graph → speed against the unfused graph; :data:`UNFUSED` is 1.0 and
    may be left out): the tuned plan when it is within the tolerance of the fastest, else the full plan when it
    is, else the unfused graph."""
    speed = {UNFUSED: 1.0, **{k: float(v) for k, v in speed.items() if v}}
    tol = tolerance_pct(band_pct)
    best = max(speed.values())
    ships = next(g for g in (TUNED, FULL, UNFUSED) if g in speed and speed[g] >= best * (1 - tol / 100))
    return PlanCheck(ships, {k: round(v, 4) for k, v in speed.items()}, tol, measured, workload, plan_words)


__all__ = ["PlanCheck", "decide", "tolerance_pct", "round_ratio", "TUNED", "FULL", "UNFUSED", "NAMES",
           "MAX_TOLERANCE_PCT"]
