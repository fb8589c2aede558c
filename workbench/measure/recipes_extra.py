"""The variants beyond the standard five: the peers a user would pick instead, this machine's plan, guarded int8.

``machine_plan`` runs a short ``fusion_ablation`` once per export, plan, processor and thread count
and caches its result (``cache/plans/<key>.json``); ``guarded_int8_of`` runs the answer-guarded
int8 search once per fused model and text (``cache/variants/<key>/model.onnx`` with
``search.json`` beside it). ``available`` splits variant names into those that can run here and
those skipped with the reason (no OpenVINO, no C++ compiler for inductor).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from .bench import Variant

GUARD_VERSION = 2
PLAN_VERSION = 1


def available(names, model=None) -> tuple[list[str], list[dict]]:
    """``(runnable names, skipped [{"name", "why"}])``; the peers are checked here, nothing else."""
    from .peers import status

    ok, skipped = [], []
    for n in names:
        good, why = status(n)
        if good:
            ok.append(n)
        else:
            skipped.append({"name": n, "why": why})
    return ok, skipped


def guard_text(src):
    """The text the int8 search guards on: the built-in sentences through the model's tokenizer, or, for a
    model without one, seeded random sequences (two batches of 8, lengths 32 and 64) checked as embeddings."""
    from ..errors import WorkbenchError
    from ..text import TextBatches, text_batches

    try:
        return text_batches(src)
    except WorkbenchError:
        from ..ort.inputs import make_inputs, spec_from_onnx
        from ..modelio import load_model

        spec = spec_from_onnx(load_model(src.path, load_external_data=False)) if src.kind == "onnx" else None
        if spec is None:
            from ..ort.inputs import InputSpec
            spec = InputSpec(names=src.input_names, vocab_size=src.vocab_size,
                             type_vocab_size=int(src.config_dict.get("type_vocab_size", 2)),
                             max_positions=src.max_positions)
        batches = tuple(make_inputs(spec, 8, s, seed=7 + s, padded=True) for s in (32, 64))
        return TextBatches(tuple(f"random sequence {i}" for i in range(16)), batches, "embedding")


def guarded_int8_of(fused: Path, text, *, threads: int = 2, progress=None) -> Path:
    """The answer-guarded int8 model of ``fused`` on ``text``, searched once and cached."""
    from .guarded import THRESHOLDS, search_int8
    from .recipes import _cached

    h = hashlib.sha256(json.dumps([list(text.sentences), text.kind, THRESHOLDS, GUARD_VERSION, threads])
                       .encode()).hexdigest()[:16]

    def build(out: Path) -> None:
        rep = search_int8(Path(fused), text, out, threads=threads, progress=progress)
        (out.parent / "search.json").write_text(json.dumps(rep, indent=1, default=str))

    return _cached(Path(fused), f"int8-guarded-{h}", build)


def machine_plan(src, export_path: Path, plan=None, *, threads: int = 2, runs: int = 12, progress=None,
                 exporter: str = "torchscript", attention: str = "eager") -> tuple[object, dict]:
    """This machine's fusion plan (the ablation's tuned plan) and the ablation's result as a dict, cached."""
    from ..config import BenchConfig, FusionPlan
    from ..models import file_identity
    from ..ort.machine import describe_machine
    from ..cache.atomic import atomic_write_text
    from ..cache.root import cache_root
    from .ablation import fusion_ablation

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


def variants(model="bert-base", names=("torch", "unfused", "fused", "int8"), *, provider: str = "cpu",
             attention: str = "eager", progress=None, plan=None, exporter: str = "torchscript",
             opset: int | None = None, extra: dict | None = None) -> list[Variant]:
    """Like :func:`~workbench.measure.recipes.standard_variants`, with the names of :data:`recipes.EXTRA` too.

    ``extra``: ``text`` (TextBatches the int8 search guards the answers on; default the built-in
    sentences), ``search_text`` (the part the calibrated and guarded int8 recipes tune on; default
    the search part of ``text``'s split, :func:`search_text_of`), ``threads`` (default 2),
    ``tuned_plan`` (a FusionPlan; default: this machine's plan from a short, cached ablation).

    Raises:
        ConfigError: an unknown name. BenchmarkError, RuntimeUnavailableError: as ``standard_variants``.
    """
    from ..config import ExportConfig
    from ..errors import BenchmarkError, ConfigError, RuntimeUnavailableError
    from ..export import export
    from ..models import ModelSource, resolve
    from .recipes import ALL, EXTRA, STANDARD, TORCH_SKIPPED, fuse_bert, standard_variants

    progress = progress or (lambda stage, f: None)
    names = [n.strip() for n in names if n.strip()]
    unknown = [n for n in names if n not in ALL]
    if unknown or not names:
        raise ConfigError(f"unknown variant(s) {', '.join(unknown) or '(none)'}; choose from {', '.join(ALL)}")
    cpu_only = {"int8-guarded", "int8-static", "openvino", "openvino-f32", "openvino-int8", "openvino-int8-guarded"}
    if provider == "cuda" and cpu_only & set(names):
        raise RuntimeUnavailableError("the int8 and OpenVINO variants run on the CPU only; drop them or use "
                                      "--provider cpu")
    src = model if isinstance(model, ModelSource) else resolve(model)
    if src.kind == "onnx" and "torch-compile" in names:
        raise BenchmarkError(f"{src.name} is an ONNX file: {TORCH_SKIPPED}; drop torch-compile from --variants")
    std = [n for n in names if n in STANDARD]
    built = {v.name: v for v in (standard_variants(src, std, provider=provider, attention=attention,
                                                   progress=progress, plan=plan, exporter=exporter, opset=opset)
                                 if std else [])}
    if any(n in EXTRA for n in names):
        exp = export(src, ExportConfig(exporter=exporter, attention=attention, opset=opset))
        fused = (fuse_bert(exp.path, num_heads=src.num_heads or 0, hidden_size=src.hidden_size or 0, plan=plan)
                 if {"int8-guarded", "int8-static"} & set(names) else None)
        for n in names:
            if n in EXTRA:
                built[n] = _extra_variant(n, src, exp.path, fused, provider, attention, plan, progress,
                                          **(extra or {}))
    return [built[n] for n in names]


