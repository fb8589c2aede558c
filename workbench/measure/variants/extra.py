"""What the tuned and int8 recipes build from: this machine's plan, the guarded int8 search, the text they tune on.

``machine_plan`` runs a short ``fusion_ablation`` once per export, plan, processor and thread count
and caches its result (``cache/plans/<key>.json``); ``guarded_int8_of`` runs the answer-guarded
int8 search once per fused model and text (``cache/variants/<key>/model.onnx`` with
``search.json`` beside it). The recipes themselves are in :mod:`workbench.measure.variants`.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

GUARD_VERSION = 2
PLAN_VERSION = 1


def guard_text(src):
    """The text the int8 search guards on: the built-in sentences through the model's tokenizer, or, for a
    model without one, seeded random sequences (two batches of 8, lengths 32 and 64) checked as embeddings."""
    from ...errors import WorkbenchError
    from ...text import TextBatches, text_batches

    try:
        return text_batches(src)
    except WorkbenchError:
        from ...ort.inputs import make_inputs, spec_from_onnx
        from ...modelio import load_model

        spec = spec_from_onnx(load_model(src.path, load_external_data=False)) if src.kind == "onnx" else None
        if spec is None:
            from ...ort.inputs import InputSpec
            spec = InputSpec(names=src.input_names, vocab_size=src.vocab_size,
                             type_vocab_size=int(src.config_dict.get("type_vocab_size", 2)),
                             max_positions=src.max_positions)
        batches = tuple(make_inputs(spec, 8, s, seed=7 + s, padded=True) for s in (32, 64))
        return TextBatches(tuple(f"random sequence {i}" for i in range(16)), batches, "embedding")


def guarded_int8_of(fused: Path, text, *, threads: int = 2, progress=None) -> Path:
    """The answer-guarded int8 model of ``fused`` on ``text``, searched once and cached."""
    from .guarded import THRESHOLDS, search_int8
    from .models import cached

    h = hashlib.sha256(json.dumps([list(text.sentences), text.kind, THRESHOLDS, GUARD_VERSION, threads])
                       .encode()).hexdigest()[:16]

    def build(out: Path) -> None:
        rep = search_int8(Path(fused), text, out, threads=threads, progress=progress)
        (out.parent / "search.json").write_text(json.dumps(rep, indent=1, default=str))

    return cached(Path(fused), f"int8-guarded-{h}", build)


def machine_plan(src, export_path: Path, plan=None, *, threads: int = 2, runs: int = 12, progress=None,
                 exporter: str = "torchscript", attention: str = "eager") -> tuple[object, dict]:
    """This machine's fusion plan (the ablation's tuned plan) and the ablation's result as a dict, cached."""
    from ...config import BenchConfig, FusionPlan
    from ...models import file_identity
    from ...ort.machine import describe_machine
    from ...cache.atomic import atomic_write_text
    from ...cache.root import cache_root
    from ..tune.ablation import fusion_ablation

    plan = plan or FusionPlan()
    cpu = describe_machine(threads, check_cuda=False).get("cpu")
    key = hashlib.sha256(json.dumps([file_identity(Path(export_path)), plan.engine, sorted(plan.disabled),
                                     sorted(plan.opted_in), cpu, threads, PLAN_VERSION]).encode()).hexdigest()[:24]
    path = cache_root() / "plans" / f"{key}.json"
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        res = fusion_ablation(src, BenchConfig(threads=threads, runs=runs, warmup=2), plan=plan, exporter=exporter,
                              attention=attention, progress=progress)
        doc = res.to_dict()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(path, json.dumps(doc, default=str))
        except OSError:
            pass  # a read-only or full cache only costs the ablation again next time
    t = doc["tuned_plan"]
    return FusionPlan(engine=t["engine"], disabled=frozenset(t["disabled"]), opted_in=frozenset(t["enabled"])), doc


def search_text_of(src, text=None):
    """The search part of the text (of the built-in sentences without one), one sentence per batch: what the
    calibrated recipes calibrate on and the guarded ones guard on; seeded random sequences without a tokenizer."""
    from ...errors import WorkbenchError
    from ..tune.workload import one_at_a_time, split

    try:
        return one_at_a_time(src, split(list(text.sentences) if text is not None else None).search)
    except WorkbenchError:
        if text is not None and src.kind != "onnx":
            raise
        return guard_text(src)


__all__ = ["guard_text", "search_text_of", "guarded_int8_of", "machine_plan", "GUARD_VERSION"]
