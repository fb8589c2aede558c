"""The two workloads an embedding user serves, and the text split that keeps the answers honest.

* ``latency``: one sentence at a time, batch 1, each sentence at its own length (a search query
  served online); p50 over the sentences.
* ``throughput``: a corpus embedded in batches: the text repeated to at least :data:`CORPUS_MIN`
  sentences, sorted by length, cut into batches padded to each batch's longest, the batch size
  chosen per variant from a short search (:data:`BATCH_SIZES`); sentences per second.

The text is split into a **search part** (what the int8 searches guard on and the static int8
recipes calibrate on) and a **check part** (the answers that decide the recommendation), so an
int8 model is never judged on the sentences it was tuned on. The built-in sentences have a fixed
split that keeps each group of paraphrases together (:data:`BUILTIN_CHECK`); a user's text puts
every third distinct sentence in the check part (every second below nine), and a text of three to
five distinct sentences is all check part, the search running on the built-in sentences.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import ConfigError

WORKLOADS = ("latency", "throughput", "both")
#: Batch sizes the throughput search tries, per variant.
BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64)
#: The throughput corpus: the text repeated to at least this many sentences.
CORPUS_MIN = 256
#: The built-in sentences that form the check part (indices into ``text.BUILTIN_SENTENCES``):
#: whole groups of paraphrases (passwords, capitals, deep learning, phones, photosynthesis) and a
#: one-word line, so the check part has real nearest neighbours of its own.
BUILTIN_CHECK = (2, 3, 10, 11, 12, 19, 20, 25, 26, 30, 32, 33, 38)


@dataclass(frozen=True)
class Split:
    """The search part and the check part of a text, and where each came from."""

    search: tuple[str, ...]
    check: tuple[str, ...]
    source: str  # "built-in", "text" or "text (check) + built-in (search)"

    def describe(self) -> dict:
        return {"search": len(self.search), "check": len(self.check), "source": self.source}


def workloads(name: str | None, has_text: bool) -> tuple[str, ...]:
    """``"both"`` → ("latency", "throughput"); None → both with a text, latency without."""
    name = name or ("both" if has_text else "latency")
    if name not in WORKLOADS:
        raise ConfigError(f"--workload must be one of {', '.join(WORKLOADS)}, not {name!r}")
    return ("latency", "throughput") if name == "both" else (name,)


def split(sentences=None) -> Split:
    """The fixed split (see the module doc); a text too small to check answers is refused in one line."""
    from ...ort.task_parity import MIN_DISTINCT, too_small_line
    from ...text import BUILTIN_SENTENCES

    if sentences is None or tuple(sentences) == BUILTIN_SENTENCES:
        check = tuple(BUILTIN_SENTENCES[i] for i in BUILTIN_CHECK)
        search = tuple(s for i, s in enumerate(BUILTIN_SENTENCES) if i not in BUILTIN_CHECK)
        return Split(search, check, "built-in")
    distinct = list(dict.fromkeys(str(s) for s in sentences))
    if len(distinct) < MIN_DISTINCT:
        raise ConfigError(f"the text is {too_small_line(len(distinct))} (tune checks answers on a part it did not "
                          f"tune on: give at least {2 * MIN_DISTINCT}, or leave out --text for the built-in "
                          f"sentences)")
    if len(distinct) < 2 * MIN_DISTINCT:
        search = tuple(s for i, s in enumerate(BUILTIN_SENTENCES) if i not in BUILTIN_CHECK)
        return Split(search, tuple(distinct), "text (check) + built-in (search)")
    every = 3 if len(distinct) >= 3 * MIN_DISTINCT else 2
    check = tuple(s for i, s in enumerate(distinct) if i % every == every - 1)
    search = tuple(s for i, s in enumerate(distinct) if i % every != every - 1)
    return Split(search, check, "text")


def one_at_a_time(src, sentences):
    """TextBatches of one sentence each at its own length (no padding), in the order given."""
    from ...text import text_batches

    return text_batches(src, list(sentences), batch_size=1, buckets=tuple(range(1, 513)))


def latency_text(src, parts: Split):
    """The latency workload: every sentence of both parts at batch 1, and which batches are which part.

    Returns ``(TextBatches, {"search": [batch index, ...], "check": [...]})``.
    """
    text = one_at_a_time(src, parts.search + parts.check)
    n = len(parts.search)
    return text, {"search": list(range(n)), "check": list(range(n, n + len(parts.check)))}


def pad_batch(rows: list[dict], pad_id: int) -> dict:
    """Sentences of one row each (their own lengths) → one batch right-padded to its longest."""
    import numpy as np

    longest = max(int(r["input_ids"].shape[1]) for r in rows)
    out = {}
    for k in rows[0]:
        fill = pad_id if k == "input_ids" else 0
        a = np.full((len(rows), longest), fill, dtype=np.int64)
        for i, r in enumerate(rows):
            a[i, :r[k].shape[1]] = r[k][0]
        out[k] = a
    return out


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


__all__ = ["WORKLOADS", "BATCH_SIZES", "CORPUS_MIN", "BUILTIN_CHECK", "Split", "workloads", "split",
           "one_at_a_time", "latency_text", "pad_batch", "serve_job", "pad_id_of"]
