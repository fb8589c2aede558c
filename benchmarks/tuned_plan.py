"""Is this machine's plan never slower than the graphs it started from, on the workloads a user serves?

For each model and each workload (each sentence alone at batch 1; the sentences sorted by length in padded batches
at the throughput search's batch), this measures the plan as ``workbench tune`` does (an ablation on the workload,
then the check against the unfused graph and the full plan; nothing cached), then times the three graphs again in
a fresh interleaved run on the same workload and prints the tuned graph's speed against the faster of the other
two (the figure issue 42 asks to be at least 0.98x), how long the plan took against today's fixed-shape ablation,
and the machine's load. ``--hogs 2`` runs two CPU-bound processes beside everything (the check at the end must
catch what a busy ablation got wrong)::

    python benchmarks/tuned_plan.py [--models minilm,bert-base,mpnet-base] [--text builtin|corpus|FILE]
                                    [--threads 2] [--runs 20] [--hogs 0]

``--text corpus``: 200 sentences of mixed lengths made here from the built-in ones (seeded).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

from workbench.config import BenchConfig, ExportConfig, FusionPlan
from workbench.export import export
from workbench.measure.harness.bench import benchmark
from workbench.measure.tune.ablation import fusion_ablation
from workbench.measure.tune.check import round_ratio
from workbench.measure.tune.plan import plan_for
from workbench.measure.tune.served import Workload, timed_config
from workbench.measure.variants import build_variants
from workbench.errors import WorkbenchError
from workbench.models import TOKENIZER_FILES, resolve
from workbench.ort.machine import describe_machine, machine_line
from workbench.text import BUILTIN_SENTENCES, read_sentences


def corpus(n: int = 200, seed: int = 0) -> list[str]:
    """``n`` sentences of mixed lengths: one to six built-in sentences joined, some cut short (seeded)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        parts = [rng.choice(BUILTIN_SENTENCES) for _ in range(rng.choice((1, 1, 1, 2, 2, 3, 4, 6)))]
        words = " ".join(parts).split()
        cut = rng.random() < 0.3 and len(words) > 2
        out.append(" ".join(words[:rng.randint(2, len(words))]) if cut else " ".join(words))
    return out


def with_bert_vocab(model: str):
    """The model to time: ``model`` itself, or, for a preset with no tokenizer of its own (MPNet, DeBERTa: random
    weights either way), a folder of it (its config, seeded random weights) with the packaged MiniLM's tokenizer
    (BERT's uncased vocabulary, whose ids fit their tables): for a timing, only the lengths and padding matter."""
    src = resolve(model)
    try:
        src.tokenizer()
        return src
    except WorkbenchError:
        pass
    folder = Path(tempfile.gettempdir()) / f"workbench-bench-{model}-bert-vocab"
    if not (folder / "config.json").is_file():
        src.build("eager").save_pretrained(folder, safe_serialization=True)
        real = Path(resolve("minilm").path)
        for name in TOKENIZER_FILES + ("special_tokens_map.json",):
            if (real / name).is_file():
                shutil.copyfile(real / name, folder / name)
    return resolve(str(folder))


def _hog() -> None:
    while True:
        pass


def _graphs(src, plan, threads: int, wp) -> list:
    """unfused, fused (the full plan) and tuned (what the checked plan ships) as variants."""
    extra = {"threads": threads, "tuned_plan": wp.shipped()}
    return build_variants(src, ["unfused", "fused", "tuned"], plan=plan, extra=extra)


