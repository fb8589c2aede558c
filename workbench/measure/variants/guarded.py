"""Answer-guarded int8: the fastest int8 model whose answers hold on the sentences, found by measuring.

Plain dynamic int8 (per-channel weight scales, activations quantized per tensor per run) changes a
real model's answers: on all-MiniLM-L6-v2 with the built-in sentences, Spearman 0.986 of the
sentences' similarities and one nearest neighbour in twenty changed. The search tries groups and
methods, not single nodes (keeping single MatMuls in fp32 one at a time barely helps):

1. one candidate per method on every weight: int8 per channel (the standard ``int8``), int8 per
   tensor, SmoothQuant scaling of the feed-forward down-projections (:mod:`.smooth`, from the
   sentences' activation ranges), 8-bit blockwise weights (``MatMulNBits``, accuracy level 4) on
   those projections with int8 elsewhere;
2. one candidate per layer role kept in fp32 (``qkv``, ``attn_out``, ``ffn_up``, ``ffn_down``);
3. if none holds, the best role candidate plus one more group of one layer, cheapest first
   (attention output, then q/k/v, then feed-forward up), until one holds.

Answers are checked in this process against the fp32 model (:data:`workbench.ort.answer_policy.THRESHOLDS`); then every
candidate whose answers hold, with plain int8 and the fp32 model, is timed briefly in the
benchmark worker on the same text, and the fastest that holds wins. The report keeps every
candidate: what it kept in fp32, its share of the MatMul work left in fp32, its answers and p50.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np
import onnx

from ...cache.model_store import sidecar
from ...config import BenchConfig
from ...modelio import copy_model
from ...ort.answer_policy import THRESHOLDS, TaskParity, holds
from ...ort.session import create_session
from ...ort.task_parity import task_parity
from ..harness.bench import benchmark
from ..harness.results import Variant
from .smooth import activation_absmax, matmul_roles, smooth

Progress = Callable[[str, float], None]


def _quantize(model, out: Path, exclude=(), per_channel: bool = True) -> Path:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    tmp = Path(tempfile.mkdtemp(prefix="workbench-guard-"))
    try:
        onnx.save(model, str(tmp / "in.onnx"))
        quiet = logging.getLogger()
        old = quiet.level
        quiet.setLevel(logging.ERROR)
        try:
            quantize_dynamic(str(tmp / "in.onnx"), str(out), weight_type=QuantType.QInt8, per_channel=per_channel,
                             nodes_to_exclude=list(exclude),
                             extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
        finally:
            quiet.setLevel(old)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _nbits(model, include: list[str]):
    """8-bit blockwise weights on ``include`` (a copy: the quantizer edits the model it is given)."""
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    m = onnx.ModelProto()
    m.CopyFrom(model)
    model = m

    quiet = logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer")
    old = quiet.level
    quiet.setLevel(logging.CRITICAL)
    try:
        q = MatMulNBitsQuantizer(model, bits=8, block_size=32, is_symmetric=True, accuracy_level=4,
                                 nodes_to_include=list(include))
        q.process()
    finally:
        quiet.setLevel(old)
    return q.model.model


def _weight_sizes(model, roles: dict) -> dict:
    inits = {i.name: i for i in model.graph.initializer}
    by = {n.name: n for n in model.graph.node}
    out = {}
    for name in roles:
        w = inits.get(by[name].input[1])
        out[name] = int(np.prod(w.dims)) if w is not None else 0
    return out


class _Search:
    """One search: the fp32 model, its reference answers, and every candidate tried."""

    def __init__(self, fused: Path, text, workdir: Path, threads: int, say: Progress):
        self.fused, self.text, self.dir, self.threads, self.say = Path(fused), text, workdir, threads, say
        self.model = onnx.load(str(fused))
        self.roles = matmul_roles(self.model)
        self.sizes = _weight_sizes(self.model, self.roles)
        self.feeds = list(text.batches)
        self.ref = self._outputs(self.fused)
        self.candidates: list[dict] = []

    def _outputs(self, path) -> list:
        sess = create_session(path, "cpu", level="all", threads=self.threads)
        names = {i.name for i in sess.get_inputs()}
        return [sess.run(None, {k: v for k, v in f.items() if k in names})[0] for f in self.feeds]

    def nodes(self, *roles, layer: int | None = None) -> list[str]:
        out = [n for n, r in self.roles.items() if r in roles]
        if layer is not None:
            out = [n for n in out if _layer_of(n) == layer]
        return out

    def try_(self, label: str, method: str, kept: list[str], build) -> dict:
        path = self.dir / f"c{len(self.candidates)}.onnx"
        self.say(f"int8 candidate: {label}", 0.0)
        build(path)
        tp = task_parity(self.text.kind, self.ref, self._outputs(path), self.feeds,
                         mask_token_id=self.text.mask_token_id)
        total = sum(self.sizes.values()) or 1
        c = {"label": label, "method": method, "kept_fp32": sorted(kept),
             "kept_fp32_share": sum(self.sizes.get(n, 0) for n in kept) / total,
             "task_parity": tp, "holds": holds(tp), "path": str(path), "p50_ms": None}
        self.candidates.append(c)
        return c


def _layer_of(name: str) -> int | None:
    """The encoder layer of a node from its name ("/encoder/layer.3/...", "Attention_3")."""
    m = re.search(r"layer[._/](\d+)", name) or re.search(r"_(\d+)$", name)
    return int(m.group(1)) if m else None


def _methods(s: _Search) -> None:
    down = s.nodes("ffn_down")
    s.try_("int8 per channel everywhere", "dynamic int8, per channel", [],
           lambda p: _quantize(s.model, p))
    s.try_("int8 per tensor everywhere", "dynamic int8, per tensor", [],
           lambda p: _quantize(s.model, p, per_channel=False))
    if down:
        by = {n.name: n for n in s.model.graph.node}
        xs = [by[n].input[0] for n in down]
        am = activation_absmax(s.model, s.feeds, xs, threads=s.threads)
        s.try_("SmoothQuant on the feed-forward down-projections (alpha 0.75)", "SmoothQuant + dynamic int8", [],
               lambda p: _quantize(smooth(s.model, down, am, 0.75), p))
        s.try_("8-bit blockwise feed-forward down-projections, int8 elsewhere",
               "MatMulNBits 8-bit (block 32) + dynamic int8", [],
               lambda p: _quantize(_nbits(s.model, down), p))


def _roles(s: _Search) -> None:
    for role in ("ffn_down", "ffn_up", "attn_out", "qkv"):
        kept = s.nodes(role)
        if kept:
            s.try_(f"fp32 {role}", "dynamic int8, per channel", kept, lambda p, k=kept: _quantize(s.model, p, k))


def _greedy(s: _Search, budget: int) -> None:
    """From the best role candidate, keep one more group of one layer in fp32, cheapest first."""
    role_c = [c for c in s.candidates if c["label"].startswith("fp32 ")]
    if not role_c:
        return
    best = max(role_c, key=lambda c: TaskParity.of(c["task_parity"]).ranking or 0)
    layers = sorted({_layer_of(n) for n in s.roles} - {None})
    tried = 0
    for role in ("attn_out", "qkv", "ffn_up", "ffn_down"):
        for layer in layers:
            extra = [n for n in s.nodes(role, layer=layer) if n not in best["kept_fp32"]]
            if not extra or tried >= budget:
                continue
            kept = best["kept_fp32"] + extra
            tried += 1
            c = s.try_(f"{best['label']} + fp32 {role} of layer {layer}", "dynamic int8, per channel", kept,
                       lambda p, k=kept: _quantize(s.model, p, k))
            if c["holds"]:
                return


def _answers_rank(c: dict) -> tuple:
    """How good a candidate's answers are, for the pick when none holds: its ranking figure, then its agreement."""
    t = TaskParity.of(c["task_parity"])
    return (t.ranking or 0, t.agreement or 0)


