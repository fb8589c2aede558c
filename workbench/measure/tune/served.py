"""What a fusion plan is measured on and kept for: the :class:`Workload`, and the batches it times.

A fused kernel that wins at batch 1 and sequence 128 can lose in the batches a user serves (MEASURING.md,
rule 10: on an AMX Xeon fused MiniLM ran 1.08x unfused at batch 1 / sequence 128 and 0.82x on the built-in
sentences in length-bucketed batches). So the ablation, this machine's plan and the check that keeps the
plan honest all take a workload:

* ``latency``: each sentence alone at batch 1, at its own length (a query served online);
* ``throughput``: the sentences sorted by length and cut into batches of ``batch``, each padded to its
  longest (a corpus embedded in batches; ``batch`` None: the size the throughput search picks);
* ``batches``: the text in length-bucketed batches of ``batch``, as ``workbench bench --text`` times it;
* ``shape``: seeded random ids at one batch × sequence (no text).

Long texts are sampled evenly over their lengths (:data:`LATENCY_SENTENCES`, :data:`THROUGHPUT_BATCHES`), so
an ablation on a 1,000-sentence corpus costs what one on the built-in sentences does.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace

from ...errors import ConfigError, RuntimeUnavailableError
from ...ort.openvino_ep import status as ep_status
from ...text import DEFAULT_BATCH, TextBatches, text_batches
from ..variants.ort_openvino import options as ort_openvino_options
from ..variants.split import one_at_a_time
from ..worker.serve import pad_batch
from .workload import pad_id_of

KINDS = ("latency", "throughput", "batches", "shape")
#: The most sentences a latency ablation times one at a time (spread evenly over the text's lengths): each plan
#: runs each once for its answers and once timed, about the work of today's 17 runs at batch 1 × sequence 128.
LATENCY_SENTENCES = 24
#: The most batches a throughput ablation times (spread evenly over the length-sorted corpus: the shortest, the
#: longest and two between).
THROUGHPUT_BATCHES = 4


@dataclass(frozen=True)
class Workload:
    """One workload (see the module doc). ``source`` names the text ("built-in sentences", a file name)."""

    kind: str
    batch: int | None = 1
    seq: int = 128
    sentences: tuple[str, ...] = field(default=(), repr=False)
    source: str = ""

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ConfigError(f"workload must be one of {', '.join(KINDS)}, not {self.kind!r}")
        if self.kind != "shape" and not self.sentences:
            raise ConfigError(f"the {self.kind} workload needs sentences")
        object.__setattr__(self, "sentences", tuple(str(s) for s in self.sentences))

    @classmethod
    def shape(cls, batch: int, seq: int) -> "Workload":
        return cls("shape", int(batch), int(seq))

    @classmethod
    def of_text(cls, kind: str, sentences, source: str = "", batch: int | None = None) -> "Workload":
        """A text workload; ``batch``: the throughput batch (None: searched) or bench's batch (default 8)."""
        b = 1 if kind == "latency" else batch if kind == "throughput" else (batch or DEFAULT_BATCH)
        return cls(kind, b, 128, tuple(sentences), source)

    @property
    def text_hash(self) -> str:
        return hashlib.sha256("\n".join(self.sentences).encode()).hexdigest()[:16] if self.sentences else ""

    def key(self) -> list:
        """What a plan measured on this workload is cached by."""
        return [self.kind, self.batch, self.seq if self.kind == "shape" else None, self.text_hash]

    def with_batch(self, batch: int) -> "Workload":
        return replace(self, batch=int(batch))

    def words(self) -> str:
        """"each of 39 sentences alone at batch 1 (built-in sentences)", "batch 1, sequence 128 (random ids)"."""
        n, src = len(self.sentences), f" ({self.source})" if self.source else ""
        if self.kind == "shape":
            return f"batch {self.batch}, sequence {self.seq} (seeded random ids)"
        if self.kind == "latency":
            return f"each of {n} sentences alone at batch 1{src}"
        size = f"batches of {self.batch}" if self.batch else "batches of the size the throughput search picks"
        if self.kind == "throughput":
            return f"{n} sentences sorted by length in {size}, each padded to its longest{src}"
        return f"{n} sentences in length-bucketed {size}{src}"

    def to_dict(self) -> dict:
        return {"kind": self.kind, "batch": self.batch, "seq": self.seq if self.kind == "shape" else None,
                "sentences": len(self.sentences), "source": self.source, "text_hash": self.text_hash,
                "words": self.words()}


def app_workloads(text: TextBatches | None, cfg) -> list[Workload]:
    """What a measurement that times ``text`` (or, None, one shape) serves: each sentence alone and the sentences
    in padded batches at the throughput search's batch; else ``cfg``'s shape."""
    if text is None or not text.sentences:
        return [Workload.shape(cfg.batch, cfg.seq)]
    return [Workload.of_text(k, text.sentences, "the app's text") for k in ("latency", "throughput")]


