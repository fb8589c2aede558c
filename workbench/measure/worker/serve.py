"""The throughput workload inside the benchmark worker, and the answers per part of a split text.

``throughput_job`` (worker mode ``"throughput"``): every variant serves the corpus (sentences sorted
by length, batches padded to each batch's longest; :mod:`.workload`) at its own batch size, found by
a short search (one pass per size: 1, 8, 64, then the powers of two beside the best; batch 1's
rate may come from the latency workload, ``batch1``) unless the job fixes it; one pass each as warm-up, which also keeps each variant's outputs of the text's
sentences as served (padded, in their batch) for the batched answers; then whole passes timed round
robin. Messages (:mod:`.protocol`): ``Batch`` per variant (``batch``, ``tried``: sentences/s per size),
``Parity`` with the batched answers, ``Sample`` per pass (``ms``, ``sentences``), ``Memory``.
:func:`batches_of` and :func:`serve_pass` also serve the as-shipped slices (:mod:`.slices`).
"""

from __future__ import annotations

import time

import numpy as np

from ...errors import BenchmarkError
from ...ort.parity import compare
from ...ort.task_parity import task_parity
from . import protocol as msgs
from .base import build_runners, fault, peak_rss_mb, send_ready
from .runners import run_error

COARSE = (1, 8, 64)


def pad_batch(rows: list[dict], pad_id: int) -> dict:
    """Sentences of one row each (their own lengths) → one batch right-padded to its longest."""
    longest = max(int(r["input_ids"].shape[1]) for r in rows)
    out = {}
    for k in rows[0]:
        fill = pad_id if k == "input_ids" else 0
        a = np.full((len(rows), longest), fill, dtype=np.int64)
        for i, r in enumerate(rows):
            a[i, :r[k].shape[1]] = r[k][0]
        out[k] = a
    return out


def parity_of_parts(text: dict, ref: list, cand: list, batches: list) -> dict:
    """``task_parity`` (the check part's when the text is split, else all) and ``task_parity_parts``."""
    kind, mask = text["kind"], text.get("mask_token_id")

    def over(idx) -> dict:
        idx = list(idx)
        return task_parity(kind, [ref[i] for i in idx], [cand[i] for i in idx], [batches[i] for i in idx],
                           mask_token_id=mask)

    parts = text.get("parts")
    if not parts:
        return {"task_parity": over(range(len(batches)))}
    per = {k: over(v) for k, v in parts.items() if v}
    return {"task_parity": per.get("check") or over(range(len(batches))), "task_parity_parts": per}


def batches_of(serve: dict, b: int) -> list[tuple[list[int], dict]]:
    """The corpus cut into batches of ``b``: (sentence indices, padded feeds)."""
    sents, corpus = serve["sentences"], serve["corpus"]
    out = []
    for j in range(0, len(corpus), b):
        idx = corpus[j:j + b]
        out.append((idx, pad_batch([sents[i] for i in idx], serve["pad_id"])))
    return out


def serve_pass(r, batches, keep: set | None = None) -> tuple[float, dict]:
    """Serve every batch once; seconds taken (feeding included, as a server feeds), and the kept rows."""
    rows: dict[int, object] = {}
    t0 = time.perf_counter()
    for idx, feeds in batches:
        r.prepare(feeds)
        if keep is None:
            r.run()
            continue
        out = r.output()
        for k, i in enumerate(idx):
            if i in keep and i not in rows:
                rows[i] = _row(out, k, int(feeds["attention_mask"][k].sum()), feeds["input_ids"].shape[1])
    return time.perf_counter() - t0, rows


def _row(out, k: int, length: int, padded: int):
    """One sentence's output from its batch: its real tokens where the output has a sequence axis."""
    row = out[k]
    return row[:length].copy() if out.ndim == 3 and out.shape[1] == padded else row.copy()