def _time(s: _Search, runs: int) -> None:
    timed = [c for c in s.candidates if c["holds"]] + [s.candidates[0]]
    variants = [Variant("fp32", s.fused)] + [Variant(f"c{i}", c["path"]) for i, c in enumerate(s.candidates)
                                            if c in timed]
    s.say("timing the candidates", 0.8)
    res = benchmark(variants, BenchConfig(runs=runs, warmup=2, threads=s.threads), text=s.text, floor=False)
    s.fp32_p50 = res["fp32"].p50_ms
    for i, c in enumerate(s.candidates):
        if c in timed:
            c["p50_ms"] = res[f"c{i}"].p50_ms


def search_int8(fused: Path, text, out: Path, *, threads: int = 2, runs: int = 10, budget: int = 12,
                progress: Progress | None = None) -> dict:
    """Search, write the winner to ``out`` and return the report (plain data, JSON-ready).

    Returns:
        ``{"chosen": label, "holds": bool, "kept_fp32": [...], "kept_fp32_share", "task_parity", "p50_ms",
        "fp32_p50_ms", "speedup_vs_fp32", "thresholds", "text", "candidates": [...]}``. With no candidate
        holding, the chosen one is the one with the best answers, ``holds`` False.
    """
    say = progress or (lambda stage, f: None)
    work = Path(tempfile.mkdtemp(prefix="workbench-guard-"))
    try:
        s = _Search(fused, text, work, threads, say)
        _methods(s)
        _roles(s)
        if not any(c["holds"] for c in s.candidates):
            _greedy(s, budget)
        _time(s, runs)
        ok = [c for c in s.candidates if c["holds"] and c["p50_ms"]]
        chosen = min(ok, key=lambda c: c["p50_ms"]) if ok else max(s.candidates, key=_answers_rank)
        copy_model(chosen["path"], out)  # with its weights, wherever the quantizer put them
        for c in s.candidates:
            c.pop("path", None)
        report = {"chosen": chosen["label"], "method": chosen["method"], "holds": bool(chosen["holds"]),
                  "kept_fp32": chosen["kept_fp32"], "kept_fp32_share": chosen["kept_fp32_share"],
                  "task_parity": chosen["task_parity"], "p50_ms": chosen["p50_ms"], "fp32_p50_ms": s.fp32_p50,
                  "speedup_vs_fp32": (s.fp32_p50 / chosen["p50_ms"]) if chosen["p50_ms"] else None,
                  "thresholds": THRESHOLDS.get(text.kind, {}), "text": text.describe(), "threads": threads,
                  "candidates": s.candidates}
        return report
    finally:
        shutil.rmtree(work, ignore_errors=True)


def search_report(model_path: Path) -> dict | None:
    """The search report saved beside a cached int8-guarded model, or None."""
    p = sidecar(Path(model_path), "search.json")
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return None


__all__ = ["search_int8", "search_report"]
