"""Live, honest benchmarks: variants timed side by side in one worker process.

``stream_benchmark`` starts one spawned worker (see :mod:`.worker`), which
builds every variant, warms each up, then times them round robin
(A B C A B C ...) with thread spinning off and the same thread count for all,
so drift and noise hit every variant alike (MEASURING.md). Each timed run
comes back as a :class:`RunSample` while the benchmark runs; the caller's
thread never times anything, and a worker that crashes natively is reported
as a :class:`~workbench.errors.BenchmarkError` ("worker died (signal N)")
while the caller keeps working.
"""

from __future__ import annotations

import dataclasses
import math
import multiprocessing as mp
import queue
import shutil
import statistics
import threading
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Iterator

from ...config import BenchConfig
from ...errors import BenchmarkError, ConfigError, WorkbenchError
from ...settings import env_number
from ..worker import main as worker_main
from ..worker import protocol as msgs
from ..worker.base import WORKER_ENV
from ..worker.floor import distrust_rate, plausible_bound
from . import spawn
from .load import LoadSampler
from .results import BenchResult, RunSample, Variant, VariantStats, fastest_fp32, prepare_variants

_DONE = object()


class BenchHandle:
    """A running benchmark: iterate its samples, stop it, or wait for the result.

    ``on_sample`` and ``on_event`` are called from the handle's reader
    thread, never from the worker; keep them short.
    """

    def __init__(self, job: msgs.BenchJob | msgs.ThroughputJob | msgs.ProfileJob, cfg: BenchConfig,
                 variants: list[dict], *,
                 on_sample: Callable[[RunSample], None] | None = None,
                 on_event: Callable[[msgs.Message], None] | None = None, cleanup: list[Path] | None = None):
        self.cfg = cfg
        self.variants = variants
        self.samples: dict[str, list[float]] = {v["name"]: [] for v in variants}
        self.shapes: dict[str, list] = {v["name"]: [] for v in variants}  # each run's (batch, sequence), beside it
        self.parity: dict[str, msgs.Parity] = {}  # each variant's against the reference
        self.text_summary: dict | None = job.text_summary if isinstance(job, msgs.BenchJob) else None
        self.session_providers: dict[str, list[str]] = {}
        self.assignments: dict = {}  # each ONNX Runtime variant's provider per node (ort.assignment.Assignment)
        self.machine: dict = {}
        self.floor: dict = {}
        self.profile: msgs.Profile | None = None  # the last variant's (a profile job of one variant: its only)
        self.profiles: dict[str, msgs.Profile] = {}
        self.peak_rss_mb: float | None = None  # the worker's, all variants together
        self.serve_batches: dict[str, dict] = {}  # throughput jobs: each variant's batch size and search
        self.stage: msgs.Status | None = None
        self.error: WorkbenchError | None = None
        self.worker_traceback: str | None = None
        self.stopped = False
        self._killed = False
        self._on_sample, self._on_event = on_sample, on_event
        self._queue: queue.Queue = queue.Queue()
        self._finished = threading.Event()
        self._cleanup = cleanup or []
        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe(duplex=True)
        env = dict(WORKER_ENV)
        env.update({"OMP_NUM_THREADS": str(cfg.threads), "MKL_NUM_THREADS": str(cfg.threads)})
        self._proc = ctx.Process(target=worker_main.worker_main, args=(child, env), daemon=True,
                                 name="workbench-bench")
        self._load = LoadSampler(cfg.threads).start()  # stopped once the worker is joined (its CPU is ours then)
        spawn.start(self._proc, env)
        child.close()
        self._send_lock = threading.Lock()
        self._send(job)
        self._reader = threading.Thread(target=self._read, name="workbench-bench-reader", daemon=True)
        self._reader.start()

    # ------------------------------------------------------------ plumbing
    @property
    def pid(self) -> int | None:
        """The worker's process id (for tests and for killing it by hand)."""
        return self._proc.pid

    @property
    def done(self) -> bool:
        return self._finished.is_set()

    def _send(self, msg) -> None:
        with self._send_lock:
            try:
                self._conn.send(msg)
            except (OSError, ValueError, BrokenPipeError):
                pass  # the worker is gone; the reader reports why

    def _read(self) -> None:
        ended = False
        try:
            while not ended:
                try:
                    msg = self._conn.recv()
                except (EOFError, OSError):
                    break
                self._HANDLERS[type(msg)](self, msg)
                ended = isinstance(msg, (msgs.Done, msgs.Error))
                if self._on_event and not isinstance(msg, msgs.Sample):
                    self._safe_call(self._on_event, msg)
            self._proc.join(timeout=30)
            if self._proc.is_alive():
                self._proc.terminate()
                self._proc.join(timeout=5)
            if not ended and self.error is None and not self._killed:
                self.error = spawn.died(self._proc.exitcode)
                if self._on_event:
                    self._safe_call(self._on_event, msgs.Error("BenchmarkError", str(self.error)))
        finally:
            try:
                self._conn.close()
            except OSError:
                pass
            for p in self._cleanup:
                shutil.rmtree(p, ignore_errors=True)
            self._load.stop()  # after the join: the worker's CPU is ours then
            self._finished.set()
            self._queue.put(_DONE)

    # One handler per message type, each keeping what its message says.
    def _got_sample(self, m: msgs.Sample) -> None:
        s = RunSample(m.variant, int(m.run_index), float(m.ms), m.shape)
        self.samples.setdefault(s.variant, []).append(s.ms)
        self.shapes.setdefault(s.variant, []).append(s.shape)
        self._queue.put(s)
        if self._on_sample:
            self._safe_call(self._on_sample, s)

    def _got_ready(self, m: msgs.Ready) -> None:
        self.machine = m.machine
        self.session_providers = {v["name"]: v["session_providers"] for v in m.variants}
        self.assignments = {v["name"]: v.get("assignment") for v in m.variants}

    def _got_parity(self, m: msgs.Parity) -> None:
        self.parity[m.variant] = m

    def _got_batch(self, m: msgs.Batch) -> None:
        self.serve_batches[m.variant] = {"batch": m.batch, "tried": m.tried, "sentences": m.sentences}

    def _got_memory(self, m: msgs.Memory) -> None:
        self.peak_rss_mb = m.peak_rss_mb

    def _got_floor(self, m: msgs.Floor) -> None:
        self.floor = dict(m.report)

    def _got_status(self, m: msgs.Status) -> None:
        self.stage = m

    def _got_profile(self, m: msgs.Profile) -> None:
        self.profile = self.profiles[m.variant] = m

    def _got_done(self, m: msgs.Done) -> None:
        self.stopped = bool(m.stopped)

    def _got_error(self, m: msgs.Error) -> None:
        self.error = m.exception()
        self.worker_traceback = m.traceback

    _HANDLERS = {msgs.Sample: _got_sample, msgs.Ready: _got_ready, msgs.Parity: _got_parity, msgs.Batch: _got_batch,
                 msgs.Memory: _got_memory, msgs.Floor: _got_floor, msgs.Status: _got_status,
                 msgs.Profile: _got_profile, msgs.Done: _got_done, msgs.Error: _got_error}

    def _safe_call(self, fn, arg) -> None:
        try:
            fn(arg)
        except Exception as e:  # a broken callback must not lose the benchmark
            if self.error is None:
                self.error = BenchmarkError(f"a progress callback failed: {type(e).__name__}: {e}")
            self.stop()

    # ------------------------------------------------------------ public
    def stop(self) -> None:
        """Ask the worker to stop after the current run; result() keeps what was measured."""
        if not self.done:
            self._send(msgs.Stop())

    def kill(self) -> None:
        """End the worker at once (it is reported as stopped, not as died)."""
        self.stopped = True
        self._killed = True
        if self._proc.is_alive():
            self._proc.kill()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the worker has finished; False on timeout."""
        return self._finished.wait(timeout)

    def result(self, timeout: float | None = None) -> BenchResult:
        """Wait for the end and summarise.

        Raises:
            BenchmarkError: the worker failed or died, or ``timeout`` passed
                (the worker is then ended).
            RuntimeUnavailableError: CUDA asked for and unusable.
        """
        if not self._finished.wait(timeout):
            self.kill()
            self._finished.wait(10)
            raise BenchmarkError(f"gave up after {timeout:g} s waiting for the benchmark worker "
                                 f"({len(self.variants)} variant(s) × {self.cfg.runs} runs); it was ended "
                                 f"(set {ENV_BENCH_WAIT} to wait longer)")
        if self.error is not None:
            raise self.error
        return self._summary()

    def _summary(self) -> BenchResult:
        floor = self.floor.get("floor_ms")
        t = self.text_summary  # with text, a run is one batch of the mix: sentences per run on average
        per_run = t["sentences"] / t["batches"] if t else self.cfg.batch
        stats = [VariantStats.from_samples(v, self.samples.get(v["name"], []), per_run, floor,
                                           _numbers(self.parity.get(v["name"])),
                                           self.session_providers.get(v["name"], []),
                                           self.shapes.get(v["name"])) for v in self.variants]

        for s in stats:
            own = self.floor.get("variants", {}).get(s.name)
            if own:  # the floor of the variant's own precision (int8 against the int8 rate)
                s.floor_precision = own["floor_precision"]
                # A bound above the measured time is impossible: unknown, and its rate is measured again next time.
                s.floor_ms = plausible_bound(own["floor_ms"], s.p50_ms)
                s.matmul_bound_ms = plausible_bound(own.get("matmul_bound_ms"), s.p50_ms)
                for kind, asked, kept in (("hot", own["floor_ms"], s.floor_ms),
                                          ("stream", own.get("matmul_bound_ms"), s.matmul_bound_ms)):
                    if asked and kept is None:
                        self._distrust(s.floor_precision, kind)
                s.floor_ratio = s.p50_ms / s.floor_ms if s.p50_ms and s.floor_ms else None
                s.bound_ratio = s.p50_ms / s.matmul_bound_ms if s.p50_ms and s.matmul_bound_ms else None
            s.assignment = self.assignments.get(s.name)
            par = self.parity.get(s.name)
            if par is not None:
                s.task_parity, s.task_parity_parts = par.task_parity, par.task_parity_parts
        cfg = asdict(self.cfg)
        cfg["reference"] = next((v["name"] for v in self.variants if v["name"] not in self.parity), None)
        cfg["text"] = self.text_summary
        machine = dict(self.machine)
        machine["threads"] = self.cfg.threads
        floor = floor if floor and not math.isnan(floor) else None
        fastest = fastest_fp32(stats)
        if floor and plausible_bound(floor, fastest) is None:
            floor = None
            self._distrust("fp32", "hot")
        return BenchResult(stats, machine, floor, cfg, self.stopped, dict(self.floor),
                           self._load.stop().with_spread(stats))

    def _distrust(self, precision: str | None, kind: str) -> None:
        dtype = "fp16" if precision == "fp16" else "int8" if precision and precision.startswith("int8") else "fp32"
        try:
            distrust_rate(self.cfg.threads, self.cfg.provider, dtype, kind)
        except Exception:  # the figure is already shown as unknown; re-measuring is a courtesy
            pass

    def __iter__(self) -> Iterator[RunSample]:
        """Samples as they arrive; raises the worker's error at the end, if any."""
        while True:
            item = self._queue.get()
            if item is _DONE:
                self._queue.put(_DONE)  # let a second iterator end too
                break
            yield item
        if self.error is not None:
            raise self.error

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if not self.done:
            self.stop()
            if not self.wait(10):
                self.kill()
                self.wait(5)