def search_batch(ch, r, serve: dict, sizes=None, batch1: float | None = None) -> tuple[int, dict]:
    """The batch size with the most sentences per second over one pass of the corpus each; ``batch1``: the
    rate at batch 1 already known from the latency workload (the same sentences one at a time), not measured
    again (its pass is the slowest of all)."""
    sizes = sorted(sizes or serve["batch_sizes"])
    n = len(serve["corpus"])
    tried: dict[int, float] = {1: float(batch1)} if batch1 and 1 in sizes else {}

    def measure(b: int) -> None:
        if b in tried or b not in sizes:
            return
        ch.check_stop()
        ch.status(f"batch-size search ({b})", r.name, len(tried), 6)
        batches = batches_of(serve, b)
        serve_pass(r, batches[:1])  # this shape warmed
        secs, _ = serve_pass(r, batches)
        tried[b] = n / secs

    for b in (s for s in COARSE if s in sizes) or sizes[:1]:
        measure(b)
    best = max(tried, key=tried.get)
    i = sizes.index(best)
    for b in sizes[max(0, i - 1):i + 2]:
        measure(b)
    best = max(tried, key=tried.get)
    return best, {str(k): round(v, 2) for k, v in sorted(tried.items())}


def _send_batched_parity(ch, job: msgs.ThroughputJob, runners: list, rows: dict) -> None:
    serve = job.serve
    ref_name = job.reference or runners[0].name
    if ref_name not in rows:
        return
    pseudo = _pseudo_feeds(serve)
    order = sorted(pseudo)
    ref = [rows[ref_name][i][None] for i in order]
    pos = {i: k for k, i in enumerate(order)}
    text = {"kind": serve["kind"], "mask_token_id": serve.get("mask_token_id"),
            "parts": {p: [pos[i] for i in v] for p, v in (serve.get("parts") or {}).items()}}
    for r in runners:
        if r.name == ref_name:
            continue
        cand = [rows[r.name][i][None] for i in order]

        p = compare(ref, cand)
        answers = parity_of_parts(text, ref, cand, [pseudo[i] for i in order])
        ch.send(msgs.Parity(r.name, ref_name, p.max_abs_diff, p.cosine, **answers))


def _pseudo_feeds(serve: dict) -> dict:
    """Each checked sentence as a batch of one at its own length (how the kept rows line up)."""
    keep = {i for v in (serve.get("parts") or {}).values() for i in v} or set(range(len(serve["sentences"])))
    return {i: serve["sentences"][i] for i in keep}


def throughput_job(ch, job: msgs.ThroughputJob, workdir) -> None:
    """See the module doc."""
    cfg, serve = job.cfg, job.serve
    runners = build_runners(ch, job, workdir)
    send_ready(ch, runners, int(cfg["threads"]))
    longest = max(int(s["input_ids"].shape[1]) for s in serve["sentences"])
    fixed = job.batches or {}
    keep = set(_pseudo_feeds(serve))
    rows, plan = {}, {}
    for r in runners:
        b = 1
        if longest > r.spec.max_positions:
            raise BenchmarkError(f"sequence {longest} is longer than {r.name}'s {r.spec.max_positions} positions")
        try:
            b, tried = (int(fixed[r.name]), {}) if r.name in fixed else search_batch(
                ch, r, serve, batch1=(job.batch1 or {}).get(r.name))
            plan[r.name] = batches_of(serve, b)
            ch.send(msgs.Batch(r.name, b, tried, len(serve["corpus"])))
            ch.status("warm-up (answers as served)", r.name, 0, 1)
            rows[r.name] = serve_pass(r, plan[r.name], keep)[1]
        except Exception as e:
            raise run_error(e, r.name, b, longest) from e
    _send_batched_parity(ch, job, runners, rows)
    rows.clear()
    n = len(serve["corpus"])
    for i in range(int(job.passes or 3)):
        for r in runners:
            ch.check_stop()
            try:
                secs, _ = serve_pass(r, plan[r.name])
            except Exception as e:
                raise run_error(e, r.name, 0, longest) from e
            ch.send(msgs.Sample(r.name, i, secs * 1e3, n))
            fault(job.fault, "sample")
    ch.send(msgs.Memory(peak_rss_mb()))
    for r in runners:
        r.close()


__all__ = ["pad_batch", "parity_of_parts", "search_batch", "throughput_job", "batches_of", "serve_pass"]
