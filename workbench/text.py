"""Real text in: sentences tokenized with the model's own tokenizer into padded batches.

Sentences are grouped as a server batches requests: each goes to the
smallest length bucket that holds it, batches are cut within a bucket in the
order the sentences come, and each batch is right-padded to its bucket, so
the padding is real padding and the lengths are a real mix.
Parity (:mod:`workbench.ort.task_parity`) and benchmarks run on these batches
as well as on the seeded random inputs.
"""

from __future__ import annotations

import os
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .errors import ConfigError, ModelSourceError
from .models import ModelSource
from .ort.task_parity import kind_for
from .path_checks import shown, too_long
from .settings import env_number

#: Sequence lengths a batch is padded up to (the smallest that holds its longest sentence).
BUCKETS: tuple[int, ...] = (16, 32, 64, 128, 256, 512)
DEFAULT_BATCH = 8
#: Every Nth real token of a sentence is masked for masked-LM checks (at least one per sentence).
MASK_EVERY = 6
MAX_FILE_BYTES = 5_000_000
#: The most sentences a check or benchmark uses (the first ones of the file); an environment variable raises it.
MAX_SENTENCES_ENV, DEFAULT_MAX_SENTENCES = "WORKBENCH_MAX_SENTENCES", 1000


def max_sentences() -> int:
    """The sentence cap: $WORKBENCH_MAX_SENTENCES, else :data:`DEFAULT_MAX_SENTENCES`."""
    return env_number(MAX_SENTENCES_ENV, DEFAULT_MAX_SENTENCES, integer=True, minimum=1, maximum=100_000_000)

#: Used when the user gives no text: short and long, questions, numbers, punctuation, near-paraphrases
#: (so a similarity ranking has real neighbours) and very short lines beside long ones (padding-heavy batches).
BUILTIN_SENTENCES: tuple[str, ...] = (
    "The cat sat on the mat.",
    "A cat was sitting on a rug in the living room, watching the rain run down the window for most of the afternoon.",
    "How do I reset my password?",
    "I forgot my password and cannot log in to my account; what should I do?",
    "Stocks fell 3.2% on Tuesday after the central bank raised interest rates by 0.25 points.",
    "The market dropped sharply when the bank announced higher rates.",
    "Hi!",
    "Thanks.",
    "The quick brown fox jumps over the lazy dog.",
    "A fast fox leaped over a sleepy dog near the river bank.",
    "Paris is the capital of France.",
    "What is the capital city of France?",
    "Berlin, Madrid and Rome are capitals too, each with more than a million inhabitants.",
    "Water boils at 100 degrees Celsius at sea level.",
    "At high altitude, water boils at a lower temperature because the air pressure is lower.",
    "Please send the invoice (No. 4471-B) by Friday, 5 p.m.",
    "Can you email me the bill before the end of the week?",
    "My flight was delayed by three hours and I missed my connection in Frankfurt.",
    "The train to Amsterdam leaves from platform 7 at 09:45.",
    "Deep learning models need large amounts of data and compute to train well.",
    "Neural networks learn patterns from many examples.",
    "She plays the violin beautifully; her concert last night sold out in minutes.",
    "He is learning to play the guitar.",
    "Is it going to rain tomorrow?",
    "The weather forecast says there will be heavy showers and strong winds on Saturday morning.",
    "I love this phone: the battery lasts two days and the camera is excellent.",
    "This phone is terrible; the screen cracked after one week and support never answered.",
    "The recipe calls for 2 cups of flour, 3 eggs, a pinch of salt and 250 ml of milk.",
    "How long should I bake bread at 220 degrees?",
    "The committee will meet on 12 March 2025 to discuss the budget for the next fiscal year.",
    "Ok",
    "Where is the nearest pharmacy that is open on Sunday?",
    "Photosynthesis turns sunlight, water and carbon dioxide into sugar and oxygen.",
    "Plants make their food from light.",
    "The server returned error 503 — service unavailable — three times in a row.",
    "Why does my laptop get so hot when I play games?",
    "When the old bridge over the river was closed for repairs in the spring, the town council arranged a free "
    "shuttle bus, extended the opening hours of the ferry, and asked employers to let people work from home, "
    "but traffic on the ring road still doubled during the morning rush and many shops in the centre reported "
    "fewer customers than in any month of the previous year.",
    "Our quarterly report shows revenue of $4.7 million (up 12% year over year), operating costs of $3.1 million, "
    "and a net margin of 18.4%; the board expects similar growth next quarter, provided that supply chain delays "
    "in Asia ease and the new warehouse in Rotterdam opens on schedule in late September.",
    "If you cannot log in, first check that caps lock is off, then use the 'Forgot password' link on the sign-in "
    "page; you will receive an email with a link that is valid for 30 minutes, and if it does not arrive, look in "
    "your spam folder or contact support, who can verify your identity and reset the password for you.",
)


