"""Does fusion or lower precision change the answers? Task parity step by step and per precision.

One plain function for the benchmark script, notebook 05 and the app: the
model's tokenizer over real sentences, every fusion snapshot checked against
the unfused export (:meth:`Timeline.check_parity` with text), then the
precision variants (int8 per channel as in the benchmarks, int8 per tensor,
fp16) against the same reference. No timing here: answers only.
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np

from ...config import FusionPlan
from ...errors import WorkbenchError, first_line
from ...export import export
from ...fusion.timeline import Timeline
from ...models import ModelSource, resolve
from ...ort.answer_policy import holds, words
from ...ort.parity import compare
from ...ort.session import create_session, run_session
from ...ort.task_parity import mean_pool, task_parity
from ...text import text_batches
from ..worker.precision import quantize_int8
from . import is_quantized
from .models import cached, fp16_of, fuse_bert, int8_of

PRECISIONS = ("int8", "int8-per-tensor", "fp16")
Progress = Callable[[str, float], None]


def _outputs(path, feeds: list[dict], level: str) -> list:
    sess = create_session(path, "cpu", level=level, threads=2)
    names = {i.name for i in sess.get_inputs()}
    return [run_session(sess, {k: v for k, v in f.items() if k in names})[0] for f in feeds]


def neighbour_changes(sentences, reference: list, candidate: list, feeds: list[dict]) -> list[dict]:
    """For embeddings: each sentence whose most similar other sentence changed, with both neighbours."""
    def nearest(outs):
        e = np.concatenate([mean_pool(o, f["attention_mask"]) for o, f in zip(outs, feeds)])
        e = e / np.maximum(np.linalg.norm(e, axis=1, keepdims=True), 1e-12)
        sim = e @ e.T
        np.fill_diagonal(sim, -np.inf)
        return sim.argmax(axis=1), sim

    a, sa = nearest(reference)
    b, sb = nearest(candidate)
    return [{"sentence": sentences[i], "before": sentences[a[i]], "after": sentences[b[i]],
             "similarity_before": float(sa[i, a[i]]), "similarity_after": float(sb[i, b[i]])}
            for i in range(len(a)) if a[i] != b[i]]


def _precision_model(name: str, fused):
    if name == "int8":
        return int8_of(fused)
    if name == "int8-per-tensor":  # the earlier recipe, kept to show what per-channel scales buy
        return cached(fused, "int8-per-tensor", lambda out: quantize_int8(fused, out))
    if name == "fp16":
        return fp16_of(fused)
    raise WorkbenchError(f"unknown precision {name!r} (one of {', '.join(PRECISIONS)})")


def _precision_answers(name: str, fused, ref: list, text) -> dict:
    """One precision's answers against the unfused export's ``ref`` (+ changed neighbours for embeddings), or
    ``{"error": line}`` when it cannot be built or run here."""
    try:
        got = _outputs(_precision_model(name, fused), list(text.batches), "all")
    except WorkbenchError as e:
        return {"error": str(e)}
    except Exception as e:  # e.g. an fp16 kernel this CPU build lacks
        return {"error": f"ONNX Runtime cannot run {name} here: {first_line(e)}"}
    d = task_parity(text.kind, ref, got, list(text.batches), mask_token_id=text.mask_token_id)
    p = compare(ref, got)
    d.update(max_abs_diff=p.max_abs_diff, cosine=p.cosine)
    if text.kind == "embedding":
        d["changed"] = neighbour_changes(text.sentences, ref, got, list(text.batches))
    return d


def task_answers(model="minilm", sentences=None, *, plan=None, precisions=PRECISIONS, text=None,
                 progress: Progress | None = None) -> dict:
    """Task parity of every fusion snapshot and of each precision, against the unfused export.

    Args:
        model: preset, real-model name, folder (it needs a tokenizer) or a ModelSource.
        sentences: the text (default: :data:`workbench.text.BUILTIN_SENTENCES`).
        plan: the fusion plan (default: engine "auto", default steps).
        precisions: any of "int8" (per channel, the benchmarks' variant), "int8-per-tensor", "fp16".
        text: already tokenized ``TextBatches`` (then ``sentences`` is ignored).

    Returns:
        ``{"model", "text", "steps": [{"step", "fused_here", "task_parity"}], "final", "precisions":
        {name: task_parity (+ "changed" neighbours for embeddings) | {"error": line}}, "seconds"}``
    """
    t0 = time.perf_counter()
    say = progress or (lambda stage, f: None)
    plan = plan or FusionPlan()
    src = model if isinstance(model, ModelSource) else resolve(model)
    text = text or text_batches(src, sentences)
    say("export", 0.05)
    res = export(src)
    kw = src.timeline_args()
    say("fusion timeline", 0.2)
    tl = Timeline(res.path, plan, **kw)
    snaps = tl.run()
    tl.use_text(text)
    steps = []
    for i in range(1, len(snaps)):
        say(f"checking {snaps[i].step}", 0.2 + 0.5 * i / len(snaps))
        tl.check_parity(i)
        steps.append({"step": snaps[i].step, "fused_here": snaps[i].fused_here,
                      "task_parity": snaps[i].task_parity})
    out = {"model": src.describe(), "text": text.describe(), "engine": tl.engine_used, "steps": steps,
           "final": tl.final.task_parity, "precisions": {}}
    if precisions:
        from pathlib import Path

        fused = fuse_bert(Path(res.path), plan=plan, **kw)
        ref = _outputs(res.path, list(text.batches), "disable")
        for j, name in enumerate(precisions):
            say(f"{name}", 0.75 + 0.25 * j / len(precisions))
            out["precisions"][name] = _precision_answers(name, fused, ref, text)
    out["seconds"] = round(time.perf_counter() - t0, 1)
    say("done", 1.0)
    return out




def builtin_answers_text(src):
    """The built-in sentences through the model's tokenizer, to check answers on when no text was given
    (cheap: a few dozen sentences); None for a model without a tokenizer."""
    try:
        return text_batches(src)
    except WorkbenchError:
        return None


def int8_flags(stats, random_weights: bool = False) -> list[str]:
    """One line per int8 variant whose answers break (``VariantStats`` or rows with ``name``/``task_parity``),
    pointing at the guarded int8 and at ``workbench tune``; none for a model with random weights, whose
    answers mean nothing (what the check would mean is said instead, see ``ort.answer_policy.random_weights_words``)."""
    out = []
    if random_weights:
        return out
    for v in stats:
        name = v["name"] if isinstance(v, dict) else v.name
        tp = v.get("task_parity") if isinstance(v, dict) else v.task_parity
        if is_quantized(name) and tp and not holds(tp):
            out.append(f"{name}: its answers change ({words(tp)}); use int8-guarded (`--variants "
                       f"int8-guarded`) or `workbench tune`, which keep the answers")
    return out


def int8_report(res, text=None, random_weights: bool = False) -> dict:
    """``{"int8_flags", "int8_answers"}`` for a benchmark result; without a text (the built-in sentences
    checked int8 only) the variants' own task parity is cleared, so their table reads as without text."""
    flags, answers = int8_flags(res.variants, random_weights), {}
    if text is None:
        answers = {v.name: v.task_parity for v in res.variants if is_quantized(v.name) and v.task_parity}
        for v in res.variants:
            v.task_parity = None
    return {"int8_flags": flags, "int8_answers": answers}


__all__ = ["PRECISIONS", "task_answers", "neighbour_changes", "builtin_answers_text", "int8_flags", "int8_report"]
