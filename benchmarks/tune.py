"""``workbench tune`` figures (issue 30), per workload, with the machine.

    python benchmarks/tune.py minilm --text builtin --workload both --threads 2
    python benchmarks/tune.py bert-base --seq 128 --threads 2 --workload latency

Prints the processor (lscpu model name and the instruction sets that matter), the load average before
and after, the total tune wall time, then per workload: every variant's figure as shipped and
interleaved, its answers at batch 1 and in padded batches (check part, the sentences the int8
recipes never saw; search part too), size and peak memory, and the checks:

* the recommended variant is at least as fast as every peer whose answers hold (PyTorch eager,
  torch.compile, OpenVINO f32, OpenVINO default (bf16 on AMX/AVX512-BF16 CPUs), openvino-int8),
  all as shipped;
* its answers hold (top-1 100%, Spearman >= 0.99) at batch 1 and batched;
* where an unguarded int8 breaks the answers, its guarded form holds and by how much it beats every
  holding fp32/bf16 variant;
* the recommended variant's throughput against PyTorch eager as shipped (target: 5x on MiniLM);
* the whole tune under 5 minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

FP = ("torch", "torch-compile", "unfused", "fused", "tuned", "openvino-f32", "openvino")
GUARDS = {"int8": "int8-guarded", "openvino-int8": "openvino-int8-guarded"}


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


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _table(res: dict, w: str) -> None:
    from workbench.ort.answer_policy import words

    key = "p50_ms" if w == "latency" else "sentences_per_s"
    unit = "p50 ms" if w == "latency" else "sentences/s"
    torch = next((r for r in res["variants"] if r["name"] == "torch"), None)
    print(f"| variant | {unit} as shipped | {unit} interleaved | vs PyTorch eager (shipped) | batch | MB on disk | "
          f"peak MB | answers batch 1 (check / search) | answers batched (check / search) | holds |")
    print("|---|---:|---:|---:|---:|---:|---:|---|---|---|")
    for r in res["variants"]:
        v, vi = r.get(key), (r.get("interleaved") or {}).get(key)
        vs = "-"
        if torch and torch.get(key) and v:
            vs = f"{(torch[key] / v if w == 'latency' else v / torch[key]):.2f}x"
        f = (lambda x: f"{x:.2f}") if w == "latency" else (lambda x: f"{x:.0f}")
        a1 = "reference" if r["reference"] else (f"{(words(r['task_parity']) or '-')} / "
                                                 f"{(words(r.get('task_parity_search')) or '-')}")
        ab = "reference" if r["reference"] else (f"{(words(r.get('task_parity_batched')) or '-')} / "
                                                 f"{(words(r.get('task_parity_batched_search')) or '-')}")
        print(f"| {r['label']} (`{r['name']}`) | {f(v) if v else '-'} | {f(vi) if vi else '-'} | {vs} | "
              f"{r.get('batch') or 1 if w == 'throughput' else 1} | {r['size_mb']:.1f} | "
              f"{r['peak_rss_mb'] or 0:.0f} | {a1} | {ab} | {'yes' if r['holds'] else 'no'} |")


def _checks(res: dict, w: str, typed) -> None:
    """The benchmark's checks on the ``--json`` document ``res`` (``typed``: the TuneResult it came from)."""
    from workbench.ort.answer_policy import words
    from workbench.measure.tune.rows import PEERS, fig, peers_line

    key = "p50_ms" if w == "latency" else "sentences_per_s"
    rec = res["recommended"].get(w)
    if not rec:
        print(f"no recommendation for {w}")
        return
    better = (lambda a, b: a <= b) if w == "latency" else (lambda a, b: a >= b)
    by = {r["name"]: r for r in res["variants"]}
    peers = [r for r in res["variants"] if r["name"] in PEERS and r["holds"] and r.get(key) and r["name"] != rec["variant"]]
    print(f"\nRecommended for {w}: {rec['variant']} ({fig(w, rec[key])}, batch {rec['batch']}, {rec['mode']}). "
          f"{rec['why']}\nPeers: {peers_line(typed, w)}")
    print(f"CHECK {w}: recommended at least as fast as every peer whose answers hold: "
          f"{all(better(rec[key], r[key]) for r in peers)} ({len(peers)} peers: "
          f"{', '.join(r['name'] for r in peers)})")
    r = by[rec["variant"]]
    print(f"CHECK {w}: recommended answers hold at batch 1 ({(words(r['task_parity']) or '-')}) and batched "
          f"({(words(r.get('task_parity_batched')) or '-')}): {r['holds']}")
    if w == "throughput" and by.get("torch") and by["torch"].get(key):
        print(f"CHECK throughput: recommended {rec[key] / by['torch'][key]:.2f}x PyTorch eager as shipped "
              f"(target 5x): {rec[key] / by['torch'][key] >= 5}")
    for plain, guard in GUARDS.items():
        p, g = by.get(plain), by.get(guard)
        if p and g and not p["holds"]:
            fp = [x for x in res["variants"] if x["name"] in FP and x["holds"] and x.get(key)]
            best = (min(fp, key=lambda x: x[key]) if w == "latency" else max(fp, key=lambda x: x[key])) if fp else None
            gain = (best[key] / g[key] if w == "latency" else g[key] / best[key]) if best and g.get(key) else None
            print(f"CHECK {w}: {plain} breaks the answers; {guard} holds: {g['holds']}; "
                  + (f"{gain:.2f}x the fastest holding fp32/bf16 variant ({best['name']})" if gain else ""))