def _clean(line: str) -> str:
    """A line with its control characters (bell, escape, DEL, ...) as spaces and its spaces collapsed."""
    return " ".join("".join(" " if unicodedata.category(c) == "Cc" else c for c in line).split())


def read_sentences(path: str | os.PathLike, *, notes: list | None = None) -> list[str]:
    """One sentence per non-empty line of a UTF-8 text file, the first :func:`max_sentences` of them, each with
    its control characters taken out (:func:`_clean`).

    Args:
        notes: when given, a file with more sentences than the cap adds one line saying how many were used.

    Raises:
        ConfigError: no such file, not text, too large, or no sentences in it.
    """
    p = Path(path).expanduser()
    if (problem := too_long(p)) is not None:
        raise ConfigError(f"{shown(p)}: {problem}")
    if not p.is_file():
        raise ConfigError(f"{p}: no such text file" if not p.exists() else f"{p} is not a file")
    if p.stat().st_size > MAX_FILE_BYTES:
        raise ConfigError(f"{p} is larger than {MAX_FILE_BYTES // 1_000_000} MB: give a sample of sentences")
    raw = p.read_bytes()
    if b"\x00" in raw:
        raise ConfigError(f"{p} is not a text file (it holds NUL bytes)")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{p} is not UTF-8 text: {e.reason} at byte {e.start}") from e
    cap = max_sentences()
    lines, more = [], 0
    for ln in text.splitlines():
        ln = _clean(ln)
        if not ln:
            continue
        if len(lines) < cap:
            lines.append(ln)
        else:
            more += 1
    if not lines:
        raise ConfigError(f"{p} has no sentences (one per line; control characters do not count)")
    if more and notes is not None:
        notes.append(f"{p}: used the first {cap:,} of {cap + more:,} sentences (set {MAX_SENTENCES_ENV} "
                     f"to use more; every sentence costs a run per step and variant)")
    return lines


def bucket_for(length: int, buckets: tuple[int, ...] = BUCKETS, max_length: int = 512) -> int:
    """The smallest bucket that holds ``length`` tokens (capped at ``max_length``)."""
    for b in buckets:
        if length <= b <= max_length:
            return b
    return max_length


@dataclass(frozen=True)
class TextBatches:
    """Tokenized sentences as padded batches, and what the answer-level check needs.

    Attributes:
        sentences: the sentences, in batch order.
        batches: model inputs per batch (int64 ``input_ids``, ``attention_mask``, maybe ``token_type_ids``).
        kind: the answer-level check ("embedding", "masked_lm", "classification").
        mask_token_id: the tokenizer's mask token (masked-LM checks look there).
    """

    sentences: tuple[str, ...]
    batches: tuple[dict, ...]
    kind: str = "embedding"
    mask_token_id: int | None = None
    tokens: tuple[int, ...] = field(default=(), repr=False)

    @property
    def lengths(self) -> list[int]:
        """The padded sequence length of each batch."""
        return [int(b["input_ids"].shape[1]) for b in self.batches]

    def describe(self) -> dict:
        """Counts for reports: sentences, batches, bucket mix, real tokens and padding share."""
        real = sum(int(b["attention_mask"].sum()) for b in self.batches)
        total = sum(int(b["attention_mask"].size) for b in self.batches)
        mix: dict[int, int] = {}
        for n in self.lengths:
            mix[n] = mix.get(n, 0) + 1
        return {"sentences": len(self.sentences), "batches": len(self.batches), "kind": self.kind,
                "bucket_mix": {str(k): v for k, v in sorted(mix.items())}, "real_tokens": real,
                "padding_share": round(1 - real / total, 4) if total else 0.0}

    def job(self) -> dict:
        """The plain dict the benchmark worker takes."""
        return {"kind": self.kind, "mask_token_id": self.mask_token_id, "batches": [dict(b) for b in self.batches]}


def tokenize(tokenizer, sentences, *, input_names=("input_ids", "attention_mask", "token_type_ids"),
             batch_size: int = DEFAULT_BATCH, buckets: tuple[int, ...] = BUCKETS,
             max_length: int = 512) -> list[dict]:
    """Sentences → right-padded int64 batches of ``batch_size``, each padded to its length bucket.

    Sentences longer than ``max_length`` tokens are truncated.
    """
    sentences = [str(s) for s in sentences]
    if not sentences:
        raise ConfigError("no sentences to tokenize")
    if batch_size < 1:
        raise ConfigError(f"batch size must be at least 1 (got {batch_size})")
    want_types = "token_type_ids" in input_names
    enc_all = tokenizer(sentences, truncation=True, max_length=max_length, padding=False,
                        return_token_type_ids=want_types)
    groups: dict[int, list[int]] = {}
    for i, row in enumerate(enc_all["input_ids"]):
        groups.setdefault(bucket_for(len(row), buckets, max_length), []).append(i)
    chunks = [(idx[j:j + batch_size], seq) for seq, idx in groups.items() for j in range(0, len(idx), batch_size)]
    chunks.sort(key=lambda c: c[0][0])  # batches in order of their first sentence's arrival
    out = []
    for rows, seq in chunks:
        enc = {k: [enc_all[k][i] for i in rows] for k in ("input_ids", "token_type_ids") if k in enc_all}
        chunk = rows
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        ids = np.full((len(chunk), seq), pad_id, dtype=np.int64)
        mask = np.zeros((len(chunk), seq), dtype=np.int64)
        types = np.zeros((len(chunk), seq), dtype=np.int64)
        for r, row in enumerate(enc["input_ids"]):
            ids[r, :len(row)] = row
            mask[r, :len(row)] = 1
            if want_types and "token_type_ids" in enc:
                types[r, :len(row)] = enc["token_type_ids"][r]
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        out.append({k: v for k, v in feeds.items() if k in input_names})
    return out


