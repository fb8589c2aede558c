"""Compare model outputs: max absolute difference, cosine similarity, ok."""

from __future__ import annotations

from dataclasses import dataclass, asdict

import numpy as np

ATOL = 1e-4
RTOL = 1e-3


@dataclass(frozen=True)
class Parity:
    """How close two sets of outputs are."""

    max_abs_diff: float
    cosine: float
    ok: bool
    cases: int = 1

    def to_dict(self) -> dict:
        return asdict(self)


def real_tokens(output, mask):
    """The rows of a (batch, sequence, ...) output at real tokens (``mask`` == 1); other outputs unchanged.

    Padded positions carry no answer: models with local attention (ModernBERT) leave a padded
    query row with no key in its window, and engines fill such rows differently.
    """
    out = np.asarray(output)
    if mask is None:
        return out
    mask = np.asarray(mask)
    if mask.ndim != 2 or out.ndim < 2 or out.shape[:2] != mask.shape:
        return out
    return out[mask.astype(bool)]


def compare(reference, candidate, *, atol: float = ATOL, rtol: float = RTOL, mask=None) -> Parity:
    """Compare two arrays (or equal-length lists of arrays), at real tokens only when ``mask`` is given.

    ``mask`` is one attention mask (batch, sequence) or one per output pair.
    """
    refs = reference if isinstance(reference, (list, tuple)) else [reference]
    cands = candidate if isinstance(candidate, (list, tuple)) else [candidate]
    if len(refs) != len(cands):
        raise ValueError(f"{len(refs)} reference outputs but {len(cands)} candidate outputs")
    if mask is not None:
        masks = mask if isinstance(mask, (list, tuple)) else [mask] * len(refs)
        refs = [real_tokens(r, m) for r, m in zip(refs, masks)]
        cands = [real_tokens(c, m) for c, m in zip(cands, masks)]
    max_diff, ok = 0.0, True
    dots = na = nb = 0.0
    for r, c in zip(refs, cands):
        r = np.asarray(r, dtype=np.float64)
        c = np.asarray(c, dtype=np.float64)
        if r.shape != c.shape:
            return Parity(float("inf"), 0.0, False)
        if r.size:
            diff = np.abs(r - c)
            max_diff = max(max_diff, float(np.nanmax(diff)) if np.isfinite(diff).all() else float("inf"))
            ok = ok and bool(np.allclose(c, r, atol=atol, rtol=rtol))
        dots += float(np.sum(r * c))
        na += float(np.sum(r * r))
        nb += float(np.sum(c * c))
    cos = dots / (np.sqrt(na) * np.sqrt(nb)) if na > 0 and nb > 0 else (1.0 if na == nb else 0.0)
    return Parity(max_diff, float(cos), ok)


def merge(results: list[Parity]) -> Parity:
    """The worst case over several parity checks."""
    if not results:
        return Parity(0.0, 1.0, True, 0)
    return Parity(max(p.max_abs_diff for p in results), min(p.cosine for p in results),
                  all(p.ok for p in results), sum(p.cases for p in results))