def main(argv=None) -> int:
    from workbench.config import BenchConfig
    from workbench.ort.answer_policy import words
    from workbench.measure.tune.run import tune
    from workbench.models import resolve
    from workbench.text import BUILTIN_SENTENCES, read_sentences

    p = argparse.ArgumentParser()
    p.add_argument("model", nargs="?", default="minilm")
    p.add_argument("--text", default="builtin")
    p.add_argument("--workload", default="both", choices=("latency", "throughput", "both"))
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--json", default=None, help="also write the whole result here")
    a = p.parse_args(argv)
    src = resolve(a.model)
    text = list(BUILTIN_SENTENCES) if a.text == "builtin" else (None if a.text == "none" else read_sentences(a.text))
    print(f"CPU: {lscpu()}; {a.threads} threads; load average before: {load()}", flush=True)
    t0 = time.perf_counter()
    typed = tune(src, text=text, cfg=BenchConfig(seq=a.seq, threads=a.threads, runs=a.runs), workload=a.workload,
               progress=lambda s, f: print(f"  [{time.perf_counter() - t0:6.1f} s {f:4.0%}] {s}", file=sys.stderr,
                                           flush=True))
    wall = time.perf_counter() - t0
    res = typed.to_json()
    print(f"load average after: {load()}; total tune wall time {wall:.0f} s (under 5 minutes: {wall < 300})")
    sp = res["split"]
    print(f"{res['model']['label']}; answers against PyTorch eager: check part {len(sp['check'])} sentences "
          f"(decides), search part {len(sp['search'])} ({sp['source']}); figures as shipped, each engine in "
          f"alternating time slices of its own process; interleaved = one worker, spinning off\n")
    for w in res["workloads"]:
        print(f"## {w}\n")
        _table(res, w)
        _checks(res, w, typed)
        print()
    g = res.get("openvino_guard")
    if g:
        print(f"openvino-int8-guarded: {g['chosen']} ({g['kept_share']:.0%} of the MatMul weights kept out of int8), "
              f"holds on the search part: {g['holds']}; {len(g['tried'])} candidates in {g.get('seconds')} s: "
              + "; ".join(f"{t['label']}: {(words(t['task_parity']) or '-')}" for t in g["tried"]))
    s = res.get("int8_search")
    if s:
        print(f"int8-guarded: {s['chosen']} ({s['method']}), {s['kept_fp32_share']:.0%} of the weights kept fp32, "
              f"{len(s['candidates'])} candidates")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
