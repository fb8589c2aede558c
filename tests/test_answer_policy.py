"""The answer policy: one typed check per kind, one verdict, one formatter that never rounds a miss up."""
from __future__ import annotations

import numpy as np
import pytest

from workbench.ort.answer_policy import THRESHOLDS, TaskParity, holds, words
from workbench.ort.task_parity import classification_parity


def _one_label_flipped(n: int = 300) -> dict:
    """A real classification check over ``n`` answers where exactly one label changed."""
    rng = np.random.default_rng(0)
    ref = rng.normal(size=(n, 3))
    ref[:, 0] += 5.0  # every reference answer is label 0
    cand = ref.copy()
    cand[7, 1] += 20.0  # one answer now label 1
    return classification_parity([ref], [cand])


def test_299_of_300_never_reads_100_percent_and_the_verdict_agrees():
    tp = _one_label_flipped()
    assert tp["label_agreement"] == pytest.approx(299 / 300)
    assert holds(tp) and TaskParity.of(tp).changed()  # labels hold from 99%, yet one answer changed
    assert "100%" not in words(tp) and words(tp).startswith("labels 99.6%")
    emb = {"kind": "embedding", "sentences": 300, "top1_agreement": 299 / 300, "spearman": 0.9995, "min_cosine": 0.99}
    assert not holds(emb)  # an embedding holds only when every nearest sentence is the same
    assert words(emb) == "top-1 99.6%, Spearman 0.9995"
    mlm = {"kind": "masked_lm", "positions": 300, "top1_agreement": 299 / 300, "top5_agreement": 0.9999}
    assert words(mlm) == "top-1 99.6%, top-5 99.9% (300 blanks)"


@pytest.mark.parametrize("n", [3, 39, 300, 1000, 10000])
def test_a_share_reads_100_percent_only_when_every_answer_agrees(n):
    for k in (n - 1, n):
        tp = {"kind": "embedding", "sentences": n, "top1_agreement": k / n, "spearman": 0.999, "min_cosine": 0.99}
        assert ("top-1 100%" in words(tp)) == (k == n) == holds(tp) == (not TaskParity.of(tp).changed())


def test_every_place_that_words_answers_says_the_same():
    from workbench.measure.variants.answers import int8_flags
    from workbench.ui.steps.rows import answers_text
    from workbench.viz.summary import task_parity_words

    emb = {"kind": "embedding", "sentences": 300, "top1_agreement": 299 / 300, "spearman": 0.9995, "min_cosine": 0.99}
    line = words(emb)
    assert task_parity_words(emb) == line and answers_text(emb)[0] == line
    assert "100%" not in answers_text(emb)[1]
    flags = int8_flags([{"name": "int8", "task_parity": emb}])
    assert flags and f"its answers change ({line})" in flags[0]  # the verdict (changed) beside its words


def test_a_check_reads_back_as_its_kind_and_writes_the_same_json():
    tp = _one_label_flipped()
    t = TaskParity.of(tp)
    assert t.kind == "classification" and t.holds() == holds(tp) and t.changed()
    assert t.to_dict() == tp
    small = {"kind": "embedding", "sentences": 2, "distinct": 1, "top1_agreement": None, "spearman": None,
             "min_cosine": 0.9, "too_small": "too small to check answers: 1 distinct sentence", "cosine": 0.9}
    s = TaskParity.of(small)
    assert not s.holds() and s.words() == small["too_small"] and s.to_dict() == small
    assert TaskParity.of(None) is None and words(None) == "" and holds(None)
    with pytest.raises(ValueError, match="unknown task parity kind"):
        TaskParity.of({"kind": "speech"})


def test_the_thresholds_are_each_kinds_needs():
    assert THRESHOLDS == {"embedding": {"top1_agreement": 1.0, "spearman": 0.99},
                          "masked_lm": {"top1_agreement": 0.99}, "classification": {"label_agreement": 0.99}}
