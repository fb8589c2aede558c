"""Engines as they ship, each in a process of its own, measured in alternating time slices.

A user who picks PyTorch, OpenVINO or ONNX Runtime runs it as shipped: PyTorch's OpenMP threads
and ONNX Runtime's intra-op threads spin after a run, OpenVINO runs at its shipped LATENCY hint
without a pinned stream count. Interleaving those in one process lets one engine's spinning threads
steal the cores from the next (MEASURING.md, rule 1), so here every variant gets a process of its
own (no ``OMP_WAIT_POLICY=PASSIVE``, spinning on; the same thread budget), all are built first, and
then only one process runs at a time: a slice of runs for each in turn (A's slice, B's, C's, A's,
...), each slice starting with a short warm-up so its threads are awake. Drift hits every variant
alike, as with round robin, and no engine runs beside another.

Each process serves both workloads (latency: one sentence at a time; throughput: passes over the
corpus at the variant's batch size) and reports its peak resident memory at the end: what serving
that variant costs, runtime included (PyTorch is imported only by PyTorch variants).

Messages over a pipe (:mod:`.protocol`), caller → process: ``SliceJob``, then ``Slice`` (workload, runs)
any number of times, then ``End``; process → caller: ``SliceReady``, one ``SliceTimes`` (``ms``: the
timed runs) per slice asked, then ``SliceDone`` (``peak_rss_mb``) or ``Error``.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from ...errors import BenchmarkError, first_line
from ..harness import spawn
from ..worker import protocol as msgs
from ..worker.base import peak_rss_mb, set_threads
from ..worker.runners import make_runner
from ..worker.serve import batches_of, serve_pass

#: Set before torch or onnxruntime load in a slice process; nothing that changes how an engine waits.
SHIPPED_ENV = {"TOKENIZERS_PARALLELISM": "false", "TF_CPP_MIN_LOG_LEVEL": "3"}
WARM_RUNS = 2


def _prepare(r, job: msgs.SliceJob) -> dict:
    """The runner's workloads: the latency sentences, and the corpus at its batch size."""
    plan = {}
    if job.latency:
        plan["latency"] = list(job.latency)
    if job.serve and job.batch:
        plan["throughput"] = batches_of(job.serve, int(job.batch))
    return plan


def _slice(r, plan: dict, workload: str, runs: int, state: dict) -> list[float]:
    out = []
    if workload == "throughput":
        serve_pass(r, plan["throughput"][:WARM_RUNS])
        for _ in range(runs):
            out.append(serve_pass(r, plan["throughput"])[0] * 1e3)
        return out
    feeds = plan["latency"]
    for k in range(WARM_RUNS + runs):
        r.prepare(feeds[state["next"] % len(feeds)])
        state["next"] += 1
        t0 = time.perf_counter()
        r.run()
        if k >= WARM_RUNS:
            out.append((time.perf_counter() - t0) * 1e3)
    return out


def slice_main(conn, env: dict | None = None) -> None:
    """Entry point of one slice process."""
    os.environ.update(env or {})
    workdir = Path(tempfile.mkdtemp(prefix="workbench-slices-"))
    try:
        job: msgs.SliceJob = conn.recv()

        threads = int(job.threads)
        set_threads(threads, job.variant.get("kind") == "torch")
        r = make_runner(job.variant, threads, workdir)
        plan, state = _prepare(r, job), {"next": 0}
        conn.send(msgs.SliceReady(list(r.providers)))
        while True:
            msg = conn.recv()
            if not isinstance(msg, msgs.Slice):
                break
            conn.send(msgs.SliceTimes(_slice(r, plan, msg.workload, int(msg.runs), state)))
        r.close()
        conn.send(msgs.SliceDone(peak_rss_mb()))
    except BaseException as e:  # noqa: BLE001 - every failure goes back as one line

        try:
            conn.send(msgs.Error("internal", f"{type(e).__name__}: {first_line(e)}"))
        except (OSError, ValueError):
            pass
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


class _Proc:
    def __init__(self, variant, job: msgs.SliceJob, threads: int):
        ctx = mp.get_context("spawn")
        self.name = variant.name
        self.conn, child = ctx.Pipe(duplex=True)
        env = dict(SHIPPED_ENV, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
        self.proc = ctx.Process(target=slice_main, args=(child, env), daemon=True, name="workbench-slice")
        spawn.start(self.proc, env)
        child.close()
        self.conn.send(job)

    def recv(self, timeout: float) -> msgs.Message:
        if not self.conn.poll(timeout):
            raise BenchmarkError(f"{self.name} (as shipped) did not answer within {timeout:g} s")
        try:
            msg = self.conn.recv()
        except (EOFError, OSError):
            self.proc.join(5)
            raise BenchmarkError(f"{self.name} (as shipped): its process died (exit status "
                                 f"{self.proc.exitcode})") from None
        if isinstance(msg, msgs.Error):
            raise BenchmarkError(f"{self.name} (as shipped): {msg.message}")
        return msg

    def close(self) -> None:
        try:
            self.conn.close()
        except OSError:
            pass
        self.proc.join(5)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5)