def _numbers(par: msgs.Parity | None) -> dict | None:
    """What a result keeps of a parity message as its ``parity``: the numbers (the answers go apart)."""
    return None if par is None else {"max_abs_diff": par.max_abs_diff, "cosine": par.cosine}


#: How long ``workbench bench`` waits for its worker, generous and scaled by what was asked (see
#: :func:`wait_bound`); ``WORKBENCH_BENCH_WAIT_S`` replaces the whole bound.
BENCH_WAIT_BASE_S = 900.0  # the worker's start and imports, the load sampler, the floor
BENCH_WAIT_PER_VARIANT_S = 600.0  # one variant's session (bert-large built and optimised), parity, answers
BENCH_WAIT_PER_RUN_S = 120.0  # one run (warm-up or timed) of up to 4,096 tokens; more tokens, proportionally more
ENV_BENCH_WAIT = "WORKBENCH_BENCH_WAIT_S"


def wait_bound(cfg: BenchConfig, n_variants: int) -> float:
    """Seconds to wait for a benchmark of ``n_variants`` variants under ``cfg`` before ending its worker:
    ``$WORKBENCH_BENCH_WAIT_S`` when set, else base + variants × (session + (warm-up + runs) × per-run time),
    the per-run time scaled by batch × seq over 4,096 tokens (a bert-large run of 32 × 512 gets 8 minutes)."""
    env = env_number(ENV_BENCH_WAIT, None, minimum=0.001)
    if env is not None:
        return float(env)
    per_run = BENCH_WAIT_PER_RUN_S * max(1.0, cfg.batch * cfg.seq / 4096)
    return BENCH_WAIT_BASE_S + max(1, n_variants) * (BENCH_WAIT_PER_VARIANT_S + (cfg.warmup + cfg.runs) * per_run)


