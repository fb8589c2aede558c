"""What each fusion buys on this machine: the full plan against the plan without each step.

Every fusion step that fired is switched off in turn (with ONNX Runtime's own
session transformer for it, so the session does not redo it); all plans are
timed interleaved in one worker, with the full plan twice to measure the noise.
Prints a table and the plan that keeps only what helps; writes
``benchmarks/results/fusion_ablation.{md,json}``::

    python benchmarks/fusion_ablation.py [--model bert-base] [--seq 128] [--runs 30] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from workbench.config import BenchConfig
from workbench.cache.atomic import atomic_write_text
from workbench.measure.tune.ablation import fusion_ablation

RESULTS = Path(__file__).resolve().parent / "results"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="bert-base")
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--exporter", default="torchscript", choices=("torchscript", "dynamo"))
    ap.add_argument("--dynamic-block-base", type=int, default=0, metavar="N",
                    help="ONNX Runtime session.dynamic_block_base for every plan (default 0)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    cfg = BenchConfig(seq=args.seq, batch=args.batch, threads=args.threads, runs=args.runs, warmup=5,
                      dynamic_block_base=args.dynamic_block_base)
    t0 = time.perf_counter()
    res = fusion_ablation(args.model, cfg, exporter=args.exporter,
                          progress=lambda stage, f: print(f"[{time.perf_counter() - t0:5.0f} s] {stage}",
                                                          file=sys.stderr, flush=True))
    measured = time.strftime("%Y-%m-%d %H:%M")
    md = res.to_markdown(measured)
    print(md)
    args.out.mkdir(parents=True, exist_ok=True)
    suffix = "" if (args.model, args.exporter, args.seq) == ("bert-base", "torchscript", 128) else \
        f"-{args.model}-{args.exporter}-s{args.seq}"
    atomic_write_text(args.out / f"fusion_ablation{suffix}.md", md)
    atomic_write_text(args.out / f"fusion_ablation{suffix}.json",
                      json.dumps({"measured": measured, **res.to_dict()}, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
