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

import contextlib
import math
import multiprocessing as mp
import os
import queue
import shutil
import signal
import sys
import tempfile
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from ..config import BenchConfig
from ..errors import BenchmarkError, ConfigError, WorkbenchError
from . import worker as _worker

KINDS = ("onnx", "torch", "openvino")
_ENV_LOCK = threading.Lock()


@dataclass(frozen=True)
class Variant:
    """One thing to time.

    Attributes:
        name: label in results and plots; unique within a benchmark.
        model: ONNX path or serialized bytes (``kind="onnx"``).
        provider: "cpu" or "cuda".
        level: ONNX Runtime graph optimization level at session creation
            ("disable", "basic", "extended", "all").
        kind: "onnx" (ONNX Runtime), "torch" (PyTorch) or "openvino" (OpenVINO on the ONNX file).
        fp16: convert to float16 first, keeping fp32 inputs and outputs
            (ONNX), or ``model.half()`` (torch).
        torch_source: for ``kind="torch"``: ``{"model": preset, folder or hub
            id, "attention": "eager"|"sdpa", "seed": int}``.
        disabled_optimizers: ONNX Runtime session transformers to skip, so
            fusions switched off in the plan stay off at level "all".
        options: engine settings: ``{"compile": True}`` (torch: ``torch.compile``, inductor),
            ``{"precision": "f32"}`` (openvino: its inference precision hint; absent: its default).
    """

    name: str
    model: str | Path | bytes | None = None
    provider: str = "cpu"
    level: str = "all"
    kind: str = "onnx"
    fp16: bool = False
    torch_source: dict | None = None
    disabled_optimizers: tuple[str, ...] = ()
    options: dict | None = None

    def __post_init__(self):
        object.__setattr__(self, "disabled_optimizers", tuple(self.disabled_optimizers or ()))
        from ..ort.session import LEVELS

        if not self.name:
            raise ConfigError("a variant needs a name")
        if self.kind not in KINDS:
            raise ConfigError(f"variant kind must be one of {KINDS}, not {self.kind!r}")
        if self.provider not in ("cpu", "cuda"):
            raise ConfigError(f"provider must be 'cpu' or 'cuda', not {self.provider!r}")
        if self.level not in LEVELS:
            raise ConfigError(f"level must be one of {sorted(LEVELS)}, not {self.level!r}")
        if self.kind in ("onnx", "openvino") and self.model is None:
            raise ConfigError(f"variant {self.name!r} needs an ONNX model (path or bytes)")
        if self.kind == "torch" and not (self.torch_source or {}).get("model"):
            raise ConfigError(f"torch variant {self.name!r} needs torch_source={{'model': name or folder}}")

    def describe(self) -> dict:
        """Plain-dict form for the worker and for results (bytes not included)."""
        d = {"name": self.name, "provider": self.provider, "level": self.level, "kind": self.kind,
             "fp16": self.fp16, "torch_source": dict(self.torch_source) if self.torch_source else None,
             "disabled_optimizers": list(self.disabled_optimizers), "options": dict(self.options or {})}
        d["model"] = None if self.model is None or isinstance(self.model, bytes) else str(self.model)
        return d


@dataclass(frozen=True)
class RunSample:
    """One timed run of one variant, streamed while the benchmark runs."""

    variant: str
    run_index: int
    ms: float


@dataclass
class VariantStats:
    """Summary of one variant's timed runs (None where there were no runs)."""

    name: str
    provider: str
    p50_ms: float | None
    p90_ms: float | None
    p99_ms: float | None
    mean_ms: float | None
    std_ms: float | None
    throughput_per_s: float | None
    runs: int
    samples_ms: list[float] = field(default_factory=list)
    parity: dict | None = None
    floor_ratio: float | None = None
    session_providers: list[str] = field(default_factory=list)
    kind: str = "onnx"
    level: str = "all"
    fp16: bool = False
    #: ONNX Runtime session transformers this variant ran without (fusions the plan keeps off).
    disabled_optimizers: list[str] = field(default_factory=list)
    #: The answer-level check against the reference on real text (``ort.task_parity``); None for the
    #: reference and without text.
    task_parity: dict | None = None
    #: This variant's own floor: its FLOPs at the measured rate of each precision it runs in.
    floor_ms: float | None = None
    #: "fp32", "int8+fp32", "fp16": the precisions behind ``floor_ms``.
    floor_precision: str | None = None
    #: Its MatMuls alone with weights read from memory (streaming rates), per precision.
    matmul_bound_ms: float | None = None
    #: p50 over ``matmul_bound_ms``.
    bound_ratio: float | None = None

    @classmethod
    def from_samples(cls, v: dict, samples: list[float], batch: int, floor: float | None,
                     parity: dict | None, session_providers: list[str]) -> "VariantStats":
        import numpy as np

        n = len(samples)
        if n:
            a = np.asarray(samples, dtype=np.float64)
            p50, p90, p99 = (float(x) for x in np.percentile(a, [50, 90, 99]))
            mean, std = float(a.mean()), float(a.std(ddof=1)) if n > 1 else 0.0
            thr = batch * 1000.0 / mean if mean > 0 else None
        else:
            p50 = p90 = p99 = mean = std = thr = None
        ratio = p50 / floor if p50 and floor else None
        return cls(v["name"], v["provider"], p50, p90, p99, mean, std, thr, n, list(samples), parity, ratio,
                   list(session_providers), v.get("kind", "onnx"), v.get("level", "all"), bool(v.get("fp16")),
                   list(v.get("disabled_optimizers") or ()))

    def to_dict(self, samples: bool = True) -> dict:
        d = asdict(self)
        if not samples:
            d.pop("samples_ms")
        return d


