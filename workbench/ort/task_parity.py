"""Answer-level parity: does the candidate model still give the reference's answers?

Max abs diff and cosine say how far the numbers moved; these checks say
whether a user would notice. Pure numpy on outputs already computed, one
check per task:

* ``embedding``: sentences mean-pooled with the attention mask; the most
  similar other sentence of each sentence (top-1 agreement) and the Spearman
  correlation of all pairwise cosine similarities;
* ``masked_lm``: at the masked positions, the same top-1 token, and the share
  of the reference's top 5 tokens found in the candidate's top 5;
* ``classification``: the same label (per sentence, or per real token for
  token classification) and the largest change of any class probability.

Each takes lists of per-batch outputs (batches may differ in length) and
returns a plain dict with ``kind``. A similarity ranking over fewer than
:data:`MIN_DISTINCT` distinct sentences (one sentence, two identical ones)
has fewer than three pairs, so its Spearman is undefined: the embedding check
then gives ``None`` for its figures and a ``too_small`` line saying how many
sentences it needs, never a perfect score.
"""

from __future__ import annotations

import numpy as np

KINDS = ("embedding", "masked_lm", "classification")
#: Distinct sentences a similarity ranking needs: three give three pairs, the fewest a rank correlation means anything over.
MIN_DISTINCT = 3


def too_small_line(distinct: int) -> str:
    """The one line that replaces the answers when the text is too small to check them."""
    s = "" if distinct == 1 else "s"
    return (f"too small to check answers: {distinct} distinct sentence{s}; a similarity ranking needs at least "
            f"{MIN_DISTINCT} distinct sentences")


def distinct_sentences(feeds: list[dict]) -> int:
    """How many different token sequences (real tokens only) the batches hold."""
    seen = set()
    for f in feeds:
        ids, mask = np.asarray(f["input_ids"]), np.asarray(f["attention_mask"])
        for r in range(ids.shape[0]):
            seen.add(ids[r][mask[r] > 0].tobytes())
    return len(seen)


def kind_for(task: str) -> str:
    """The check that fits a model task ("embedding", "masked_lm", "*_classification")."""
    if task.endswith("classification"):
        return "classification"
    if task in KINDS:
        return task
    raise ValueError(f"no answer-level check for task {task!r}")


def kind_from_output(name: str, shape: tuple, vocab_size: int) -> str:
    """Guess the check from an ONNX graph's first output (name and shape).

    ``last_hidden_state`` → embedding; ``logits`` over the vocabulary → masked LM;
    any other ``logits`` → classification.
    """
    if name != "logits":
        return "embedding"
    last = shape[-1] if shape else None
    return "masked_lm" if isinstance(last, int) and last == vocab_size else "classification"


