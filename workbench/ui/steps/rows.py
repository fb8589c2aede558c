"""The fusion panel's content as plain data: one row per step, the engine line, which step to show.

No widgets here; the fusion panel draws these rows and the tests read them directly.
"""

from __future__ import annotations

from ...fusion import BY_NAME
from ...ort.answer_policy import TaskParity
from ...ort.assignment import counts_words
from ...report.data import not_applicable
from ...viz.summary import ENGINE_TITLES  # what each engine is called on screen (one table, also the report's)
from ..graph.views import step_name

#: Ops a fusion emits (what the "fused here" column names).
FUSED_OPS = {"Attention", "MultiHeadAttention", "SkipLayerNormalization", "LayerNormalization", "BiasGelu", "Gelu",
             "FastGelu", "EmbedLayerNormalization", "SkipSimplifiedLayerNormalization",
             "SimplifiedLayerNormalization", "GemmFastGelu", "FusedMatMul", "BiasAdd", "BiasSplitGelu", "QuickGelu",
             "RotaryEmbedding", "GroupQueryAttention", "SDPA"}


def engine_summary(asked: str, used: str, fused: dict[str, dict[str, int]]) -> str:
    """The model bar's line on the engine: which one runs, and under auto, why.

    Args:
        asked: the engine the user picked ("auto", "ort", "onnxscript").
        used: the engine whose snapshots are shown.
        fused: engine → its final fused-op counts (both engines under auto).
    """
    if not used:
        return ""

    def attn(e: str) -> int:
        f = fused.get(e, {})
        return int(f.get("Attention", 0)) + int(f.get("MultiHeadAttention", 0))

    title = ENGINE_TITLES.get(used, used)
    if asked != "auto":
        return f"engine: {title} (fuses {attn(used)} Attention)"
    others = "; ".join(f"{ENGINE_TITLES.get(e, e).split()[0]} fuses {attn(e)}" for e in fused if e != used)
    return (f"auto → {title} (fuses {attn(used)} Attention" + (f"; {others}" if others else "") + ")"
            ", kept for toggles")


def step_tip(step) -> str:
    """A catalog step in plain words, for the hover of its checkbox."""
    parts = [getattr(step, "title", "") or step.name]
    if getattr(step, "matches", ""):
        parts.append(f"Matches {step.matches}.")
    if getattr(step, "emits", ""):
        parts.append(f"Emits {step.emits}.")
    if getattr(step, "effect", ""):
        parts.append(f"Why: {step.effect}.")
    if getattr(step, "prerequisites", ()):
        parts.append(f"Needs first: {', '.join(step.prerequisites)}.")
    if not getattr(step, "default_on", True):
        parts.append("Off by default.")
    return " ".join(parts[:1]) + ": " + " ".join(parts[1:]) if len(parts) > 1 else parts[0]


def parity_of(sn) -> tuple[bool | None, str]:
    """A snapshot's parity badge: None (not checked yet), True or False, and its hover text."""
    p = getattr(sn, "parity", None) if sn is not None else None
    if p is None:
        return None, "parity not checked yet (it runs in the background after each change)"
    ok = bool(getattr(p, "ok", p))
    return ok, (f"max abs diff {getattr(p, 'max_abs_diff', float('nan')):.1e} over {getattr(p, 'cases', '?')} "
                f"cases: {'within' if ok else 'beyond'} atol 1e-4, rtol 1e-3 of the unfused export")


def answers_text(tp) -> tuple[str, str]:
    """Task parity (answers on real text) in a few words (the one formatter's), and in full for the hover."""
    t = TaskParity.of(tp) if tp else None
    return ("", "") if t is None else (t.words(), t.details())


def providers_text(sn) -> tuple[str, str]:
    """A snapshot's count per execution provider ("OpenVINO 40, CPU 4"), and for the hover the provider asked
    for, what the session removed first and each fall-back in one line; ("", "") before it is known."""
    a = getattr(sn, "assignment", None) if sn is not None else None
    if a is None:
        return "", ""
    return counts_words(a.counts()), f"asked for the {a.asked} provider, level {a.level}: " + "\n".join(a.lines())


def buys_text(plans: dict | None, name: str) -> tuple[str, str]:
    """What the step buys on each workload "what each fusion buys" measured ("latency +3.1%, throughput −2.0%",
    the verdict's sign), and for the hover each workload's verdict and, where it loses, the profile's words;
    ("", "") before it was measured."""
    short, tip = [], []
    for kind, p in (plans or {}).items():
        row = next((r for r in p.ablation.get("rows") or () if r["step"] == name), None)
        if row is None:
            continue
        short.append(f"{kind} {row['saves_pct']:+.1f}%")
        tip.append(f"{kind} ({p.workload.get('words', '')}): {row['verdict']}, {row['saves_pct']:+.1f}%")
        tip += [k["words"] for k in p.kernels if k.get("step") == name]
    return ", ".join(short), "\n".join(tip)


