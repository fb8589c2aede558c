"""Answers on real text, typed: what a task-parity check found, whether the answers hold, and its words.

The checks in :mod:`.task_parity` produce plain JSON-ready dicts (that is what is saved in the caches,
the model card and every ``--json``); :meth:`TaskParity.of` reads one into the object of its kind.
One class per kind, each with the figures it has, what "the answers hold" means for it
(:attr:`TaskParity.needs`, gathered in :data:`THRESHOLDS`) and its words. Every place that words
answers (CLI tables, the saved model card, the report, the app) calls :meth:`TaskParity.words`
through :func:`words`, so a verdict and its words never disagree: a share is "100%" only when every
answer agrees (299 of 300 is "99.6%", never rounded up).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import ClassVar


def pct(x: float) -> str:
    """A share as a percentage that says 100% only when every answer agrees (0.9996 is 99.9%, never 100%)."""
    if x >= 1.0:
        return "100%"
    return f"{math.floor(x * 1000) / 10:.1f}".removesuffix(".0") + "%"


@dataclass
class TaskParity:
    """One answer-level check against the reference; a subclass per kind of check."""

    kind: ClassVar[str] = ""
    #: What "the answers hold" means: the least value of each figure.
    needs: ClassVar[dict] = {}
    #: The line that replaces the figures when the text is too small to check answers (then never held).
    too_small: str | None = None
    #: What else the check carried (max abs diff, cosine, changed neighbours), kept as it came.
    extra: dict = field(default_factory=dict)

    @classmethod
    def of(cls, tp: "TaskParity | dict | None") -> "TaskParity | None":
        """The typed object of a check's dict (or the object itself; None stays None)."""
        if tp is None or isinstance(tp, TaskParity):
            return tp
        kind = BY_KIND.get(tp.get("kind"))
        if kind is None:
            raise ValueError(f"unknown task parity kind {tp.get('kind')!r} (one of {', '.join(BY_KIND)})")
        names = {f.name for f in fields(kind)} - {"extra"}
        return kind(**{k: v for k, v in tp.items() if k in names},
                    extra={k: v for k, v in tp.items() if k not in names and k != "kind"})

    def to_dict(self) -> dict:
        """The check's JSON form, as :mod:`.task_parity` writes it."""
        d = {"kind": self.kind}
        d.update({f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("extra", *_ONLY_WHEN_SET)})
        d.update({k: getattr(self, k) for k in _ONLY_WHEN_SET if getattr(self, k, None) is not None})
        return {**d, **self.extra}

    @property
    def agreement(self) -> float | None:
        """The share of answers that stayed the same (top-1 word, nearest sentence or label)."""
        return None

    def holds(self) -> bool:
        """Whether every figure meets :attr:`needs` (a too-small text never holds: its answers are unknown)."""
        if self.too_small:
            return False
        return all(getattr(self, k) is not None and getattr(self, k) >= v - 1e-12 for k, v in self.needs.items())

    def changed(self) -> bool:
        """True when some answer differs from the reference's."""
        return self.agreement is not None and self.agreement < 1.0

    def score(self) -> float:
        """One number, higher is better: the ranking figure (Spearman, else the agreement), less 0.011 when an
        answer changed, so a check that does not hold scores below 0.99 (what NNCF's accuracy control takes)."""
        if self.too_small:
            return 0.0
        return float(self.ranking or 0.0) - (0.011 if self.changed() else 0.0)

    @property
    def ranking(self) -> float | None:
        """The figure a search ranks candidates by (the agreement, or Spearman for embeddings)."""
        return self.agreement

    def words(self) -> str:
        """The figures in a few words ("top-1 99.6%, Spearman 0.9990")."""
        return self.too_small or self.figures()

    def figures(self) -> str:
        return ""

    def details(self) -> str:
        """The figures in full, named (for a hover)."""
        return self.too_small or self.words()

    def gloss(self) -> str:
        """What the check measured, in words a newcomer reads once (the report's int8 line)."""
        return self.too_small or self.words()


@dataclass
class EmbeddingParity(TaskParity):
    """Sentence embeddings: each sentence's nearest other sentence, and the ranking of all similarities."""

    kind: ClassVar[str] = "embedding"
    needs: ClassVar[dict] = {"top1_agreement": 1.0, "spearman": 0.99}
    sentences: int = 0
    top1_agreement: float | None = None
    spearman: float | None = None
    min_cosine: float | None = None
    distinct: int | None = None

    @property
    def agreement(self) -> float | None:
        return self.top1_agreement

    @property
    def ranking(self) -> float | None:
        return self.spearman

    def figures(self) -> str:
        if self.top1_agreement is None or self.spearman is None:
            return "no similarity ranking"
        return f"top-1 {pct(self.top1_agreement)}, Spearman {self.spearman:.4f}"

    def details(self) -> str:
        if self.too_small or self.top1_agreement is None:
            return self.words()
        return (f"sentence embeddings: nearest-sentence top-1 agreement {pct(self.top1_agreement)}, "
                f"Spearman of pairwise similarities {self.spearman:.5f}")

    def gloss(self) -> str:
        if self.too_small or self.top1_agreement is None:
            return self.words()
        return (f"the nearest other sentence is the same for {pct(self.top1_agreement)} of them; their "
                f"similarities rank alike at Spearman {self.spearman:.4f}")