def mean_pool(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Average of the real (mask 1) token vectors: (batch, seq, hidden) → (batch, hidden)."""
    m = np.asarray(mask, dtype=np.float64)[..., None]
    h = np.asarray(hidden, dtype=np.float64)
    return (h * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)


def _ranks(x: np.ndarray) -> np.ndarray:
    """Ranks with ties averaged (what Spearman's correlation needs); vectorized, O(n log n)."""
    x = np.asarray(x)
    order = np.argsort(x, kind="mergesort")
    sx = x[order]
    first = np.r_[True, sx[1:] != sx[:-1]] if len(x) else np.zeros(0, dtype=bool)
    group = np.cumsum(first) - 1  # the run of equal values each sorted position belongs to
    starts = np.flatnonzero(first)
    ends = np.r_[starts[1:], len(x)] - 1
    ranks = np.empty(len(x), dtype=np.float64)
    ranks[order] = ((starts + ends) / 2.0)[group]
    return ranks


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation of two equal-length vectors (1.0 when both are constant)."""
    ra, rb = _ranks(np.asarray(a, dtype=np.float64)), _ranks(np.asarray(b, dtype=np.float64))
    ra, rb = ra - ra.mean(), rb - rb.mean()
    den = np.sqrt((ra * ra).sum() * (rb * rb).sum())
    if den == 0:
        return 1.0 if np.array_equal(ra, rb) else 0.0
    return float((ra * rb).sum() / den)


def _cosine_matrix(e: np.ndarray) -> np.ndarray:
    n = e / np.maximum(np.linalg.norm(e, axis=1, keepdims=True), 1e-12)
    return n @ n.T


def embedding_parity(reference: list, candidate: list, masks: list, distinct: int | None = None) -> dict:
    """Similarity ranking of the sentences, reference vs candidate (lists of (batch, seq, hidden)).

    ``distinct``: how many of the sentences differ (default: all); under :data:`MIN_DISTINCT` the
    ranking is undefined and the result says so (``too_small``) instead of giving figures.
    """
    ref = np.concatenate([mean_pool(r, m) for r, m in zip(reference, masks)])
    cand = np.concatenate([mean_pool(c, m) for c, m in zip(candidate, masks)])
    n = len(ref)
    out = {"kind": "embedding", "sentences": n}
    distinct = n if distinct is None else distinct
    if distinct < MIN_DISTINCT:
        return {**out, "distinct": distinct, "top1_agreement": None, "spearman": None,
                "min_cosine": float(_row_cosines(ref, cand).min(initial=1.0)), "too_small": too_small_line(distinct)}
    sr, sc = _cosine_matrix(ref), _cosine_matrix(cand)
    np.fill_diagonal(sr, -np.inf)
    np.fill_diagonal(sc, -np.inf)
    top1 = float(np.mean(sr.argmax(axis=1) == sc.argmax(axis=1)))
    iu = np.triu_indices(n, k=1)
    return {**out, "top1_agreement": top1, "spearman": spearman(sr[iu], sc[iu]),
            "min_cosine": float(_row_cosines(ref, cand).min())}


def _row_cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    num = (a * b).sum(axis=1)
    den = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return num / np.maximum(den, 1e-12)


def masked_lm_parity(reference: list, candidate: list, masked: list) -> dict:
    """Top-1 and top-5 agreement at the masked positions (lists of (batch, seq, vocab) and bool (batch, seq))."""
    r = np.concatenate([np.asarray(x)[np.asarray(m, dtype=bool)] for x, m in zip(reference, masked)])
    c = np.concatenate([np.asarray(x)[np.asarray(m, dtype=bool)] for x, m in zip(candidate, masked)])
    if len(r) == 0:
        return {"kind": "masked_lm", "positions": 0, "top1_agreement": None, "top5_agreement": None}
    k = min(5, r.shape[-1])
    tr = np.argsort(-r, axis=-1, kind="stable")[:, :k]
    tc = np.argsort(-c, axis=-1, kind="stable")[:, :k]
    overlap = [len(set(a) & set(b)) / k for a, b in zip(tr.tolist(), tc.tolist())]
    return {"kind": "masked_lm", "positions": int(len(r)), "top1_agreement": float(np.mean(tr[:, 0] == tc[:, 0])),
            "top5_agreement": float(np.mean(overlap))}


def _softmax(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def classification_parity(reference: list, candidate: list, masks: list | None = None) -> dict:
    """Label agreement and the largest probability change.

    Logits of shape (batch, labels) are one answer per sentence; (batch, seq,
    labels) are token classification, one answer per real token (mask 1).
    """
    rs, cs = [], []
    for i, (r, c) in enumerate(zip(reference, candidate)):
        r, c = np.asarray(r), np.asarray(c)
        if r.ndim == 3:
            keep = np.asarray(masks[i], dtype=bool) if masks is not None else np.ones(r.shape[:2], bool)
            r, c = r[keep], c[keep]
        rs.append(r.reshape(-1, r.shape[-1]))
        cs.append(c.reshape(-1, c.shape[-1]))
    r, c = np.concatenate(rs), np.concatenate(cs)
    if len(r) == 0:
        return {"kind": "classification", "answers": 0, "label_agreement": None, "max_prob_change": None}
    return {"kind": "classification", "answers": int(len(r)),
            "label_agreement": float(np.mean(r.argmax(-1) == c.argmax(-1))),
            "max_prob_change": float(np.abs(_softmax(r) - _softmax(c)).max())}


def task_parity(kind: str, reference: list, candidate: list, feeds: list[dict], *,
                mask_token_id: int | None = None) -> dict:
    """The check for ``kind`` over per-batch outputs of the same ``feeds``.

    ``feeds`` are the model inputs of each batch: the attention masks pool the
    embeddings and select real tokens; for masked LM the positions whose input
    id is ``mask_token_id`` are the ones checked.
    """
    if len(reference) != len(candidate) or len(reference) != len(feeds):
        raise ValueError(f"{len(reference)} reference batches, {len(candidate)} candidate batches, "
                         f"{len(feeds)} input batches")
    masks = [f["attention_mask"] for f in feeds]
    if kind == "embedding":
        return embedding_parity(reference, candidate, masks, distinct_sentences(feeds))
    if kind == "masked_lm":
        if mask_token_id is None:
            raise ValueError("masked_lm parity needs the tokenizer's mask token id")
        masked = [(np.asarray(f["input_ids"]) == mask_token_id) & (np.asarray(m) > 0) for f, m in zip(feeds, masks)]
        return masked_lm_parity(reference, candidate, masked)
    if kind == "classification":
        return classification_parity(reference, candidate, masks)
    raise ValueError(f"unknown task parity kind {kind!r} (one of {', '.join(KINDS)})")
