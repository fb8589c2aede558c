"""Opset 18 + fusion against opset 23's standard Attention op, side by side on this machine.

Paths compared, all dynamo exports of the same model, timed interleaved in one worker:

- ``opset18-fused``: opset 18, sdpa attention, fused by the timeline (contrib ``Attention``);
- ``opset23-standard``: opset 23, sdpa attention: the exporter writes ONNX's own ``Attention``;
  the timeline fuses the rest around it (SkipLayerNormalization, BiasGelu);
- ``opset23-eager-fused``: opset 23, eager attention, fused by the timeline (contrib ``Attention``):
  the other way to a contrib kernel at the new opset;
- ``opset18-unfused`` and ``opset23-unfused`` as references (optimizations off).

Then a per-operator profile of the two attention paths says where the difference comes from.
Writes ``benchmarks/results/opset_attention.{md,json}``::

    python benchmarks/opset_attention.py [--model bert-base] [--seq 128] [--runs 30] [--threads 2] [--provider cpu|cuda]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from workbench.config import BenchConfig, ExportConfig
from workbench.export import export
from workbench.graph.summary import attention_kinds
from workbench.measure.bench import Variant, benchmark
from workbench.measure.profile import profile_ops
from workbench.measure.recipes import fuse_bert
from workbench.models import resolve
from workbench.paths import atomic_write_text

RESULTS = Path(__file__).resolve().parent / "results"
PATHS = (("opset18-unfused", 18, "sdpa", False), ("opset18-fused", 18, "sdpa", True),
         ("opset23-unfused", 23, "sdpa", False), ("opset23-standard", 23, "sdpa", True),
         ("opset23-eager-fused", 23, "eager", True))


def _kinds(path) -> str:
    import onnx

    k = attention_kinds(onnx.load(str(path), load_external_data=False))
    return ", ".join(f"{n} {kind}" for kind, n in k.items() if n) or "none"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="bert-base")
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--provider", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    src = resolve(args.model)
    t0 = time.perf_counter()

    def say(msg):
        print(f"[{time.perf_counter() - t0:5.0f} s] {msg}", file=sys.stderr, flush=True)

    variants, attention = [], {}
    for name, opset, att, fused in PATHS:
        say(f"export + fuse {name}")
        exp = export(src, ExportConfig(exporter="dynamo", attention=att, opset=opset))
        path = fuse_bert(exp.path, num_heads=src.num_heads or 0, hidden_size=src.hidden_size or 0) if fused else exp.path
        attention[name] = _kinds(path)
        variants.append(Variant(name, path, provider=args.provider, level="all" if fused else "disable"))
    cfg = BenchConfig(seq=args.seq, threads=args.threads, runs=args.runs, warmup=5)
    say("timing, interleaved")
    res = benchmark(variants, cfg, floor=False)
    ref = res["opset18-fused"].p50_ms
    measured = time.strftime("%Y-%m-%d %H:%M")
    m = res.machine
    lines = [f"# Opset 18 + fusion vs opset 23's standard Attention ({args.model}, {measured})", "",
             f"{m.get('cpu')}, {args.threads} threads, provider {args.provider}, batch 1, sequence {args.seq}, "
             f"{args.runs} runs each, interleaved, spinning off.", "",
             "| path | attention nodes | p50 ms | p90 ms | vs opset18-fused | cosine vs first |",
             "|---|---|---:|---:|---:|---:|"]
    for v in res.variants:
        cos = f"{v.parity['cosine']:.6f}" if v.parity else "reference"
        lines.append(f"| {v.name} | {attention[v.name]} | {v.p50_ms:.2f} | {v.p90_ms:.2f} | "
                     f"{ref / v.p50_ms:.2f}x | {cos} |")
    say("profiling the two attention paths")
    prof = {}
    for name in ("opset18-fused", "opset23-standard"):
        v = next(x for x in variants if x.name == name)
        p = profile_ops(v.model, BenchConfig(seq=args.seq, threads=args.threads, runs=10, warmup=3),
                        provider=args.provider, name=name)
        prof[name] = p.op_type_totals()
    ops = sorted(set(prof["opset18-fused"]) | set(prof["opset23-standard"]),
                 key=lambda o: -(prof["opset18-fused"].get(o, 0) + prof["opset23-standard"].get(o, 0)))[:10]
    lines += ["", "Where the time goes (µs per run, ONNX Runtime's profiler, top op types):", "",
              "| op type | opset18-fused | opset23-standard |", "|---|---:|---:|"]
    for o in ops:
        lines.append(f"| {o} | {prof['opset18-fused'].get(o, 0):.0f} | {prof['opset23-standard'].get(o, 0):.0f} |")
    winner = min(("opset18-fused", "opset23-standard", "opset23-eager-fused"), key=lambda n: res[n].p50_ms)
    lines += ["", f"Fastest here: **{winner}**."]
    md = "\n".join(lines) + "\n"
    print(md)
    args.out.mkdir(parents=True, exist_ok=True)
    suffix = "" if (args.model, args.seq, args.provider) == ("bert-base", 128, "cpu") else \
        f"-{args.model}-s{args.seq}-{args.provider}"
    atomic_write_text(args.out / f"opset_attention{suffix}.md", md)
    atomic_write_text(args.out / f"opset_attention{suffix}.json", json.dumps(
        {"measured": measured, "machine": m, "attention": attention, "profile_us": prof,
         "variants": [v.to_dict() if hasattr(v, "to_dict") else v.__dict__ for v in res.variants]},
        indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
