"""``workbench tune`` figures: the recommendation against every peer measured in the same run, with the machine.

    python benchmarks/tune.py bert-base --seq 128 --threads 2
    python benchmarks/tune.py minilm --text builtin --threads 2

Prints the processor (lscpu model name and the instruction sets that matter), the load average,
each variant's p50 and answers against PyTorch eager, the int8 search's candidates, and the two
checks of issue 25: the recommended variant is faster than every peer (PyTorch eager,
torch.compile, OpenVINO f32 and default), and int8-guarded keeps the answers (embeddings: Spearman
>= 0.99, top-1 100%) at >= 1.3x the fused fp32 model's speed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys


def lscpu() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
    except OSError:
        return "lscpu unavailable"
    model = next((ln.split(":", 1)[1].strip() for ln in out.splitlines() if ln.startswith("Model name")), "?")
    flags = next((ln.split(":", 1)[1].split() for ln in out.splitlines() if ln.startswith("Flags")), [])
    keep = [f for f in flags if f in ("avx", "avx2", "fma", "f16c", "avx512f", "avx512_vnni", "avx_vnni",
                                      "avx512_bf16", "amx_bf16", "amx_int8", "avx512_fp16")]
    return f"{model}; instruction sets: {', '.join(keep)}"


def main(argv=None) -> int:
    from workbench.config import BenchConfig
    from workbench.measure.guarded import answers_line
    from workbench.measure.tune import PEERS, peers_line, tune
    from workbench.models import resolve
    from workbench.text import read_sentences, text_batches

    p = argparse.ArgumentParser()
    p.add_argument("model", nargs="?", default="bert-base")
    p.add_argument("--text", default=None)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--json", default=None, help="also write the whole result here")
    a = p.parse_args(argv)
    src = resolve(a.model)
    text = None if not a.text else text_batches(src, None if a.text == "builtin" else read_sentences(a.text))
    print(f"CPU: {lscpu()}; load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} "
          f"(machine shared with other helpers)", flush=True)
    res = tune(src, text=text, cfg=BenchConfig(seq=a.seq, threads=a.threads, runs=a.runs),
               progress=lambda s, f: print(f"  [{f:4.0%}] {s}", file=sys.stderr, flush=True))
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{res['model']['label']}, timed on {res['config']['timed_on']}, {a.threads} threads, {a.runs} runs each, "
          f"interleaved in one worker; answers against PyTorch eager on {res['config']['answers_text']['sentences']} "
          f"sentences\n")
    torch_p50 = next((r["p50_ms"] for r in res["variants"] if r["name"] == "torch"), None)
    fused = next((r["p50_ms"] for r in res["variants"] if r["name"] == "fused"), None)
    print("| variant | p50 ms | vs PyTorch | vs fused fp32 | answers | holds |\n|---|---:|---:|---:|---|---|")
    for r in res["variants"]:
        ans = "reference" if r["parity"] is None else answers_line(r["task_parity"])
        vs = f"{torch_p50 / r['p50_ms']:.2f}x" if torch_p50 else "-"
        vf = f"{fused / r['p50_ms']:.2f}x" if fused else "-"
        print(f"| {r['label']} (`{r['name']}`) | {r['p50_ms']:.2f} | {vs} | {vf} | {ans} | {'yes' if r['holds'] else 'no'} |")
    for sk in res["skipped"]:
        print(f"| {sk['name']} | skipped: {sk['why']} | | | | |")
    s = res.get("int8_search")
    if s:
        print(f"\nint8 search (answers against the fp32 fused model; p50 in a short timing of its own, fp32 "
              f"{s['fp32_p50_ms']:.2f} ms):\n\n| candidate | kept in fp32 | answers | p50 ms | holds |\n|---|---:|---|---:|---|")
        for c in s["candidates"]:
            print(f"| {c['label']} | {c['kept_fp32_share']:.0%} | {answers_line(c['task_parity'])} | "
                  f"{c['p50_ms']:.2f} | {'yes' if c['holds'] else 'no'} |" if c.get("p50_ms") else
                  f"| {c['label']} | {c['kept_fp32_share']:.0%} | {answers_line(c['task_parity'])} | not timed | "
                  f"{'yes' if c['holds'] else 'no'} |")
    rec = res["recommended"]
    print(f"\nRecommended: {rec['variant']}, {rec['p50_ms']:.2f} ms. {rec['why']}\nPeers: {peers_line(res)}")
    peers = [r for r in res["variants"] if r["name"] in PEERS and r["name"] != rec["variant"]]
    print(f"CHECK recommended faster than every peer measured: "
          f"{all(rec['p50_ms'] < r['p50_ms'] for r in peers)} ({len(peers)} peers)")
    g = next((r for r in res["variants"] if r["name"] == "int8-guarded"), None)
    if g and fused:
        print(f"CHECK int8-guarded: {answers_line(g['task_parity'])}, {fused / g['p50_ms']:.2f}x fused fp32; "
              f"holds {g['holds']}, >= 1.3x {fused / g['p50_ms'] >= 1.3}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
