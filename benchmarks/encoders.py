"""What the fusions buy on the encoders of 2025, at their published base sizes (random weights).

Per family preset (``modernbert-base``, ``nomic-embed``, ``gte-base``, ``eurobert-210m``) and sequence
length, one interleaved run in the benchmark worker (spinning off, same threads, batch 1): PyTorch eager
(sdpa), ONNX Runtime unfused (ORT_DISABLE_ALL), ONNX Runtime default (ORT_ENABLE_ALL on the export),
fused (every step of the workbench's plan, engine auto) and int8 (fused + dynamic per-channel int8).
Prints p50s, ratios and the machine; writes ``benchmarks/results/encoders.{md,json}``::

    python benchmarks/encoders.py [--models modernbert-base,nomic-embed,gte-base,eurobert-210m]
                                  [--seqs 128,512] [--runs 20] [--threads 2] [--exporter dynamo]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from workbench.cache.atomic import atomic_write_text
from workbench.config import BenchConfig
from workbench.measure.harness.bench import benchmark
from workbench.measure.harness.results import Variant
from workbench.measure.variants import standard_variants

RESULTS = Path(__file__).resolve().parent / "results"
MODELS = ("modernbert-base", "nomic-embed", "gte-base", "eurobert-210m")
ORDER = ("torch", "unfused", "ort-default", "fused", "int8")


def _isa(machine: dict) -> str:
    isa = machine.get("isa") or machine.get("cpu", {}).get("isa") or []
    return ", ".join(isa) if isinstance(isa, list) else str(isa)


def run_one(model: str, seq: int, args) -> dict:
    variants = standard_variants(model, ("torch", "unfused", "fused", "int8"), attention="sdpa",
                                 exporter=args.exporter)
    unfused = next(v for v in variants if v.name == "unfused")
    variants.insert(2, Variant("ort-default", unfused.model, provider="cpu", level="all"))
    cfg = BenchConfig(seq=seq, batch=1, threads=args.threads, runs=args.runs, warmup=3)
    res = benchmark(variants, cfg)
    p50 = {v.name: v.p50_ms for v in res.variants}
    return {"model": model, "seq": seq, "p50_ms": p50, "machine": res.machine,
            "parity": {v.name: getattr(v, "max_abs_diff", None) for v in res.variants}}


def to_markdown(rows: list[dict], measured: str, args) -> str:
    m = rows[0]["machine"] if rows else {}
    cpu = m.get("cpu") if isinstance(m.get("cpu"), str) else (m.get("cpu") or {}).get("model", "?")
    out = [f"# Encoders of 2025: what the fusions buy ({measured})", "",
           f"Machine: {cpu}; instruction sets: {_isa(m) or '?'}; {args.threads} threads, batch 1, "
           f"{args.exporter} export, sdpa attention, random weights, {args.runs} interleaved runs per variant.", "",
           "| model | seq | PyTorch eager | ORT unfused | ORT default | fused | int8 | fused vs unfused | fused vs PyTorch |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        p = r["p50_ms"]
        cells = [f"{p[n]:.1f}" if p.get(n) else "-" for n in ORDER]
        vs_unf = f"{p['unfused'] / p['fused']:.2f}x" if p.get("fused") and p.get("unfused") else "-"
        vs_pt = f"{p['torch'] / p['fused']:.2f}x" if p.get("fused") and p.get("torch") else "-"
        out.append(f"| {r['model']} | {r['seq']} | " + " | ".join(cells) + f" | {vs_unf} | {vs_pt} |")
    out += ["", "p50 in ms. `python benchmarks/encoders.py` reproduces it."]
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--seqs", default="128,512")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--exporter", default="dynamo", choices=("torchscript", "dynamo"))
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    rows = []
    t0 = time.perf_counter()
    for model in args.models.split(","):
        for seq in (int(s) for s in args.seqs.split(",")):
            print(f"[{time.perf_counter() - t0:5.0f} s] {model} seq {seq}", file=sys.stderr, flush=True)
            rows.append(run_one(model, seq, args))
            p = rows[-1]["p50_ms"]
            print("    " + ", ".join(f"{n} {p[n]:.1f} ms" for n in ORDER if p.get(n)), file=sys.stderr, flush=True)
    measured = time.strftime("%Y-%m-%d %H:%M")
    md = to_markdown(rows, measured, args)
    print(md)
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / "encoders.md", md)
    atomic_write_text(args.out / "encoders.json", json.dumps({"measured": measured, "rows": rows}, indent=1,
                                                             default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
