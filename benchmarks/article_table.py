"""Reproduce the ONNX Runtime BERT article's table with our own measurements.

3-layer and 12-layer BERT (presets ``bert-3layer`` and ``bert-base``, random
weights), sequence 128, batch 1, fp32: PyTorch eager, ONNX Runtime with every
optimization off, ONNX Runtime with the BERT fusions, and fused + int8; GPU
columns (fp32 and fp16, IO binding) when a GPU is usable. Each model's
variants are measured interleaved in one worker (MEASURING.md).

Writes ``benchmarks/results/article_table.md`` and ``.json`` with the machine
description. Runs unattended::

    python benchmarks/article_table.py [--models bert-3layer,bert-base] [--runs 30] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from workbench.config import BenchConfig
from workbench.cache.atomic import atomic_write_text
from workbench.measure.harness.bench import benchmark
from workbench.ort.machine import describe_machine, machine_line
from workbench.measure.variants import standard_variants
from workbench.ort.session import cuda_status

RESULTS = Path(__file__).resolve().parent / "results"
CPU_VARIANTS = ("torch", "unfused", "fused", "int8")
GPU_VARIANTS = ("torch", "unfused", "fused", "fp16")
LABELS = {"torch": "PyTorch eager", "unfused": "ORT, optimizations off", "fused": "ORT + BERT fusions",
          "int8": "ORT + fusions + int8", "fp16": "ORT + fusions + fp16"}
ARTICLE = ("The 2020 article: 3-layer BERT, seq 128, fusions gave 17x on CPU and 3x on GPU against the earlier "
           "unfused runtime; 12-layer fp16 BERT, seq 128, batch 1: 1.7 ms on a V100.")


def measure(model: str, provider: str, cfg: BenchConfig, log) -> list[dict]:
    names = CPU_VARIANTS if provider == "cpu" else GPU_VARIANTS
    log(f"{model} on {provider}: preparing {', '.join(names)}")
    variants = standard_variants(model, names, provider=provider)
    t0 = time.perf_counter()
    res = benchmark(variants, cfg)
    log(f"{model} on {provider}: measured in {time.perf_counter() - t0:.0f} s")
    base = {v.name: v.p50_ms for v in res.variants}
    rows = []
    for v in res.variants:
        rows.append({"model": model, "variant": v.name, "label": LABELS[v.name], "provider": provider,
                     "p50_ms": v.p50_ms, "p90_ms": v.p90_ms, "p99_ms": v.p99_ms, "runs": v.runs,
                     "vs_torch": base["torch"] / v.p50_ms, "vs_unfused": base["unfused"] / v.p50_ms,
                     "floor_ms": res.floor_ms, "floor_ratio": v.floor_ratio,
                     "cosine": (v.parity or {}).get("cosine"), "max_abs_diff": (v.parity or {}).get("max_abs_diff")})
    return rows


def markdown(doc: dict) -> str:
    m = doc["machine"]
    cfg = doc["config"]
    lines = [
        "# The article's table, measured here",
        "",
        f"Machine: {machine_line(m)}.",
        f"Shape: batch {cfg['batch']}, sequence {cfg['seq']}; {cfg['threads']} threads, thread spinning off, "
        f"{cfg['warmup']} warm-up + {cfg['runs']} timed runs per variant, interleaved round robin in one worker. "
        "Random weights (presets). Speed-ups are ratios of p50s measured side by side; absolute times drift on a "
        "shared machine.",
        f"Measured {doc['measured']} with `python benchmarks/article_table.py`.",
        "",
        "| model | variant | provider | p50 ms | p90 ms | p99 ms | vs PyTorch | vs unfused | x floor | cosine |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in doc["rows"]:
        cos = f"{r['cosine']:.5f}" if r["cosine"] is not None else "reference"
        fl = f"{r['floor_ratio']:.2f}" if r["floor_ratio"] else "-"
        lines.append(f"| {r['model']} | {r['label']} | {r['provider']} | {r['p50_ms']:.2f} | {r['p90_ms']:.2f} | "
                     f"{r['p99_ms']:.2f} | {r['vs_torch']:.2f}x | {r['vs_unfused']:.2f}x | {fl} | {cos} |")
    floors = sorted({(r["model"], r["provider"], r["floor_ms"]) for r in doc["rows"] if r["floor_ms"]})
    lines += ["", "Hardware floor (model FLOPs at this shape / measured fp32 MatMul rate, same threads): "
              + "; ".join(f"{mo} {pr} {fl:.1f} ms" for mo, pr, fl in floors) + "."]
    if not doc["gpu"]["available"]:
        lines += ["", f"GPU columns: not measured ({doc['gpu']['reason']})."]
    lines += ["", ARTICLE, ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="bert-3layer,bert-base")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    cfg = BenchConfig(batch=args.batch, seq=args.seq, threads=args.threads, runs=args.runs, warmup=args.warmup)
    # The floor's MatMul rates, measured now, next to the latencies they are compared with.
    from workbench.measure.worker.floor import refresh_rates
    for kind, info in refresh_rates(args.threads).items():
        log(f"{kind} MatMul rate {info['gflops']:.0f} GFLOP/s (quiet: {info['quiet']})")
    gpu_ok, gpu_reason = cuda_status()
    rows = []
    for model in [m.strip() for m in args.models.split(",") if m.strip()]:
        rows += measure(model, "cpu", cfg, log)
        if gpu_ok:
            rows += measure(model, "cuda", BenchConfig(provider="cuda", batch=args.batch, seq=args.seq,
                                                       threads=args.threads, runs=max(args.runs, 100),
                                                       warmup=max(args.warmup, 20)), log)
    doc = {"measured": time.strftime("%Y-%m-%d %H:%M"), "machine": describe_machine(args.threads),
           "config": {"batch": args.batch, "seq": args.seq, "threads": args.threads, "runs": args.runs,
                      "warmup": args.warmup}, "gpu": {"available": gpu_ok, "reason": gpu_reason}, "rows": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / "article_table.json", json.dumps(doc, indent=1) + "\n")
    text = markdown(doc)
    atomic_write_text(args.out / "article_table.md", text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