def stream_benchmark(variants: list[Variant], cfg: BenchConfig | None = None,
                     on_sample: Callable[[RunSample], None] | None = None, *,
                     on_event: Callable[[msgs.Message], None] | None = None, reference: str | None = None,
                     floor: bool = True, memory_limit_mb: int | None = None, text=None,
                     text_answers_only: bool = False, text_parts: dict | None = None,
                     _fault: str | None = None) -> BenchHandle:
    """Start a benchmark in a worker process and return at once.

    Args:
        variants: what to time; each variant's provider decides its session.
        cfg: shape, threads, warm-up and runs, equal for every variant.
        on_sample: called with each :class:`RunSample` as it arrives.
        on_event: called with the worker's other messages (status, parity,
            floor, done, error): the dataclasses of :mod:`.protocol` (``kind`` names each).
        reference: the variant others are compared with for parity
            (default: the first).
        floor: compute the hardware floor (measures the matmul rate the first
            time on a machine, about 2 s).
        memory_limit_mb: cap the worker's address space (CPU only), so an
            oversized batch fails with a clear error instead of swapping.
        text: tokenized sentences (``workbench.text.TextBatches``): the timed
            runs cycle through its batches (a bucketed mix of lengths, so
            p50/p90/p99 are over that mix instead of ``cfg``'s one shape), and
            each variant gets ``task_parity`` against the reference.
        text_answers_only: check the answers on ``text`` but time at ``cfg``'s one shape (seeded
            random inputs, as without text); the result's ``config.answers_text`` describes the text.
        text_parts: ``{"search": [batch index, ...], "check": [...]}``: answers per part
            (``VariantStats.task_parity_parts``), ``task_parity`` then being the check part's.

    Raises:
        ConfigError: no variants, or repeated names.
        RuntimeUnavailableError: a CUDA variant where CUDA cannot run.
    """
    cfg = cfg or BenchConfig()
    described, cleanup = prepare_variants(variants)
    if reference is not None and reference not in {v["name"] for v in described}:
        raise ConfigError(f"reference {reference!r} is not one of the variants")
    if memory_limit_mb and any(v["provider"] == "cuda" for v in described):
        raise ConfigError("memory_limit_mb works on the CPU only (CUDA reserves large address ranges)")
    job = msgs.BenchJob(described, asdict(cfg), reference=reference, floor=floor, memory_limit_mb=memory_limit_mb,
                        fault=_fault)
    if text is not None:
        job = dataclasses.replace(job, text=dict(text.job(), answers_only=bool(text_answers_only), parts=text_parts),
                                  text_summary=None if text_answers_only else text.describe())
    return BenchHandle(job, cfg, described, on_sample=on_sample, on_event=on_event, cleanup=cleanup)