@dataclass
class MaskedLMParity(TaskParity):
    """A masked language model: the top-1 and top-5 words at the masked positions."""

    kind: ClassVar[str] = "masked_lm"
    needs: ClassVar[dict] = {"top1_agreement": 0.99}
    positions: int = 0
    top1_agreement: float | None = None
    top5_agreement: float | None = None

    @property
    def agreement(self) -> float | None:
        return self.top1_agreement

    def figures(self) -> str:
        if self.top1_agreement is None:
            return "no masked positions"
        return f"top-1 {pct(self.top1_agreement)}, top-5 {pct(self.top5_agreement)} ({self.positions} blanks)"

    def details(self) -> str:
        if self.top1_agreement is None:
            return self.words()
        return (f"masked LM: top-1 agreement {pct(self.top1_agreement)}, top-5 overlap {pct(self.top5_agreement)} "
                f"at {self.positions} masked positions")

    def gloss(self) -> str:
        if self.top1_agreement is None:
            return self.words()
        return (f"the top word at {self.positions} blanks is the same for {pct(self.top1_agreement)}, "
                f"the top 5 for {pct(self.top5_agreement)}")


@dataclass
class ClassificationParity(TaskParity):
    """A classifier: the label of each answer, and the largest change of any class probability."""

    kind: ClassVar[str] = "classification"
    needs: ClassVar[dict] = {"label_agreement": 0.99}
    answers: int = 0
    label_agreement: float | None = None
    max_prob_change: float | None = None

    @property
    def agreement(self) -> float | None:
        return self.label_agreement

    def figures(self) -> str:
        if self.label_agreement is None:
            return "no answers"
        return f"labels {pct(self.label_agreement)}, largest probability change {self.max_prob_change:.2g}"

    def details(self) -> str:
        if self.label_agreement is None:
            return self.words()
        return (f"classification: label agreement {pct(self.label_agreement)}, largest probability change "
                f"{self.max_prob_change:.4f}")

    def gloss(self) -> str:
        if self.label_agreement is None:
            return self.words()
        return (f"the same label for {pct(self.label_agreement)}; the largest change of a probability "
                f"{self.max_prob_change:.2g}")


#: Fields a check writes only when they apply (``distinct`` and ``too_small`` on a too-small text).
_ONLY_WHEN_SET = ("too_small", "distinct")
BY_KIND: dict[str, type[TaskParity]] = {c.kind: c for c in (EmbeddingParity, MaskedLMParity, ClassificationParity)}
#: What "the answers hold" means, per task check (the kinds' :attr:`TaskParity.needs`).
THRESHOLDS = {kind: dict(c.needs) for kind, c in BY_KIND.items()}


def holds(tp: TaskParity | dict | None) -> bool:
    """Whether a check meets :data:`THRESHOLDS` for its kind (None: no check, holds)."""
    t = TaskParity.of(tp) if tp else None
    return True if t is None else t.holds()


def words(tp: TaskParity | dict | None) -> str:
    """A check in a few words; "" for None. The one formatter of answers."""
    t = TaskParity.of(tp) if tp else None
    return "" if t is None else t.words()


def random_weights_words(kind: str | None) -> str:
    """What an answer check means on a model with random weights: nothing yet; and what it would mean."""
    need = THRESHOLDS.get(kind or "", {})
    parts = {"top1_agreement": "the same {x} for {v:.0%}", "spearman": "Spearman {v:g} or more",
             "label_agreement": "the same label for {v:.0%}"}
    x = "nearest sentence" if kind == "embedding" else "top word"
    bar = " and ".join(parts[k].format(v=v, x=x) for k, v in need.items() if k in parts)
    would = f" (with real weights, {bar} would mean int8 keeps the answers)" if bar else ""
    return f"the weights are random, so the answers mean nothing and this is no verdict on int8{would}"


__all__ = ["TaskParity", "EmbeddingParity", "MaskedLMParity", "ClassificationParity", "BY_KIND", "THRESHOLDS",
           "holds", "words", "pct", "random_weights_words"]