def search_text_of(src, text=None):
    """The search part of the text (of the built-in sentences without one), one sentence per batch: what the
    calibrated recipes calibrate on and the guarded ones guard on; seeded random sequences without a tokenizer."""
    from ..errors import WorkbenchError
    from .workload import one_at_a_time, split

    try:
        return one_at_a_time(src, split(list(text.sentences) if text is not None else None).search)
    except WorkbenchError:
        if text is not None and src.kind != "onnx":
            raise
        return guard_text(src)


def _openvino(name: str, src, export_path: Path, text, threads: int, search_text) -> Variant:
    from .ov_quant import openvino_int8_guarded_of, openvino_int8_of
    from .peers import OPENVINO_VARIANTS

    prec = OPENVINO_VARIANTS[name]
    options = {"precision": prec} if prec else {}
    if name in ("openvino-int8", "openvino-int8-guarded"):
        part = search_text if search_text is not None else search_text_of(src, text)
        ir = (openvino_int8_of(export_path, part) if name == "openvino-int8"
              else openvino_int8_guarded_of(export_path, part, threads=threads))
        options["ir"] = str(ir)
    return Variant(name, export_path, provider="cpu", kind="openvino", options=options)


def _extra_variant(name: str, src, export_path: Path, fused: Path | None, provider: str, attention: str, plan,
                   progress, *, text=None, threads: int = 2, tuned_plan=None, ablation: dict | None = None,
                   search_text=None) -> Variant:
    from ..fusion.catalog import session_optimizers_off
    from .peers import OPENVINO_VARIANTS
    from .recipes import fuse_bert

    heads, hidden = src.num_heads or 0, src.hidden_size or 0
    if name == "torch-compile":
        ts = {"model": str(src.path) if src.kind == "folder" else src.name, "attention": attention, "seed": src.seed}
        return Variant(name, provider=provider, kind="torch", torch_source=ts, options={"compile": True})
    if name in OPENVINO_VARIANTS:
        progress(f"{name}", 0.8)
        return _openvino(name, src, export_path, text, threads, search_text)
    if name == "int8-static":
        from .static_int8 import int8_static_of

        progress("static int8 (calibrating)", 0.8)
        keep_off = session_optimizers_off(plan.disabled) if plan is not None else ()
        path = int8_static_of(fused, search_text if search_text is not None else search_text_of(src, text))
        return Variant(name, path, provider="cpu", disabled_optimizers=keep_off)
    if name == "tuned":
        progress("this machine's plan (ablation)", 0.6)
        if tuned_plan is None:
            tuned_plan, _ = machine_plan(src, export_path, plan, threads=threads, progress=None)
        path = fuse_bert(export_path, num_heads=heads, hidden_size=hidden, plan=tuned_plan)
        return Variant(name, path, provider=provider, disabled_optimizers=session_optimizers_off(tuned_plan.disabled))
    if name == "int8-guarded":
        progress("answer-guarded int8 search", 0.75)
        guard = search_text if search_text is not None else (text if text is not None else guard_text(src))
        path = guarded_int8_of(fused, guard, threads=threads, progress=lambda stage, f: progress(stage, 0.75))
        keep_off = session_optimizers_off(plan.disabled) if plan is not None else ()
        return Variant(name, path, provider="cpu", disabled_optimizers=keep_off)
    raise ValueError(name)


__all__ = ["variants", "available", "guard_text", "search_text_of", "guarded_int8_of", "machine_plan", "GUARD_VERSION"]
