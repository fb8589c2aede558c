"""What the int8 recipes build from: the guarded int8 search and the text they tune on.

(This machine's plan, which the ``tuned`` recipe builds from, is the tune's: :mod:`workbench.measure.tune.plan`
computes it and its caller hands it to the recipe as ``Build.tuned_plan``.) ``guarded_int8_of`` runs the answer-guarded
int8 search once per fused model and text (``cache/variants/<key>/model.onnx`` with
``search.json`` beside it). The recipes themselves are in :mod:`workbench.measure.variants`.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ...errors import WorkbenchError
from ...modelio import load_model
from ...ort.inputs import InputSpec, make_inputs, spec_from_onnx
from ...text import TextBatches, text_batches
from .guarded import THRESHOLDS, search_int8
from .models import cached
from .split import one_at_a_time, split

GUARD_VERSION = 2


def guard_text(src):
    """The text the int8 search guards on: the built-in sentences through the model's tokenizer, or, for a
    model without one, seeded random sequences (two batches of 8, lengths 32 and 64) checked as embeddings."""
    try:
        return text_batches(src)
    except WorkbenchError:
        spec = spec_from_onnx(load_model(src.path, load_external_data=False)) if src.kind == "onnx" else None
        if spec is None:
            spec = InputSpec(names=src.input_names, vocab_size=src.vocab_size,
                             type_vocab_size=int(src.config_dict.get("type_vocab_size", 2)),
                             max_positions=src.max_positions)
        batches = tuple(make_inputs(spec, 8, s, seed=7 + s, padded=True) for s in (32, 64))
        return TextBatches(tuple(f"random sequence {i}" for i in range(16)), batches, "embedding")


def guarded_int8_of(fused: Path, text, *, threads: int = 2, progress=None) -> Path:
    """The answer-guarded int8 model of ``fused`` on ``text``, searched once and cached."""
    h = hashlib.sha256(json.dumps([list(text.sentences), text.kind, THRESHOLDS, GUARD_VERSION, threads])
                       .encode()).hexdigest()[:16]

    def build(out: Path) -> None:
        rep = search_int8(Path(fused), text, out, threads=threads, progress=progress)
        (out.parent / "search.json").write_text(json.dumps(rep, indent=1, default=str))

    return cached(Path(fused), f"int8-guarded-{h}", build)


def search_text_of(src, text=None):
    """The search part of the text (of the built-in sentences without one), one sentence per batch: what the
    calibrated recipes calibrate on and the guarded ones guard on; seeded random sequences without a tokenizer."""
    try:
        return one_at_a_time(src, split(list(text.sentences) if text is not None else None).search)
    except WorkbenchError:
        if text is not None and src.kind != "onnx":
            raise
        return guard_text(src)


__all__ = ["guard_text", "search_text_of", "guarded_int8_of", "GUARD_VERSION"]
