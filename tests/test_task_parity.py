"""Answer-level checks on outputs (pure numpy): what changes an answer counts, what does not, does not."""

import numpy as np
import pytest

from workbench.ort.task_parity import (classification_parity, embedding_parity, kind_for, kind_from_output,
                                       masked_lm_parity, mean_pool, spearman, task_parity)


def _hidden(seed=0, batch=4, seq=6, dim=8):
    rng = np.random.default_rng(seed)
    h = rng.normal(size=(batch, seq, dim)).astype(np.float32)
    mask = np.ones((batch, seq), dtype=np.int64)
    mask[1, 4:] = 0
    mask[3, 2:] = 0
    return h, mask


def test_identical_embeddings_agree_fully():
    h, m = _hidden()
    d = embedding_parity([h, h[:2]], [h.copy(), h[:2].copy()], [m, m[:2]])
    assert d == {"kind": "embedding", "sentences": 6, "top1_agreement": 1.0, "spearman": pytest.approx(1.0),
                 "min_cosine": pytest.approx(1.0)}


def test_padding_positions_do_not_count():
    h, m = _hidden()
    c = h.copy()
    c[m == 0] += 100.0  # garbage where the mask is 0
    assert np.allclose(mean_pool(h, m), mean_pool(c, m))
    assert embedding_parity([h], [c], [m])["spearman"] == pytest.approx(1.0)


def test_a_changed_neighbour_lowers_top1_and_spearman():
    rng = np.random.default_rng(1)
    base = rng.normal(size=(6, 16))
    ref = base[:, None, :].repeat(2, axis=1)
    cand = ref.copy()
    cand[0] = -cand[0]  # sentence 0 now points the other way: its neighbours change
    m = np.ones((6, 2), dtype=np.int64)
    d = embedding_parity([ref], [cand], [m])
    assert d["top1_agreement"] < 1.0
    assert d["spearman"] < 0.9
    assert d["min_cosine"] == pytest.approx(-1.0)


def test_spearman_matches_scipy_with_ties():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(3)
    a = rng.integers(0, 5, size=40).astype(float)
    b = a + rng.normal(scale=2.0, size=40)
    assert spearman(a, b) == pytest.approx(stats.spearmanr(a, b).statistic, abs=1e-12)
    assert spearman(np.ones(5), np.ones(5)) == 1.0


def test_masked_lm_checks_only_masked_positions():
    rng = np.random.default_rng(2)
    ref = rng.normal(size=(2, 5, 30))
    masked = np.zeros((2, 5), dtype=bool)
    masked[0, 2] = masked[1, 3] = True
    cand = ref.copy()
    cand[0, 0] = -cand[0, 0]  # an unmasked position: no effect
    assert masked_lm_parity([ref], [cand], [masked]) == {"kind": "masked_lm", "positions": 2,
                                                         "top1_agreement": 1.0, "top5_agreement": 1.0}
    top = int(ref[1, 3].argmax())
    cand[1, 3, top] = ref[1, 3].min() - 1  # the best word at a masked position falls out of the top 5
    d = masked_lm_parity([ref], [cand], [masked])
    assert d["top1_agreement"] == 0.5 and d["top5_agreement"] == pytest.approx(0.9)


def test_masked_lm_via_task_parity_reads_the_mask_token():
    rng = np.random.default_rng(4)
    ids = np.array([[2, 7, 4, 8, 3, 0]])
    mask = np.array([[1, 1, 1, 1, 1, 0]])
    logits = rng.normal(size=(1, 6, 12))
    d = task_parity("masked_lm", [logits], [logits], [{"input_ids": ids, "attention_mask": mask}], mask_token_id=4)
    assert d["positions"] == 1
    with pytest.raises(ValueError, match="mask token"):
        task_parity("masked_lm", [logits], [logits], [{"input_ids": ids, "attention_mask": mask}])


def test_classification_label_agreement_and_probability_change():
    ref = np.array([[2.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    cand = ref.copy()
    cand[1] = [0.0, 0.0, 1.5]  # second sentence changes label
    d = classification_parity([ref], [cand])
    assert d["answers"] == 2 and d["label_agreement"] == 0.5
    p = np.exp(ref[1]) / np.exp(ref[1]).sum()
    q = np.exp(cand[1]) / np.exp(cand[1]).sum()
    assert d["max_prob_change"] == pytest.approx(np.abs(p - q).max())


def test_token_classification_ignores_padding():
    rng = np.random.default_rng(5)
    ref = rng.normal(size=(2, 4, 5))
    mask = np.array([[1, 1, 1, 1], [1, 1, 0, 0]])
    cand = ref.copy()
    cand[1, 3] = -cand[1, 3]  # padding
    d = task_parity("classification", [ref], [cand], [{"input_ids": mask, "attention_mask": mask}])
    assert d == {"kind": "classification", "answers": 6, "label_agreement": 1.0, "max_prob_change": 0.0}


def test_kinds_and_bad_input():
    assert kind_for("sequence_classification") == kind_for("token_classification") == "classification"
    assert kind_for("embedding") == "embedding"
    assert kind_from_output("last_hidden_state", ("b", "s", 32), 1000) == "embedding"
    assert kind_from_output("logits", ("b", "s", 1000), 1000) == "masked_lm"
    assert kind_from_output("logits", ("b", 3), 1000) == "classification"
    with pytest.raises(ValueError):
        kind_for("translation")
    h, m = _hidden()
    with pytest.raises(ValueError, match="batches"):
        task_parity("embedding", [h], [h, h], [{"attention_mask": m}])
    with pytest.raises(ValueError, match="unknown"):
        task_parity("ranking", [h], [h], [{"attention_mask": m}])


@pytest.mark.parametrize("rows, distinct", [([[5, 6, 7]], 1), ([[5, 6, 7], [5, 6, 7]], 1), ([[5, 6], [7, 8]], 2)])
def test_a_ranking_over_too_few_sentences_is_not_reported_as_perfect(rows, distinct):
    """Fewer than three distinct sentences give fewer than three pairs: no Spearman, a line that says so."""
    from workbench.ort.task_parity import task_parity

    ids = np.array(rows, dtype=np.int64)
    feeds = [{"input_ids": ids, "attention_mask": np.ones_like(ids)}]
    rng = np.random.default_rng(0)
    ref = [rng.normal(size=(*ids.shape, 4))]
    tp = task_parity("embedding", ref, [ref[0] + 0.5], feeds)
    assert tp["spearman"] is None and tp["top1_agreement"] is None and tp["distinct"] == distinct
    assert tp["too_small"] == (f"too small to check answers: {distinct} distinct sentence{'s' if distinct > 1 else ''}; "
                               "a similarity ranking needs at least 3 distinct sentences")
    from workbench.ort.answer_policy import holds, words

    assert not holds(tp) and words(tp) == tp["too_small"]


def test_three_distinct_sentences_are_enough_for_a_ranking():
    from workbench.ort.task_parity import task_parity

    ids = np.array([[5, 6], [7, 8], [9, 10], [9, 10]], dtype=np.int64)
    feeds = [{"input_ids": ids, "attention_mask": np.ones_like(ids)}]
    ref = [np.random.default_rng(1).normal(size=(4, 2, 4))]
    tp = task_parity("embedding", ref, ref, feeds)
    assert tp["spearman"] == pytest.approx(1.0) and "too_small" not in tp
