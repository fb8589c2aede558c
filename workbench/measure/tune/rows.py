"""The tune's table, typed (:mod:`.tune_result`): one row per variant, the recommendation per workload, why, and the peers.

Every figure names the mode it comes from (:data:`.labels.MODES`): ``p50_ms`` and ``sentences_per_s``
are the as-shipped figures where the variant was measured that way, else the interleaved ones; the
``interleaved`` and ``shipped`` dicts keep both.
"""

from __future__ import annotations

import statistics

import numpy as np

from ...ort.answer_policy import holds, random_weights_words
from ..harness.explain import INT8_UNITS
from ..variants import peers, recipe
from ..variants.labels import variant_label, workload_figure
from .result import Recommendation, TuneResult, VariantRow

#: What a user would pick instead, as its users ship it (the recipes marked ``peer``).
PEERS = peers()


def _median(xs) -> float | None:
    return float(statistics.median(xs)) if xs else None


def _pct(xs, q: float) -> float | None:
    return float(np.percentile(np.asarray(xs, dtype=np.float64), q)) if xs else None


def shipped_figures(s: dict | None) -> dict:
    """p50/p90 of the as-shipped latency slices, sentences/s of the throughput passes, peak memory."""
    if not s:
        return {}
    sps = s["sentences"] / _median(s["throughput_ms"]) * 1e3 if s.get("throughput_ms") else None
    return {"p50_ms": _median(s.get("latency_ms")), "p90_ms": _pct(s.get("latency_ms"), 90),
            "runs": len(s.get("latency_ms") or ()), "sentences_per_s": sps,
            "passes": len(s.get("throughput_ms") or ()), "peak_rss_mb": s.get("peak_rss_mb"),
            "providers": s.get("providers")}


def row(name: str, lat, thr: dict | None, shipped: dict | None, size_mb: float | None) -> VariantRow:
    """One variant: its figures in both modes, its answers at batch 1 and batched, whether they hold."""
    ship = shipped_figures(shipped)
    inter = {"p50_ms": lat.p50_ms if lat else None, "p90_ms": lat.p90_ms if lat else None,
             "runs": lat.runs if lat else 0, "sentences_per_s": (thr or {}).get("sentences_per_s")}
    parts = (lat.task_parity_parts if lat else None) or {}
    bparts = (thr or {}).get("task_parity_parts") or {}
    tp, tpb = (lat.task_parity if lat else None), (thr or {}).get("task_parity")
    ref = lat is not None and lat.parity is None
    ok1, okb = ref or holds(tp), ref or thr is None or holds(tpb)
    pick = lambda k: ship.get(k) if ship.get(k) is not None else inter.get(k)  # noqa: E731
    mode = lambda k: "shipped" if ship.get(k) is not None else ("interleaved" if inter.get(k) else None)  # noqa: E731
    return VariantRow(
        name=name, label=variant_label(name), p50_ms=pick("p50_ms"), p90_ms=pick("p90_ms"), p50_mode=mode("p50_ms"),
        sentences_per_s=pick("sentences_per_s"), throughput_mode=mode("sentences_per_s"),
        batch=(thr or {}).get("batch"), batch_search=(thr or {}).get("tried"), size_mb=size_mb,
        peak_rss_mb=ship.get("peak_rss_mb"), task_parity=tp, task_parity_search=parts.get("search"),
        task_parity_batched=tpb, task_parity_batched_search=bparts.get("search"),
        parity=lat.parity if lat else None, holds=bool(ok1 and okb), holds_batch1=bool(ok1), holds_batched=bool(okb),
        reference=ref, interleaved=inter, shipped=ship or None,
        session_providers=(lat.session_providers if lat else None) or ship.get("providers") or [],
        kind=lat.kind if lat else None, floor_ms=lat.floor_ms if lat else None,
        floor_precision=lat.floor_precision if lat else None)


def _fastest(rows: list[VariantRow], workload: str) -> VariantRow:
    fig_ = lambda r: r.figure(workload)  # noqa: E731
    return min(rows, key=fig_) if workload == "latency" else max(rows, key=fig_)


def recommend(rows: list[VariantRow], workload: str) -> Recommendation | None:
    """The fastest variant whose answers hold (batch 1 and batched) in this workload, by its decisive figure."""
    ok = [r for r in rows if r.holds and r.figure(workload) and workload not in r.same_as]  # no duplicate graph
    if not ok:
        return None
    best = _fastest(ok, workload)
    return Recommendation(workload=workload, variant=best.name, label=best.label, figure=best.figure(workload),
                          mode=best.p50_mode if workload == "latency" else best.throughput_mode,
                          batch=best.batch if workload == "throughput" else 1, task_parity=best.task_parity,
                          task_parity_batched=best.task_parity_batched, parity=best.parity)


