"""What every worker process shares: its end of the pipe, threads, peak memory, fault hooks, building runners.

The benchmark worker (:mod:`.worker`), its throughput job (:mod:`.serve`) and its floor and profile jobs
(:mod:`.worker_jobs`) import this; it imports none of them.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ...ort.machine import describe_machine
from . import protocol as msgs
from .runners import make_runner, run_error

#: Set in the worker's environment before torch or onnxruntime load.
WORKER_ENV = {"OMP_WAIT_POLICY": "PASSIVE", "KMP_BLOCKTIME": "0", "TOKENIZERS_PARALLELISM": "false",
              "TF_CPP_MIN_LOG_LEVEL": "3",
              # numpy's BLAS only compares answers here; its thread pool, refused at a task limit, would end the
              # worker at import (OpenBLAS raises SIGINT when it cannot start its threads)
              "OPENBLAS_NUM_THREADS": "1"}


class Stopped(Exception):
    """The caller asked the worker to stop."""


class Channel:
    """The worker's end of the pipe: send :mod:`.protocol` messages, notice a :class:`~.protocol.Stop`."""

    def __init__(self, conn):
        self.conn = conn
        self.stopped = False

    def send(self, msg: msgs.Message) -> None:
        self.conn.send(msg)

    def status(self, stage: str, variant: str | None, index: int, count: int) -> None:
        self.send(msgs.Status(stage, variant, index, count))

    def check_stop(self) -> None:
        while not self.stopped and self.conn.poll():
            try:
                msg = self.conn.recv()
            except (EOFError, OSError):
                msg = msgs.Stop()  # the caller went away: stop rather than run on
            if isinstance(msg, msgs.Stop):
                self.stopped = True
        if self.stopped:
            raise Stopped


def set_threads(threads: int, torch_needed: bool = True) -> None:
    """PyTorch's threads (imported only when a variant needs it, so an engine's peak memory is its own)."""
    if not torch_needed and "torch" not in sys.modules:
        return
    try:
        import torch
        torch.set_num_threads(threads)
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError:
            pass  # already set in this process
    except ImportError:
        pass


def worker_info() -> dict:
    """What the worker really runs with, for the caller to check."""
    info = {"pid": os.getpid(), "env": {k: os.environ.get(k) for k in WORKER_ENV}, "torch_threads": None}
    if "torch" in sys.modules:
        info["torch_threads"] = sys.modules["torch"].get_num_threads()
    return info


def peak_rss_mb() -> float | None:
    """This process's peak resident memory so far: Linux's ``VmHWM`` (a spawned process's own; ``ru_maxrss``
    keeps the parent's peak across exec), ``ru_maxrss`` on macOS; elsewhere None."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        import resource
        import sys

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024
    except (ImportError, OSError, ValueError):
        return None


def fault(kind: str | None, where: str) -> None:
    """Test-only hooks that make the worker die the way native code does."""
    if not kind or not kind.endswith(where):
        return
    if kind.startswith("segfault"):
        import ctypes
        ctypes.string_at(0)
    elif kind.startswith("abort"):
        os.abort()
    elif kind.startswith("exit"):
        os._exit(3)


def build_runners(ch: Channel, job: msgs.BenchJob | msgs.ThroughputJob, workdir: Path) -> list:
    """Every variant's runner, in order, with ``status`` messages; the address-space cap first."""
    cfg = job.cfg
    threads, batch, seq = int(cfg["threads"]), int(cfg["batch"]), int(cfg["seq"])
    if job.memory_limit_mb:
        import resource
        limit = int(job.memory_limit_mb) * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    set_threads(threads, any(v.get("kind") == "torch" for v in job.variants))
    variants = [dict(v, dynamic_block_base=int(cfg.get("dynamic_block_base") or 0)) for v in job.variants]
    runners = []
    for i, v in enumerate(variants):
        ch.check_stop()
        ch.status("building", v["name"], i, len(variants))
        try:
            runners.append(make_runner(v, threads, workdir))
        except MemoryError as e:
            raise run_error(e, v["name"], batch, seq) from e
    return runners


def send_ready(ch: Channel, runners: list, threads: int) -> None:
    machine = describe_machine(threads, check_cuda=any(r.provider == "cuda" for r in runners))
    ch.send(msgs.Ready(machine, worker_info(), [{"name": r.name, "provider": r.provider,
                                                 "session_providers": r.providers,
                                                 "assignment": getattr(r, "assignment", None)} for r in runners]))