def _fastest_fp32(stats) -> float | None:
    """The fastest p50 among variants that run the model's fp32 FLOPs (what a fp32 bound must stay under)."""
    return min((s.p50_ms for s in stats if s.p50_ms and (s.floor_precision or "fp32") == "fp32"), default=None)


@dataclass
class BenchResult:
    """Everything one benchmark measured, with the machine it ran on."""

    variants: list[VariantStats]
    machine: dict
    floor_ms: float | None
    config: dict = field(default_factory=dict)
    stopped: bool = False
    floor: dict = field(default_factory=dict)

    def __getitem__(self, name: str) -> VariantStats:
        for v in self.variants:
            if v.name == name:
                return v
        raise KeyError(name)

    @property
    def rates(self) -> dict:
        """Measured MatMul rates per precision: ``{"fp32": {"hot", "stream", "unit", ...}, "int8": ...}``."""
        return dict(self.floor.get("rates") or {})

    @property
    def matmul_bound_ms(self) -> float | None:
        """The model's FLOPs at the streaming MatMul rate (weights from memory), or None (also when it
        exceeds the fastest fp32 variant's measured time, which makes it impossible)."""
        from .floor import plausible_bound

        v = self.floor.get("matmul_bound_ms")
        return plausible_bound(float(v), _fastest_fp32(self.variants)) if v else None

    def ratio(self, slower: str, faster: str) -> float | None:
        """How many times faster ``faster`` is than ``slower`` (ratio of p50s)."""
        a, b = self[slower].p50_ms, self[faster].p50_ms
        return a / b if a and b else None

    def to_dict(self, samples: bool = True) -> dict:
        """JSON-ready: ``{"machine", "floor_ms", "matmul_bound_ms", "config", "stopped", "variants": [...]}``."""
        return {"machine": self.machine, "floor_ms": self.floor_ms, "matmul_bound_ms": self.matmul_bound_ms,
                "rates": self.rates, "floor": self.floor, "config": self.config,
                "stopped": self.stopped, "variants": [v.to_dict(samples) for v in self.variants]}

    def to_frame(self):
        """One row per variant (pandas DataFrame), samples left out."""
        import pandas as pd

        rows = []
        for v in self.variants:
            d = v.to_dict(samples=False)
            par = d.pop("parity") or {}
            d["max_abs_diff"] = par.get("max_abs_diff")
            d["cosine"] = par.get("cosine")
            d["session_providers"] = ",".join(d["session_providers"])
            rows.append(d)
        return pd.DataFrame(rows)


def _error_from(msg: dict) -> WorkbenchError:
    from .. import errors

    cls = getattr(errors, msg.get("error", ""), None)
    if isinstance(cls, type) and issubclass(cls, WorkbenchError):
        return cls(msg.get("message", "benchmark failed"))
    return BenchmarkError(f"the benchmark worker failed: {msg.get('message', 'unknown error')}")


def _died(exitcode: int | None) -> BenchmarkError:
    if exitcode is not None and exitcode < 0:
        sig = -exitcode
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = "unknown"
        hint = " (possibly out of memory)" if sig == signal.SIGKILL else ""
        return BenchmarkError(f"worker died (signal {sig}, {name}){hint}")
    return BenchmarkError(f"worker died (exit status {exitcode}) before reporting a result")


_DONE = object()
_MISSING = object()