def batch_order(tokenizer, sentences, *, batch_size: int = DEFAULT_BATCH, buckets: tuple[int, ...] = BUCKETS,
                max_length: int = 512) -> list[int]:
    """The sentence indices in the order :func:`tokenize` puts them into batches."""
    enc = tokenizer([str(s) for s in sentences], truncation=True, max_length=max_length, padding=False)
    groups: dict[int, list[int]] = {}
    for i, row in enumerate(enc["input_ids"]):
        groups.setdefault(bucket_for(len(row), buckets, max_length), []).append(i)
    chunks = [idx[j:j + batch_size] for idx in groups.values() for j in range(0, len(idx), batch_size)]
    chunks.sort(key=lambda c: c[0])
    return [i for c in chunks for i in c]


def mask_tokens(feeds: dict, mask_token_id: int, special_ids, every: int = MASK_EVERY) -> dict:
    """A copy of ``feeds`` with every ``every``-th real, non-special token replaced by the mask token.

    Each sentence gets at least one mask (its middle real token) when it has any ordinary token.
    """
    ids = feeds["input_ids"].copy()
    special = set(int(s) for s in special_ids)
    for r in range(ids.shape[0]):
        cols = [c for c in range(ids.shape[1]) if feeds["attention_mask"][r, c] and int(ids[r, c]) not in special]
        picks = cols[every // 2::every] or cols[len(cols) // 2:len(cols) // 2 + 1]
        ids[r, picks] = mask_token_id
    return {**feeds, "input_ids": ids}


def text_batches(source: ModelSource, sentences=None, *, batch_size: int = DEFAULT_BATCH,
                 buckets: tuple[int, ...] = BUCKETS) -> TextBatches:
    """The model's tokenizer over ``sentences`` (default: :data:`BUILTIN_SENTENCES`).

    For a masked-LM model some tokens become the mask token, so the check has
    blanks to fill.

    Raises:
        ModelSourceError: the model has no tokenizer, or one whose ids go past its embedding table.
        ConfigError: no sentences, or a bad batch size.
    """
    sentences = list(BUILTIN_SENTENCES if sentences is None else sentences)[:max_sentences()]
    tok = source.tokenizer()
    max_length = min(source.max_positions, max(buckets))
    batches = tokenize(tok, sentences, input_names=source.input_names, batch_size=batch_size,
                       buckets=buckets, max_length=max_length)
    order = batch_order(tok, sentences, batch_size=batch_size, buckets=buckets, max_length=max_length)
    sentences = [sentences[i] for i in order]
    kind = kind_for(source.task)
    mask_id = getattr(tok, "mask_token_id", None)
    if kind == "masked_lm":
        if mask_id is None:
            raise ConfigError(f"{source.name}'s tokenizer has no mask token: masked-LM checks need one")
        batches = [mask_tokens(b, mask_id, tok.all_special_ids) for b in batches]
    _check_ids(source, tok, batches)
    tokens = tuple(int(m.sum()) for b in batches for m in b["attention_mask"])
    return TextBatches(tuple(sentences), tuple(batches), kind, mask_id, tokens)


def _check_ids(source: ModelSource, tok, batches: list[dict]) -> None:
    """Refuse token ids past the model's embedding table before anything runs on them: a tokenizer that does not
    belong to the weights (a larger vocabulary) would stop PyTorch with "index out of range in self"."""
    top = max(int(b["input_ids"].max()) for b in batches)
    if top >= source.vocab_size:  # a model source error: where no text was asked for, it counts as no tokenizer
        raise ModelSourceError(
            f"{source.name}'s tokenizer gives token id {top:,} on these sentences, past the model's embedding table "
            f"(vocab_size {source.vocab_size:,} in its config; the tokenizer knows {len(tok):,} tokens): the "
            f"tokenizer does not belong to these weights")


__all__ = ["BUILTIN_SENTENCES", "BUCKETS", "TextBatches", "read_sentences", "tokenize", "mask_tokens",
           "text_batches", "bucket_for"]
