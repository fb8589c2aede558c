"""The ``tuned`` variant inside a tune: one checked plan per workload, its graph per workload, and the check at the end.

A tune serves two workloads, and what each fusion buys differs between them (each sentence alone at batch 1;
the corpus in padded batches at the throughput search's batch), so :func:`machine_plans` measures a plan on each
(:func:`.plan.machine_plan`, checked against the unfused graph and the full plan there). The ``tuned`` variant is
then one graph per workload: :class:`TunedGraphs` keeps it where it is a graph of its own and says which variant
it is where it is the same graph (the full plan is ``fused``; the unfused graph is ``unfused``). After the
interleaved runs, :func:`final_checks` applies :func:`.check.decide` once more to those runs (what a busy
ablation got wrong), and a plan that loses there is not shipped for that workload.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .check import FULL, TUNED, UNFUSED, PlanCheck, decide, round_ratio
from .plan import WorkloadPlan, machine_plan
from .served import Workload

#: The variants the tuned graph is checked against, and the check's names for them.
AGAINST = {"fused": FULL, "unfused": UNFUSED}


def workload_for(kind: str, src, sentences, has_text: bool, cfg) -> Workload:
    """The workload a tune's ``kind`` serves: its sentences (all of them: search and check part) as the tune times
    them, or, for a model without a tokenizer, ``cfg``'s shape."""
    if not has_text:
        return Workload.shape(cfg.batch, cfg.seq)
    return Workload.of_text(kind, sentences, "the tune's text")


def machine_plans(src, export_path, plan, cfg, loads, sentences, has_text: bool, runs: int, exporter: str,
                  attention: str, say) -> dict[str, WorkloadPlan]:
    """This machine's checked plan for each workload of the tune (cached, see :func:`.plan.machine_plan`)."""
    out = {}
    for i, kind in enumerate(loads):
        w = workload_for(kind, src, sentences, has_text, cfg)
        out[kind] = machine_plan(src, export_path, plan, threads=cfg.threads, runs=runs, exporter=exporter,
                                 attention=attention, workload=w, provider=cfg.provider,
                                 progress=lambda s, f, i=i, k=kind: say(f"this machine's plan ({k}): {s}",
                                                                        0.05 + 0.2 * (i + f) / len(loads)))
    return out


def _graph(v) -> tuple:
    return str(v.model), v.level, tuple(v.disabled_optimizers)


@dataclass
class TunedGraphs:
    """The tuned variant per workload: ``variants`` where it is a graph of its own, ``same_as`` (workload →
    "fused" or "unfused") where it is one of theirs, and the final check per workload once run."""

    variants: dict = field(default_factory=dict)
    same_as: dict = field(default_factory=dict)
    final: dict = field(default_factory=dict)

    @classmethod
    def of(cls, tuned: dict, others: list) -> "TunedGraphs":
        """From the tuned variant built per workload and the other variants (``fused``, ``unfused``)."""
        by = {_graph(v): v.name for v in others if v.name in AGAINST}
        t = cls()
        for w, v in tuned.items():
            if _graph(v) in by:
                t.same_as[w] = by[_graph(v)]
            else:
                t.variants[w] = v
        return t

    def for_workload(self, vs: list, workload: str) -> list:
        """``vs`` with the tuned graph of ``workload`` where it is one of its own (and still shipped)."""
        v = self.variants.get(workload)
        kept = v is not None and (workload not in self.final or self.final[workload].ships == TUNED)
        return [*vs, v] if kept else list(vs)

    def dropped(self, workload: str) -> bool:
        """The final check found this workload's plan slower: the tuned graph is not shipped for it."""
        c = self.final.get(workload)
        return c is not None and c.ships != TUNED

    def shipped_plan(self, workload: str, p: WorkloadPlan):
        """The fusion plan the tuned variant ships for ``workload`` after the final check (None: unfused)."""
        if not self.dropped(workload):
            return p.shipped_plan
        return p.base if self.final[workload].ships == FULL else None

    def to_json(self, plans: dict) -> dict:
        """Per workload: the plan (its check after the ablation), what the tuned variant is, the final check."""
        out = {}
        for w, p in plans.items():
            d = {k: v for k, v in p.to_dict().items() if k != "ablation"}
            d["tuned_is"] = self.same_as.get(w) or ("tuned" if not self.dropped(w) else
                                                    {FULL: "fused", UNFUSED: "unfused"}[self.final[w].ships])
            d["final_check"] = self.final[w].to_dict() if w in self.final else None
            out[w] = d
        return out


def _speed(samples: dict, name: str) -> float | None:
    """``name``'s speed against the unfused graph in one interleaved run (round by round)."""
    if name not in samples or "unfused" not in samples:
        return None
    return round_ratio(samples["unfused"], samples[name])


def final_checks(t: TunedGraphs, plans: dict, lat_samples: dict, thr_samples: dict) -> None:
    """Decide, per workload where the tuned graph was measured, whether it ships (``t.final``): from the tune's
    own interleaved runs (``{name: [ms per run or pass]}``), with the workload's noise band from its ablation."""
    for w, samples in (("latency", lat_samples), ("throughput", thr_samples)):
        if w not in t.variants or not samples or "tuned" not in samples:
            continue
        p = plans[w]
        speed = {TUNED: _speed(samples, "tuned"), FULL: _speed(samples, "fused")}
        band = float((p.ablation or {}).get("noise_pct") or 1.0)
        t.final[w] = decide(speed, band, "in the tune's interleaved run at the end", p.workload.get("words", ""),
                            p.check.plan_words)


#: A row's fields that belong to each workload (copied when the tuned graph of that workload is another variant's).
_FIELDS = {"latency": ("p50_ms", "p90_ms", "p50_mode", "task_parity", "task_parity_search", "parity", "holds_batch1"),
           "throughput": ("sentences_per_s", "throughput_mode", "batch", "batch_search", "task_parity_batched",
                          "task_parity_batched_search", "holds_batched")}
_FIGURES = {"latency": ("p50_ms", "p90_ms", "runs"), "throughput": ("sentences_per_s",)}


def fill_row(tuned, rows: dict, t: TunedGraphs, loads) -> None:
    """Give the ``tuned`` row, in each workload where its graph is another variant's (the same file, or the one
    the final check ships instead), that variant's figures and answers, and say so in ``tuned.same_as``."""
    for w in loads:
        name = t.same_as.get(w) or ({FULL: "fused", UNFUSED: "unfused"}[t.final[w].ships] if t.dropped(w) else None)
        src = rows.get(name)
        if src is None:
            continue
        for f in _FIELDS[w]:
            setattr(tuned, f, getattr(src, f))
        for f in _FIGURES[w]:
            tuned.interleaved[f] = src.interleaved.get(f)
            if tuned.shipped is not None or src.shipped:
                tuned.shipped = {**(tuned.shipped or {}), f: (src.shipped or {}).get(f)}
        tuned.same_as[w] = name
    tuned.holds = bool(tuned.holds_batch1 and tuned.holds_batched)


def final_words(check: PlanCheck | None) -> str:
    """The one line a table or card prints under the figures when the final check dropped the tuned graph."""
    if check is None or check.ships == TUNED:
        return ""
    return f"tuned: {check.words()}"


__all__ = ["machine_plans", "workload_for", "TunedGraphs", "final_checks", "final_words", "fill_row", "AGAINST"]