def throughput(variants: list[Variant], cfg: BenchConfig, serve: dict, *, reference: str | None = None,
               batches: dict | None = None, passes: int = 3, timeout: float | None = None,
               on_event: Callable[[msgs.Message], None] | None = None, batch1: dict | None = None) -> tuple[dict, dict]:
    """The throughput workload in one worker, interleaved (see :mod:`.serve`).

    ``batch1``: each variant's sentences/s at batch 1, known from the latency workload (not measured again).

    Returns ``({name: {"batch", "tried", "sentences_per_s", "samples_ms", "task_parity",
    "task_parity_parts", "cosine"}}, machine)``; the answers are each variant's as served, in its
    padded batches, against ``reference`` served in its own.
    """
    described, cleanup = prepare_variants(variants)
    job = msgs.ThroughputJob(described, asdict(cfg), serve, reference=reference, batches=batches or {},
                             passes=passes, batch1=batch1 or {})
    handle = BenchHandle(job, cfg, described, on_event=on_event, cleanup=cleanup)
    with handle:
        handle.result(timeout)

    n = len(serve["corpus"])
    out = {}
    for v in described:
        ms = handle.samples.get(v["name"], [])
        par = handle.parity.get(v["name"])
        out[v["name"]] = {**handle.serve_batches.get(v["name"], {}), "samples_ms": list(ms),
                          "sentences_per_s": n / statistics.median(ms) * 1e3 if ms else None,
                          "task_parity": par.task_parity if par else None,
                          "task_parity_parts": par.task_parity_parts if par else None,
                          "cosine": par.cosine if par else None}
    return out, dict(handle.machine)


def benchmark(variants: list[Variant], cfg: BenchConfig | None = None, *, timeout: float | None = None,
              **kwargs) -> BenchResult:
    """Run a benchmark to the end and return its result (blocking)."""
    handle = stream_benchmark(variants, cfg, **kwargs)
    with handle:
        return handle.result(timeout)


__all__ = ["BenchHandle", "stream_benchmark", "benchmark", "throughput"]
