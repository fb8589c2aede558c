"""The concurrency primitives of the workbench, the one module that makes threads, locks and events: the engine
turn, a toggle's priority, threads, lanes, locks, flags and the one writer thread. The fusion scheduler
(:mod:`workbench.fusion.scheduler`), the app's jobs and panels, the export's parity check and the load sampler use
them; elsewhere only the benchmark worker's pipe reader (``measure/harness/bench.py``) makes its own thread."""

from __future__ import annotations

import contextlib
import os
import queue
import threading
import time
from typing import Callable


#: The type :func:`spawn` returns.
Thread = threading.Thread
#: The type :func:`new_flag` returns.
Flag = threading.Event


# ------------------------------------------------------------------ the engine turn and a toggle's priority
_ENGINE = threading.RLock()
_WAITING = {"n": 0}  # foreground runs waiting for or holding the engine turn, in the whole process
_WAITING_LOCK = threading.Lock()


@contextlib.contextmanager
def engine_turn():
    """Hold the process-wide engine turn (re-entrant): engine steps run one at a time in the process."""
    with _ENGINE:
        yield


@contextlib.contextmanager
def foreground():
    """Mark a run the user waits for: background work starts no engine step until it ends."""
    with _WAITING_LOCK:
        _WAITING["n"] += 1
    try:
        yield
    finally:
        with _WAITING_LOCK:
            _WAITING["n"] -= 1


def lower_priority() -> None:
    """Give the calling thread the lowest CPU priority (Linux schedules threads one by one)."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except (AttributeError, OSError):
        pass


# ------------------------------------------------------------------ the app's lanes (ui/jobs.py)
def spawn(name: str, fn: Callable[[], object], *, low_priority: bool = False) -> threading.Thread:
    """Start ``fn()`` on a daemon thread named ``name`` (at the lowest CPU priority if asked); the thread."""
    def body() -> None:
        if low_priority:
            lower_priority()
        fn()

    t = threading.Thread(target=body, name=name, daemon=True)
    t.start()
    return t


def new_lock(reentrant: bool = False):
    """A lock for data shared with background work (the app's job table, a panel's redraw)."""
    return threading.RLock() if reentrant else threading.Lock()


def new_flag() -> threading.Event:
    """A flag one thread sets and others read (a job's cancel)."""
    return threading.Event()


class Lane:
    """A first-come-first-served queue: work runs in the order its tickets were taken.

    A lock alone does not do that: which of the threads waiting on a released lock gets it is undefined,
    so two quick clicks could apply in reverse order.
    """

    def __init__(self):
        self._cond = threading.Condition()
        self._next = 0  # the next ticket to hand out
        self._serving = 0  # the ticket whose work may run now

    def ticket(self):
        """Take a place now; ``with`` it waits for its turn and hands the lane on afterwards."""
        with self._cond:
            n, self._next = self._next, self._next + 1
        return self._turn(n)

    @contextlib.contextmanager
    def _turn(self, n: int):
        with self._cond:
            self._cond.wait_for(lambda: self._serving == n)
        try:
            yield
        finally:
            with self._cond:
                self._serving += 1
                self._cond.notify_all()


# ------------------------------------------------------------------ disk writes behind the runs (fusion/disk.py)
_WRITES: "queue.Queue" = queue.Queue()
_WRITER: dict = {"thread": None, "lock": threading.Lock()}


def _write(job: Callable[[], object]) -> None:
    try:
        job()
    except Exception:  # noqa: BLE001 - a cache that cannot be written only costs speed next time
        pass


def _writer_loop() -> None:
    while True:
        job = _WRITES.get()
        try:
            _write(job)
        finally:
            _WRITES.task_done()


def write_behind(job: Callable[[], object]) -> None:
    """Run ``job()`` (a disk write) on the one writer thread, after the writes queued before it; here and now
    when no thread can start (a task limit reached): the write costs time then, never the work."""
    with _WRITER["lock"]:
        t = _WRITER["thread"]
        if t is None or not t.is_alive():
            try:
                _WRITER["thread"] = spawn("workbench-persist", _writer_loop)
            except RuntimeError:  # "can't start new thread"; with no writer thread, nothing is queued before it
                _write(job)
                return
    _WRITES.put(job)


def flush_writes(timeout: float | None = None) -> bool:
    """Wait until every queued write is done; False if ``timeout`` passed first (no thread is started for the
    wait: it runs at exit too, where a task limit may allow none)."""
    if timeout is None:
        _WRITES.join()
        return True
    deadline = time.monotonic() + timeout
    with _WRITES.all_tasks_done:
        while _WRITES.unfinished_tasks:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            _WRITES.all_tasks_done.wait(left)
    return True


def waiting() -> bool:
    """Whether a run the user waits for (a toggle, a load) is waiting for or holding the engine turn."""
    return _WAITING["n"] > 0