@contextlib.contextmanager
def _worker_launch_context(env: dict):
    """Start the worker with ``env`` set and without re-running the caller's script.

    The child inherits the environment at exec time, and torch reads
    OMP_WAIT_POLICY when it loads. ``spawn`` normally re-imports the main
    script in the child (which would import torch first, re-run the script's
    side effects, and fail outright without an ``if __name__ == "__main__"``
    guard); the worker needs nothing from it, so it is hidden while starting.
    """
    saved_env = {k: os.environ.get(k) for k in env}
    main = sys.modules.get("__main__")
    saved_file = getattr(main, "__file__", _MISSING) if main else _MISSING
    saved_spec = getattr(main, "__spec__", _MISSING) if main else _MISSING
    os.environ.update(env)
    try:
        if saved_file is not _MISSING:
            del main.__file__
        if saved_spec is not _MISSING:
            main.__spec__ = None
        yield
    finally:
        if saved_file is not _MISSING:
            main.__file__ = saved_file
        if saved_spec is not _MISSING:
            main.__spec__ = saved_spec
        for k, old in saved_env.items():
            if old is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = old


class BenchHandle:
    """A running benchmark: iterate its samples, stop it, or wait for the result.

    ``on_sample`` and ``on_event`` are called from the handle's reader
    thread, never from the worker; keep them short.
    """

    def __init__(self, job: dict, cfg: BenchConfig, variants: list[dict], *,
                 on_sample: Callable[[RunSample], None] | None = None,
                 on_event: Callable[[dict], None] | None = None, cleanup: list[Path] | None = None):
        self.cfg = cfg
        self.variants = variants
        self.samples: dict[str, list[float]] = {v["name"]: [] for v in variants}
        self.parity: dict[str, dict] = {}
        self.text_summary: dict | None = job.get("text_summary")
        self.session_providers: dict[str, list[str]] = {}
        self.machine: dict = {}
        self.floor: dict = {}
        self.profile: dict | None = None
        self.stage: dict = {}
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
        env = dict(_worker.WORKER_ENV)
        env.update({"OMP_NUM_THREADS": str(cfg.threads), "MKL_NUM_THREADS": str(cfg.threads)})
        self._proc = ctx.Process(target=_worker.worker_main, args=(child, env), daemon=True,
                                 name="workbench-bench")
        with _ENV_LOCK, _worker_launch_context(env):
            self._proc.start()
        child.close()
        self._send_lock = threading.Lock()
        self._send({"cmd": "start", "job": job})
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

    def _send(self, msg: dict) -> None:
        with self._send_lock:
            try:
                self._conn.send(msg)
            except (OSError, ValueError, BrokenPipeError):
                pass  # the worker is gone; the reader reports why

    def _read(self) -> None:
        ended = False
        try:
            while True:
                try:
                    msg = self._conn.recv()
                except (EOFError, OSError):
                    break
                kind = msg.get("type")
                if kind == "sample":
                    s = RunSample(msg["variant"], int(msg["run_index"]), float(msg["ms"]))
                    self.samples.setdefault(s.variant, []).append(s.ms)
                    self._queue.put(s)
                    if self._on_sample:
                        self._safe_call(self._on_sample, s)
                    continue
                if kind == "ready":
                    self.machine = msg.get("machine", {})
                    self.session_providers = {v["name"]: v["session_providers"] for v in msg["variants"]}
                elif kind == "parity":
                    self.parity[msg["variant"]] = {"max_abs_diff": msg["max_abs_diff"], "cosine": msg["cosine"],
                                                   "reference": msg.get("reference"),
                                                   "task_parity": msg.get("task_parity")}
                elif kind == "floor":
                    self.floor = {k: v for k, v in msg.items() if k != "type"}
                elif kind == "status":
                    self.stage = msg
                elif kind == "profile":
                    self.profile = msg
                elif kind == "done":
                    self.stopped = bool(msg.get("stopped"))
                    ended = True
                elif kind == "error":
                    self.error = _error_from(msg)
                    self.worker_traceback = msg.get("traceback")
                    ended = True
                if self._on_event:
                    self._safe_call(self._on_event, msg)
                if ended:
                    break
            self._proc.join(timeout=30)
            if self._proc.is_alive():
                self._proc.terminate()
                self._proc.join(timeout=5)
            if not ended and self.error is None and not self._killed:
                self.error = _died(self._proc.exitcode)
                if self._on_event:
                    self._safe_call(self._on_event, {"type": "error", "error": "BenchmarkError",
                                                     "message": str(self.error)})
        finally:
            try:
                self._conn.close()
            except OSError:
                pass
            for p in self._cleanup:
                shutil.rmtree(p, ignore_errors=True)
            self._finished.set()
            self._queue.put(_DONE)

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
            self._send({"cmd": "stop"})

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
            raise BenchmarkError(f"the benchmark did not finish within {timeout:g} s; the worker was ended")
        if self.error is not None:
            raise self.error
        return self._summary()

    def _summary(self) -> BenchResult:
        floor = self.floor.get("floor_ms")
        t = self.text_summary  # with text, a run is one batch of the mix: sentences per run on average
        per_run = t["sentences"] / t["batches"] if t else self.cfg.batch
        stats = [VariantStats.from_samples(v, self.samples.get(v["name"], []), per_run, floor,
                                           self.parity.get(v["name"]), self.session_providers.get(v["name"], []))
                 for v in self.variants]
        from .floor import plausible_bound

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
            if s.parity:
                s.task_parity = s.parity.get("task_parity")
                s.parity = {"max_abs_diff": s.parity["max_abs_diff"], "cosine": s.parity["cosine"]}
        cfg = asdict(self.cfg)
        cfg["reference"] = next((v["name"] for v in self.variants if v["name"] not in self.parity), None)
        cfg["text"] = self.text_summary
        machine = dict(self.machine)
        machine["threads"] = self.cfg.threads
        floor = floor if floor and not math.isnan(floor) else None
        fastest = _fastest_fp32(stats)
        if floor and plausible_bound(floor, fastest) is None:
            floor = None
            self._distrust("fp32", "hot")
        return BenchResult(stats, machine, floor, cfg, self.stopped, dict(self.floor))

    def _distrust(self, precision: str | None, kind: str) -> None:
        from .floor import distrust_rate

        dtype = "fp16" if precision == "fp16" else "int8" if precision and "int8" in precision else "fp32"
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


