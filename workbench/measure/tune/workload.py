"""The two workloads an embedding user serves.

* ``latency``: one sentence at a time, batch 1, each sentence at its own length (a search query
  served online); p50 over the sentences.
* ``throughput``: a corpus embedded in batches: the text repeated to at least :data:`CORPUS_MIN`
  sentences, sorted by length, cut into batches padded to each batch's longest (in the worker:
  :func:`workbench.measure.worker.serve.pad_batch`), the batch size chosen per variant from a short
  search (:data:`BATCH_SIZES`); sentences per second.

The text's search part and check part (what keeps the answers honest) are :mod:`workbench.measure.variants.split`:
the variant recipes calibrate and guard on the search part.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...errors import ConfigError

if TYPE_CHECKING:
    from ..variants.split import Split

WORKLOADS = ("latency", "throughput", "both")
#: Batch sizes the throughput search tries, per variant.
BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64)
#: The throughput corpus: the text repeated to at least this many sentences.
CORPUS_MIN = 256


def workloads(name: str | None, has_text: bool) -> tuple[str, ...]:
    """``"both"`` → ("latency", "throughput"); None → both with a text, latency without."""
    name = name or ("both" if has_text else "latency")
    if name not in WORKLOADS:
        raise ConfigError(f"--workload must be one of {', '.join(WORKLOADS)}, not {name!r}")
    return ("latency", "throughput") if name == "both" else (name,)


def latency_text(src, parts: Split):
    """The latency workload: every sentence of both parts at batch 1, and which batches are which part.

    Returns ``(TextBatches, {"search": [batch index, ...], "check": [...]})``.
    """
    # lazy: the command line's parser reads WORKLOADS at every start; the variants package loads onnx
    from ..variants.split import one_at_a_time

    text = one_at_a_time(src, parts.search + parts.check)
    n = len(parts.search)
    return text, {"search": list(range(n)), "check": list(range(n, n + len(parts.check)))}


def serve_job(text, parts: dict, pad_id: int, corpus_min: int = CORPUS_MIN) -> dict:
    """The throughput workload as the worker takes it: the sentences one row each, the corpus (the
    sentence indices repeated to ``corpus_min`` and sorted by length), the parts, the batch sizes."""
    lengths = [int(b["attention_mask"].sum()) for b in text.batches]
    n = len(lengths)
    reps = max(1, -(-corpus_min // n))
    corpus = sorted((i for _ in range(reps) for i in range(n)), key=lambda i: (lengths[i], i))
    return {"kind": text.kind, "mask_token_id": text.mask_token_id, "sentences": [dict(b) for b in text.batches],
            "corpus": corpus, "parts": parts, "pad_id": int(pad_id), "batch_sizes": list(BATCH_SIZES)}


def pad_id_of(src) -> int:
    """The tokenizer's padding id (0 when it has none)."""
    try:
        tok = src.tokenizer()
    except Exception:  # noqa: BLE001 - no tokenizer: the seeded random text pads with 0
        return 0
    return int(tok.pad_token_id) if getattr(tok, "pad_token_id", None) is not None else 0


__all__ = ["WORKLOADS", "BATCH_SIZES", "CORPUS_MIN", "workloads", "latency_text", "serve_job", "pad_id_of"]