def _jobs(variants: list, threads: int, latency, serve, batches: dict, throughput_variants: list | None) -> list:
    """``(variant, SliceJob, workloads)`` per process: one per variant, or, for a name whose throughput variant is
    another graph (this machine's plan per workload), one process per workload."""
    thr = {v.name: v for v in (throughput_variants if throughput_variants is not None else variants)}
    lat = {v.name: v for v in variants} if latency is not None else {}
    out = []
    for name in dict.fromkeys([*lat, *thr]):
        a, b = lat.get(name), thr.get(name) if (serve and batches.get(name)) else None
        split = a is not None and b is not None and a.describe() != b.describe()
        both = tuple(w for w, x in (("latency", a), ("throughput", b)) if x is not None)
        for v, loads in ([(a, ("latency",)), (b, ("throughput",))] if split else [(a or b, both)]):
            if v is None:
                continue
            d = replace(v, spinning=True).describe()
            job = msgs.SliceJob(d, threads, latency=list(latency.batches) if "latency" in loads and a is not None
                                else None, serve=serve if "throughput" in loads and b is not None else None,
                                batch=batches.get(name) if "throughput" in loads and b is not None else None)
            out.append((v, job, loads))
    return out


def shipped(variants: list, threads: int, *, latency=None, serve: dict | None = None, batches: dict | None = None,
            runs: int = 30, passes: int = 5, slices: int = 5, timeout: float = 900, progress=None,
            throughput_variants: list | None = None) -> dict:
    """Time each variant as shipped in alternating slices (see the module doc).

    Args:
        variants: :class:`~workbench.measure.harness.results.Variant` objects (their ``spinning`` is set here).
        latency: TextBatches whose batches are served one at a time (None: no latency slices).
        serve: the throughput job (:func:`.workload.serve_job`) and ``batches``: each variant's batch size.
        throughput_variants: the variants the throughput slices serve, where a name's graph differs per workload
            (this machine's plan); default ``variants``.
        runs, passes: timed latency runs and throughput passes per variant, spread over ``slices`` slices.

    Returns:
        ``{name: {"latency_ms": [...], "throughput_ms": [...], "sentences": n, "peak_rss_mb", "providers"}}``.
    """
    say = progress or (lambda stage, f: None)
    batches = batches or {}
    procs: list[tuple[_Proc, tuple]] = []
    out: dict[str, dict] = {}
    try:
        for v, job, loads in _jobs(variants, threads, latency, serve, batches, throughput_variants):
            procs.append((_Proc(v, job, threads), loads))
        for k, (p, _) in enumerate(procs):
            say(f"as shipped: building {p.name}", 0.1 * k / len(procs))
            got = p.recv(timeout)
            entry = out.setdefault(p.name, {"providers": got.providers, "latency_ms": [], "throughput_ms": [],
                                            "sentences": len(serve["corpus"]) if serve else None})
            entry["providers"] = entry["providers"] or got.providers
        per = {"latency": max(1, -(-runs // slices)), "throughput": max(1, -(-passes // slices))}
        loads = [w for w, on in (("latency", latency is not None), ("throughput", bool(serve))) if on]
        for s in range(slices):
            say(f"as shipped: slice {s + 1} of {slices}", 0.1 + 0.9 * s / slices)
            order = procs[s % len(procs):] + procs[:s % len(procs)]  # who goes first rotates
            for w in loads:
                for p, served in order:
                    if w not in served or (w == "throughput" and not batches.get(p.name)):
                        continue
                    p.conn.send(msgs.Slice(w, per[w]))
                    out[p.name][f"{w}_ms"] += p.recv(timeout).ms
        for p, _ in procs:
            p.conn.send(msgs.End())
            rss = p.recv(timeout).peak_rss_mb
            out[p.name]["peak_rss_mb"] = max(rss or 0, out[p.name].get("peak_rss_mb") or 0) or rss
        return out
    finally:
        for p, _ in procs:
            p.close()


__all__ = ["shipped", "slice_main", "SHIPPED_ENV"]