def one(model: str, sentences: list[str], source: str, kind: str, threads: int, runs: int) -> dict:
    src = with_bert_vocab(model)
    exp = export(src, ExportConfig())
    plan = FusionPlan()
    cfg = BenchConfig(threads=threads, runs=12, warmup=2)
    t0 = time.perf_counter()
    wp = plan_for(src, exp.path, plan, cfg, workload=Workload.of_text(kind, sentences, source))
    took = time.perf_counter() - t0
    w = Workload(**{k: v for k, v in wp.workload.items() if k in ("kind", "batch")}, sentences=tuple(sentences),
                 source=source)
    timed, c = timed_config(src, w, BenchConfig(threads=threads, runs=runs, warmup=3))
    res = benchmark(_graphs(src, plan, threads, wp), c, text=timed, floor=False)
    speed = {n: round_ratio(res["unfused"].samples_ms, res[n].samples_ms) for n in ("fused", "tuned")}
    speed["unfused"] = 1.0
    best_other = max(speed["unfused"], speed["fused"])
    abl = ablation_seconds(model, sentences, source, kind, threads, wp.workload.get("batch"))
    return {"model": model, "workload": w.words(), "ships": wp.check.ships, "plan": wp.check.plan_words or "-",
            "ablation_s": abl,
            "fused": speed["fused"], "tuned": speed["tuned"], "tuned_vs_best": speed["tuned"] / best_other,
            "plan_s": took, "load": res.machine_load.words() or f"quiet (load {res.machine_load.load or 0:.1f})",
            "p50": {n: res[n].p50_ms for n in ("unfused", "fused", "tuned")}}


def baseline_seconds(model: str, threads: int) -> float:
    """Today's ablation (batch 1, sequence 128, random ids) as ``workbench tune`` ran it: 12 runs, 2 warm-up; timed
    the second time, so the fused plans it builds are cached as they are for the plan on the workloads."""
    src = with_bert_vocab(model)
    fusion_ablation(src, BenchConfig(threads=threads, runs=12, warmup=2))
    t0 = time.perf_counter()
    fusion_ablation(src, BenchConfig(threads=threads, runs=12, warmup=2))
    return time.perf_counter() - t0


def ablation_seconds(model: str, sentences: list[str], source: str, kind: str, threads: int, batch) -> float:
    """The ablation alone on a workload (what issue 42 holds to twice today's), at the batch the plan searched."""
    src = with_bert_vocab(model)
    t0 = time.perf_counter()
    fusion_ablation(src, BenchConfig(threads=threads, runs=12, warmup=2),
                    workload=Workload.of_text(kind, sentences, source, batch=batch))
    return time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="minilm,bert-base,mpnet-base")
    ap.add_argument("--text", default="builtin", help="builtin, corpus (200 mixed-length sentences) or a file")
    ap.add_argument("--workloads", default="latency,throughput")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=20, help="timed runs of the fresh check (whole cycles of the text)")
    ap.add_argument("--hogs", type=int, default=0, help="CPU-bound processes beside the measurement")
    ap.add_argument("--no-baseline", action="store_true", help="skip timing today's fixed-shape ablation")
    args = ap.parse_args(argv)
    sentences = (list(BUILTIN_SENTENCES) if args.text == "builtin" else corpus() if args.text == "corpus"
                 else read_sentences(args.text))
    source = {"builtin": "built-in sentences", "corpus": "200 mixed-length sentences"}.get(args.text, args.text)
    print(machine_line(describe_machine(args.threads, check_cuda=False)), f"; {args.hogs} CPU hogs beside it")
    hogs = [mp.Process(target=_hog, daemon=True) for _ in range(args.hogs)]
    for h in hogs:
        h.start()
    try:
        print("| model | workload | ships | plan | fused vs unfused | tuned vs unfused | tuned vs the faster | "
              "plan took (s) | its ablation (s) | today's ablation (s) | load |\n"
              "|---|---|---|---|---:|---:|---:|---:|---:|---:|---|")
        for model in args.models.split(","):
            base = None if args.no_baseline else baseline_seconds(model, args.threads)
            for kind in args.workloads.split(","):
                r = one(model, sentences, source, kind, args.threads, args.runs)
                print(f"| {model} | {r['workload']} | {r['ships']} | {r['plan']} | {r['fused']:.3f}x | "
                      f"{r['tuned']:.3f}x | **{r['tuned_vs_best']:.3f}x** | {r['plan_s']:.1f} | {r['ablation_s']:.1f} | "
                      f"{'-' if base is None else f'{base:.1f}'} | {r['load']} |", flush=True)
    finally:
        for h in hogs:
            h.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
