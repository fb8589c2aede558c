"""Every piece of background work the app does runs here as a job (its threads, lanes and locks are
:mod:`workbench.fusion.scheduler`'s, where all the fusion concurrency lives).

A job is a function of a :class:`Job` handle (``job.progress(stage, fraction)``, ``job.cancelled``).
Jobs run in *lanes*: jobs of one lane run one after another (the model lane: load, toggle, session
layer, Netron; the measure lane: benchmark, profile, ablation, sweep; the parity lane), different
lanes run side by side. Each change of a job (started, progress, done, error, cancelled) is reported
as a :class:`~workbench.ui.state.JobStatus` through one callback, so jobs are state, not threads, to
everything above this module. With ``background=False`` every job runs in the caller's thread
(scripts and tests).
"""

from __future__ import annotations

import threading
import time
import traceback
from typing import Callable

from ..concurrency import Lane, Thread, new_flag, new_lock, spawn
from ..errors import WorkbenchError
from .state import JobStatus


class Cancelled(Exception):
    """Raised inside a job by :meth:`Job.check` once the job was cancelled."""


class Job:
    """The handle a job's function gets."""

    def __init__(self, runner: "JobRunner", name: str, lane: str = "model"):
        self.name = name
        self.lane = lane
        self._runner = runner
        self._cancel = new_flag()
        self.t0 = time.perf_counter()
        self.stage = ""
        self.fraction: float | None = None

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set() or self._runner.closed

    def cancel(self) -> None:
        self._cancel.set()

    def check(self) -> None:
        """Stop here if the job was cancelled."""
        if self.cancelled:
            raise Cancelled()

    def progress(self, stage: str, fraction: float | None = None) -> None:
        """Say what the job is doing (``fraction`` 0..1 when known)."""
        self.stage = stage
        self.fraction = None if fraction is None else max(0.0, min(1.0, float(fraction)))
        self._runner._report(self.name, JobStatus("running", stage, self.fraction, None, self.elapsed()))

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0


def error_line(what: str, e: BaseException) -> str:
    """One line for an error a user reads: ours as they are, anything else named as a bug."""
    if isinstance(e, WorkbenchError):
        return str(e)
    if isinstance(e, MemoryError):
        return f"{what}: out of memory"
    return (f"{what} failed unexpectedly: {type(e).__name__}: {' '.join(str(e).split())[:300]} "
            "(please report this)")


class JobRunner:
    """Runs jobs in lanes, reports their status, cancels them, waits for them.

    Args:
        report: called with ``(job name, JobStatus)`` on every change.
        background: run jobs in threads (False: in the caller's thread).
    """

    def __init__(self, report: Callable[[str, JobStatus], None], background: bool = True):
        self.report = report
        self.background = background
        self.closed = False
        self.last_trace: str | None = None
        self._lanes: dict[str, Lane] = {}
        self._threads: dict[str, list[Thread]] = {}
        self._jobs: dict[str, Job] = {}
        self._again: set[str] = set()
        self._guard = new_lock()

    def _report(self, name: str, status: JobStatus) -> None:
        try:
            self.report(name, status)
        except Exception:  # a drawing problem must not kill the job
            self.last_trace = traceback.format_exc()

    # ------------------------------------------------------------------ starting
    def start(self, name: str, fn: Callable[[Job], object], *, lane: str = "model",
              low_priority: bool = False) -> Job:
        """Run ``fn(job)`` in ``lane`` (after the lane's earlier jobs); errors become the job's status."""
        job = Job(self, name, lane)
        self._jobs[name] = job
        if not self.background:  # the caller's thread: one job after another, in the order asked
            self._run(job, fn)
            return job
        turn = self._lane(lane).ticket()  # taken here, in the caller's thread: the lane's order is the asking order

        def body():
            with turn:
                self._run(job, fn)
        with self._guard:  # listed before it starts: a wait right after this call sees it
            t = spawn(f"workbench-{name}", body, low_priority=low_priority)
            self._threads.setdefault(lane, []).append(t)
        return job

    def kick(self, name: str, fn: Callable[[Job], bool], *, lane: str | None = None, low_priority: bool = True) -> None:
        """Run ``fn`` now, or once more right after the run in progress; ``fn`` returns False to run again
        at once (its input changed under it)."""
        with self._guard:
            if self.running(name):
                self._again.add(name)
                return

        def loop(job: Job) -> None:
            while not self.cancelled(job):
                with self._guard:
                    self._again.discard(name)
                done = fn(job)
                with self._guard:
                    if done and name not in self._again:
                        return

        self.start(name, loop, lane=lane or name, low_priority=low_priority)

    def _run(self, job: Job, fn) -> None:
        if job.cancelled:  # cancelled while it waited its turn (or the runner closed): it never starts
            self._report(job.name, JobStatus("cancelled", "", None, None, 0.0))
            return
        self._report(job.name, JobStatus("running", "", None, None, 0.0))
        try:
            fn(job)
        except Cancelled:
            self._report(job.name, JobStatus("cancelled", job.stage, job.fraction, None, job.elapsed()))
            return
        except BaseException as e:  # noqa: BLE001 - every error becomes one line in the app
            if not isinstance(e, (WorkbenchError, MemoryError)):
                self.last_trace = traceback.format_exc()
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise
            self._report(job.name, JobStatus("error", job.stage, job.fraction, error_line(job.name, e),
                                             job.elapsed()))
            return
        self._report(job.name, JobStatus("done", job.stage, 1.0, None, job.elapsed()))

    def _lane(self, lane: str) -> Lane:
        with self._guard:
            return self._lanes.setdefault(lane, Lane())

    @staticmethod
    def cancelled(job: Job) -> bool:
        return job.cancelled

    # ------------------------------------------------------------------ asking and waiting
    def running(self, name: str) -> bool:
        """Whether a job of this name is queued or running."""
        return any(t.is_alive() and t.name == f"workbench-{name}" for ts in self._threads.values() for t in ts)

    def lane_of(self, name: str) -> str | None:
        """The lane of the latest job of this name (None: no job of that name was started)."""
        job = self._jobs.get(name)
        return job.lane if job is not None else None

    def lane_busy(self, lane: str) -> bool:
        return any(t.is_alive() for t in self._threads.get(lane, ()))

    def wait(self, lane: str = "model", timeout: float | None = 600) -> bool:
        """Wait until every job of ``lane`` has ended; True if they did within ``timeout``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._guard:
                alive = [t for t in self._threads.get(lane, ()) if t.is_alive()]
                self._threads[lane] = alive
            alive = [t for t in alive if t is not threading.current_thread()]
            if not alive:
                return True
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            alive[0].join(left)

    def cancel(self, name: str) -> None:
        job = self._jobs.get(name)
        if job is not None:
            job.cancel()

    def close(self, timeout: float = 10) -> None:
        """Cancel every job and wait up to ``timeout`` seconds for them to leave."""
        self.closed = True
        for job in list(self._jobs.values()):
            job.cancel()
        deadline = time.monotonic() + timeout
        for lane in list(self._threads):
            self.wait(lane, max(0.0, deadline - time.monotonic()))

    def every(self, name: str, fn: Callable[[], bool], seconds: float = 0.5) -> None:
        """Call ``fn`` every ``seconds`` in the background until it returns False or the runner closes."""
        if not self.background or self.running(name):
            return

        def loop(job: Job) -> None:
            while not job.cancelled and fn():
                time.sleep(seconds)

        self.start(name, loop, lane=name)


__all__ = ["JobRunner", "Job", "Cancelled", "error_line"]