def _faster(workload: str, a: float, b: float) -> float:
    """How many times ``a`` beats ``b`` in this workload's figure."""
    return b / a if workload == "latency" else a / b


fig = workload_figure


def why(rec: Recommendation, rows: list[VariantRow], workload: str, machine: dict, rates: dict,
        random_weights: bool = False) -> str:
    """One sentence: why the recommended variant wins this workload here (with ``random_weights``, no claim that
    int8 keeps the answers: on random weights they mean nothing)."""
    peers = [r for r in rows if r.name in PEERS and r.figure(workload) and r.holds and r.name != rec.variant]
    best = _fastest(peers, workload) if peers else None
    vs = (f", {_faster(workload, rec.figure, best.figure(workload)):.2f}x the fastest peer whose answers hold "
          f"({best.label}, {fig(workload, best.figure(workload))})" if best else "")
    head = f"{rec.label} is the fastest variant whose answers hold ({fig(workload, rec.figure)}{vs})"
    name = rec.variant
    r = recipe(name)
    if r is not None and r.quantized:
        isa = set(machine.get("isa") or ())
        units = [u for u in INT8_UNITS if u in isa]
        fp32, int8 = (rates.get("fp32") or {}).get("hot"), (rates.get("int8") or {}).get("hot")
        rate = f"int8 MatMuls ran {int8 / fp32:.1f}x the fp32 rate here" if fp32 and int8 else "int8 MatMuls beat fp32 here"
        unit = f"with {', '.join(units)}" if units else "even without VNNI or AMX (AVX2 only)"
        if random_weights:
            return (f"{head}: {rate} {unit}; its answers held on sentences it was not tuned on (no verdict on random "
                    f"weights).")
        return f"{head}: {rate} {unit}, and the int8 model keeps the answers on sentences it was not tuned on."
    wins = r.wins if r is not None and r.wins else ""
    if random_weights and "answers" in wins:  # a claim on answers ("no int8 model kept them"): none on random weights
        wins = ""
    return f"{head}: {wins}" if wins else head + "."


def peers_line(result: TuneResult, workload: str = "latency") -> str:
    """How the recommendation compares with each peer whose answers hold, measured in the same run."""
    rec = result.recommended.get(workload)
    if not rec:
        return "no recommendation"
    parts = []
    for r in result.variants:
        if r.name in PEERS and r.figure(workload) and r.name != rec.variant:
            note = "" if r.holds or result.random_weights else " (its answers changed)"
            parts.append(f"{r.label} {_faster(workload, rec.figure, r.figure(workload)):.2f}x slower{note}")
    return "; ".join(parts) or "no peer measured"


def plan_lines(result: TuneResult) -> list[str]:
    """One line per workload: this machine's plan for it, measured on that workload, and which graph ships (the
    check after the ablation, and the tune's own check at the end where it ran)."""
    out = []
    for w, p in (result.plans or {}).items():
        c = p.get("final_check") or p["check"]
        out.append(f"this machine's plan for {w}: {c['words']}")
    return out


def same_as_mark(r: VariantRow) -> str:
    """" (= fused for latency)" after the tuned row where its graph is another variant's; "" otherwise."""
    same = "; ".join(f"= {v} for {w}" for w, v in r.same_as.items())
    return f" ({same})" if same else ""


def changed_mark(result: TuneResult, r: VariantRow) -> str:
    """"  (changed)" after a variant whose answers did not hold; "" where they held, and on random weights, where
    the answers mean nothing (:func:`answers_note` says so once instead)."""
    return "" if r.holds or result.random_weights else "  (changed)"


def answers_note(result: TuneResult | dict) -> str:
    """On a model with random weights, the one sentence bench says (the answers mean nothing; what the check would
    mean with real weights) and what the recommendation did all the same; "" with real weights. ``result``: a
    :class:`.result.TuneResult` or its ``to_json()`` (the report's data)."""
    doc = result if isinstance(result, dict) else None
    if not (doc.get("random_weights") if doc else result.random_weights):
        return ""
    rows = [(r["label"], r["task_parity"], r["holds"]) for r in doc["variants"]] if doc else \
        [(r.label, r.task_parity, r.holds) for r in result.variants]
    kind = next((tp.get("kind") for _, tp, _ in rows if tp), None)
    left = [label for label, _, held in rows if not held]
    return (f"{random_weights_words(kind)}; the recommendation still counts only the variants whose answers held "
            f"here, as it would with real weights" + (f" (left out: {', '.join(left)})" if left else ""))


__all__ = ["PEERS", "row", "recommend", "why", "peers_line", "fig", "shipped_figures", "changed_mark",
           "answers_note", "plan_lines", "same_as_mark"]