def _prepare(variants: list[Variant]) -> tuple[list[dict], list[Path]]:
    """Check names, and write byte models to a private temporary folder."""
    if not variants:
        raise ConfigError("nothing to benchmark: no variants given")
    names = [v.name for v in variants]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ConfigError(f"variant names must be unique; repeated: {', '.join(dup)}")
    out, cleanup = [], []
    for v in variants:
        d = v.describe()
        if isinstance(v.model, bytes):
            tmp = Path(tempfile.mkdtemp(prefix="workbench-bench-"))
            cleanup.append(tmp)
            (tmp / "model.onnx").write_bytes(v.model)
            d["model"] = str(tmp / "model.onnx")
        elif v.kind in ("onnx", "openvino"):
            p = Path(v.model)
            if not p.is_file():
                for c in cleanup:
                    shutil.rmtree(c, ignore_errors=True)
                raise BenchmarkError(f"variant {v.name!r}: {p} is not a file")
        out.append(d)
    if any(v.provider == "cuda" for v in variants):
        from ..ort.session import cuda_status
        ok, reason = cuda_status()
        if not ok:
            from ..errors import RuntimeUnavailableError
            for c in cleanup:
                shutil.rmtree(c, ignore_errors=True)
            raise RuntimeUnavailableError(f"GPU asked for, but {reason}")
    return out, cleanup


def stream_benchmark(variants: list[Variant], cfg: BenchConfig | None = None,
                     on_sample: Callable[[RunSample], None] | None = None, *,
                     on_event: Callable[[dict], None] | None = None, reference: str | None = None,
                     floor: bool = True, memory_limit_mb: int | None = None, text=None,
                     text_answers_only: bool = False, _fault: str | None = None) -> BenchHandle:
    """Start a benchmark in a worker process and return at once.

    Args:
        variants: what to time; each variant's provider decides its session.
        cfg: shape, threads, warm-up and runs, equal for every variant.
        on_sample: called with each :class:`RunSample` as it arrives.
        on_event: called with the worker's other messages (status, parity,
            floor, done, error) as plain dicts.
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

    Raises:
        ConfigError: no variants, or repeated names.
        RuntimeUnavailableError: a CUDA variant where CUDA cannot run.
    """
    cfg = cfg or BenchConfig()
    described, cleanup = _prepare(variants)
    if reference is not None and reference not in {v["name"] for v in described}:
        raise ConfigError(f"reference {reference!r} is not one of the variants")
    if memory_limit_mb and any(v["provider"] == "cuda" for v in described):
        raise ConfigError("memory_limit_mb works on the CPU only (CUDA reserves large address ranges)")
    job = {"mode": "bench", "variants": described, "cfg": asdict(cfg), "reference": reference, "floor": floor,
           "memory_limit_mb": memory_limit_mb, "fault": _fault}
    if text is not None:
        job["text"] = dict(text.job(), answers_only=bool(text_answers_only))
        if not text_answers_only:
            job["text_summary"] = text.describe()
    return BenchHandle(job, cfg, described, on_sample=on_sample, on_event=on_event, cleanup=cleanup)


def benchmark(variants: list[Variant], cfg: BenchConfig | None = None, *, timeout: float | None = None,
              **kwargs) -> BenchResult:
    """Run a benchmark to the end and return its result (blocking)."""
    handle = stream_benchmark(variants, cfg, **kwargs)
    with handle:
        return handle.result(timeout)


__all__ = ["Variant", "RunSample", "VariantStats", "BenchResult", "BenchHandle", "stream_benchmark", "benchmark"]