def fell_short(snapshots, step, i: int, layers: int) -> bool:
    """Whether a fusion step left work undone: fewer of its op than encoder layers, and no other
    step (or the export itself) made up for it."""
    op = getattr(step, "emits", "")
    if not op or layers <= 0:
        return False
    before = snapshots[i - 1].fused.get(op, 0) if i > 0 else 0
    final = snapshots[-1].fused.get(op, 0)
    here = (snapshots[i].fused_here or {}).get(op, 0)
    return here < layers and before < layers and final < layers


def step_rows(timeline, snapshots, engine: str, pending: dict[str, bool] | None = None,
              plans: dict | None = None) -> list[dict]:
    """The fusion panel's rows, one per step of the engine in use.

    Each row: ``name``, ``title``, ``kind`` ("fusion" or "cleanup"), ``on``, ``index`` (its
    snapshot, or None when the step is off), ``nodes``, ``here`` ("+12 Attention"),
    ``parity`` (None: not checked yet, True, False), ``parity_tip``, ``answers`` / ``answers_tip``
    (task parity on real text, when checked), ``providers`` / ``providers_tip`` (the nodes each execution
    provider runs, :func:`providers_text`), ``buys`` / ``buys_tip`` (what the step buys on each workload
    ``plans`` measured, and why it loses in the kernels' words: :func:`buys_text`), ``why`` (the diagnostic, when the
    step fused fewer
    than it could, or why it failed), ``failed`` (why the step failed, or ""), ``tip`` and ``applies`` / ``na_why``: False and the reason when the step cannot apply
    to this model (:func:`workbench.report.data.not_applicable`: the engine's skip test found none of its anchors),
    which the panel folds under one line. Steps the engine does not run are left out, and so are switched-off
    steps for patterns a BERT encoder lacks.
    """

    if timeline is None or not snapshots:
        return []
    pending = pending or {}
    engine = timeline.engine_used or (engine if engine != "auto" else "ort")
    index = {step_name(sn.step): i for i, sn in enumerate(snapshots)}
    layers = int(getattr(timeline, "num_layers", 0) or 0)
    rows = []
    for name in timeline.steps(engine):
        step = BY_NAME.get(name)
        if step is None:
            continue
        i = index.get(name)
        sn = snapshots[i] if i is not None else None
        changed = sn is not None and getattr(getattr(sn, "diff", None), "empty", True) is False
        if sn is None and not getattr(step, "in_bert", True):
            continue
        na = "" if sn is None else not_applicable({"name": name, "skipped": getattr(sn, "skipped", ""),
                                                   "changed": changed, "diagnostic": sn.diagnostic})
        made = {op: n for op, n in (sn.fused_here if sn else {}).items() if n}
        # The fused ops, not the Cast / ReduceSum helpers a fusion adds for its mask input.
        shown = {op: n for op, n in made.items() if op in FUSED_OPS} or made
        here = ", ".join(f"+{n} {op}" for op, n in sorted(shown.items(), key=lambda kv: -kv[1]))
        ok, tip = parity_of(sn)
        answers, answers_tip = answers_text(getattr(sn, "task_parity", None))
        providers, providers_tip = providers_text(sn)
        buys, buys_tip = buys_text(plans, name)
        why = ""
        failed = getattr(sn, "failed", "") if sn is not None else ""
        if failed:
            why = f"failed: {failed}"
        elif sn is not None and sn.diagnostic and step.kind == "fusion" and fell_short(snapshots, step, i, layers):
            why = sn.diagnostic
        on = pending.get(name, timeline.enabled(name))  # a click in flight wins
        rows.append({"name": name, "title": step.title or name, "kind": step.kind, "on": on,
                     "index": i, "nodes": sn.nodes if sn else None, "here": here, "parity": ok,
                     "parity_tip": tip, "answers": answers, "answers_tip": answers_tip, "why": why,
                     "providers": providers, "providers_tip": providers_tip, "buys": buys, "buys_tip": buys_tip,
                     "tip": step_tip(step), "applies": not na, "na_why": na, "failed": failed})
    return rows


def default_step(snapshots) -> int:
    """The step to show first: Attention when it fused, else the step that removed most nodes."""
    best, best_removed = len(snapshots) - 1, -1
    for i, sn in enumerate(snapshots[1:], 1):
        removed = len(getattr(getattr(sn, "diff", None), "removed", ()) or ())
        if step_name(sn.step) == "attention" and removed:
            return i
        if removed > best_removed:
            best, best_removed = i, removed
    return best


def step_near(snapshots, order: list[str], name: str | None) -> int:
    """Where to look when the chosen step was switched off: the next step that ran after it,
    so the "after" pane shows the graph as it now stands at that point (else the default)."""
    names = [step_name(sn.step) for sn in snapshots]
    if name in names:
        return names.index(name)
    if name and name in order:
        for later in order[order.index(name) + 1:]:
            if later in names:
                return names.index(later)
    return default_step(snapshots)


__all__ = ["engine_summary", "step_rows", "default_step", "step_near", "answers_text", "providers_text"]