#: Execution providers a plan may be measured on besides the benchmark's own ("cpu", "cuda").
EPS = ("openvino",)


def ep_options(ep: str | None) -> dict | None:
    """The variant options that put a plan on execution provider ``ep`` (None: the provider's own), refused in one
    line where it cannot run here (the OpenVINO provider's plugin missing, or offering no device for this CPU)."""
    if ep is None:
        return None
    if ep not in EPS:
        raise ConfigError(f"execution provider must be one of {', '.join(EPS)}, not {ep!r}")
    ok, why = ep_status()
    if not ok:
        raise RuntimeUnavailableError(why)
    return ort_openvino_options()


def _spread(items: list, n: int) -> list:
    """At most ``n`` of ``items`` (already sorted), evenly spaced, the first and the last kept."""
    if len(items) <= n:
        return list(items)
    return [items[round(i * (len(items) - 1) / (n - 1))] for i in range(n)]


def _throughput(src, w: Workload) -> TextBatches:
    rows = one_at_a_time(src, w.sentences)
    order = sorted(range(len(rows.batches)), key=lambda i: (int(rows.batches[i]["attention_mask"].sum()), i))
    pad, b = pad_id_of(src), int(w.batch)
    chunks = [order[j:j + b] for j in range(0, len(order), b)]
    chunks = _spread(chunks, THROUGHPUT_BATCHES)
    batches = tuple(pad_batch([rows.batches[i] for i in c], pad) for c in chunks)
    return TextBatches(tuple(rows.sentences[i] for c in chunks for i in c), batches, rows.kind, rows.mask_token_id)


def timed_text(src, w: Workload) -> TextBatches | None:
    """The batches the worker cycles through for ``w`` (None for a shape: seeded random ids at that shape).

    Raises:
        ConfigError: a throughput workload whose batch has not been chosen yet.
        ModelSourceError: a text workload on a model without a tokenizer.
    """
    if w.kind == "shape":
        return None
    if w.kind == "latency":
        rows = one_at_a_time(src, w.sentences)
        order = sorted(range(len(rows.batches)), key=lambda i: (int(rows.batches[i]["attention_mask"].sum()), i))
        keep = _spread(order, LATENCY_SENTENCES)
        return TextBatches(tuple(rows.sentences[i] for i in keep), tuple(rows.batches[i] for i in keep), rows.kind,
                           rows.mask_token_id)
    if w.kind == "throughput":
        if not w.batch:
            raise ConfigError("the throughput workload's batch is chosen by the search first (Workload.with_batch)")
        return _throughput(src, w)
    return text_batches(src, list(w.sentences), batch_size=int(w.batch or DEFAULT_BATCH))


def timed_config(src, w: Workload, cfg):
    """``(the batches to time or None, cfg)`` for ``w``: a shape sets ``cfg``'s batch and sequence; a text sizes
    them to its largest batch and longest row (what the sessions must take) and times whole cycles of it, about as
    many tokens as ``cfg``'s runs at its shape (:func:`runs_for`), after one warm-up round (every batch once)."""
    text = timed_text(src, w)
    if text is None:
        return None, replace(cfg, batch=int(w.batch or cfg.batch), seq=int(w.seq))
    # The warm-up's first round runs every batch once (each plan's answers on the text), which warms every shape:
    # no second round is needed.
    return text, replace(cfg, batch=max(int(b["input_ids"].shape[0]) for b in text.batches), seq=max(text.lengths),
                         runs=runs_for(text, cfg.runs, cfg.runs * cfg.batch * cfg.seq), warmup=1)


#: The fewest timed rounds of a text workload (the round-by-round ratios need a few).
MIN_ROUNDS = 4


def runs_for(text: TextBatches | None, runs: int, tokens: int | None = None) -> int:
    """Timed runs for a workload: every batch timed equally often (whole cycles), at least ``runs`` or one cycle,
    but no more cycles than ``tokens`` (the padded tokens ``runs`` at the shape would time: a workload of big
    batches takes about the time the shape did), and at least :data:`MIN_ROUNDS`."""
    if text is None:
        return runs
    n = len(text.batches)
    cycles = -(-max(runs, n) // n)
    per_cycle = sum(int(b["input_ids"].size) for b in text.batches)
    if tokens:
        cycles = min(cycles, max(1, -(-int(tokens) // max(1, per_cycle))))
    return max(cycles, -(-MIN_ROUNDS // n)) * n


__all__ = ["Workload", "KINDS", "EPS", "ep_options", "app_workloads", "timed_text", "timed_config", "runs_for",
           "LATENCY_SENTENCES", "THROUGHPUT_BATCHES", "MIN_ROUNDS"]
