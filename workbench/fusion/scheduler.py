"""Where fusion work runs concurrently: the one module of ``workbench/fusion`` that makes threads and locks.

The timeline (``timeline.py``), its step runner and its caches are single-threaded code; this module
decides what of it runs when:

* **The engine turn** (:func:`engine_turn`): the engines keep process-wide state (ONNX Runtime's loggers,
  which a step's log capture reconfigures; onnxscript's rule objects), so engine steps run one at a time
  in the process; the runner takes the turn around each engine call.
* **A toggle first** (:class:`FusionScheduler`): a run the user waits for (a click, a load, a change of
  plan) cancels the warm-up and marks itself waiting; background work starts no engine step while one
  waits, so a click waits for the one step in flight at most. A run whose every snapshot is in memory
  takes no turn at all.
* **The warm-up**: every single toggle of the plan shown, computed ahead on one low-priority thread,
  one engine step per turn, the steps the user looks at first; the scheduler starts it again after
  each foreground run while it is switched on.
* **Auto's engine comparison**: both engines under the plan shown, in the background, after the warm-up.
* **A participant's rule under a time limit** (:func:`run_limited`): a rule's ``match`` and ``rewrite``
  are untrusted code in a teaching room, so a pass of a rule added at run time runs on a daemon thread
  of its own and the step waits at most :func:`rule_time_limit` seconds. After that the step fails
  (:class:`~workbench.fusion.engine_types.StepFailed`, with its reason), the runner goes on from the
  graph as it was, and the rule's thread is stopped by an exception raised in it at its next Python
  bytecode (``PyThreadState_SetAsyncExc``): a rule looping in Python stops there. A rule blocked inside
  C code (a ``time.sleep``, a socket read) cannot be stopped that way in CPython; its thread is
  abandoned, its result ignored, and the CPU or memory it holds is not reclaimed until it returns or
  the process exits. A subprocess could be killed, but would need the rule's class (defined in a
  notebook cell, not importable by a child) and a copy of the graph (hundreds of MB on bert-base).
"""

from __future__ import annotations

import atexit
import contextlib
import contextvars
import ctypes
import math
import os
import queue
import threading
import time
import weakref
from typing import Callable, TypeVar

from ..errors import WorkbenchError
from .adapters import ENGINE_NAMES
from .engine_types import StepFailed

T = TypeVar("T")

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


#: Schedulers that warmed up in this process: their warm-ups stop at exit before the disk writes are flushed.
_LIVE: "weakref.WeakSet" = weakref.WeakSet()


# ------------------------------------------------------------------ disk writes behind the runs (fusion/disk.py)
_WRITES: "queue.Queue" = queue.Queue()
_WRITER: dict = {"thread": None, "lock": threading.Lock()}


def _writer_loop() -> None:
    while True:
        job = _WRITES.get()
        try:
            job()
        except Exception:  # noqa: BLE001 - a cache that cannot be written only costs speed next time
            pass
        finally:
            _WRITES.task_done()


def write_behind(job: Callable[[], object]) -> None:
    """Run ``job()`` (a disk write) on the one writer thread, after the writes queued before it."""
    with _WRITER["lock"]:
        t = _WRITER["thread"]
        if t is None or not t.is_alive():
            _WRITER["thread"] = spawn("workbench-persist", _writer_loop)
    _WRITES.put(job)


def flush_writes(timeout: float | None = None) -> bool:
    """Wait until every queued write is done; False if ``timeout`` passed first."""
    if timeout is None:
        _WRITES.join()
        return True
    done = threading.Event()
    spawn("workbench-persist-flush", lambda: (_WRITES.join(), done.set()))
    return done.wait(timeout)


@atexit.register
def _stop_warming_then_flush() -> None:
    # At exit no new snapshot is started, and the ones already made reach the disk (fusion/persist.py).
    for sch in list(_LIVE):
        try:
            sch.stop_warming(wait=False)
        except Exception:  # noqa: BLE001 - never fail an interpreter exit
            pass
    flush_writes(30.0)


class FusionScheduler:
    """Runs one timeline's work: the runs the user waits for first, the warm-up and auto's comparison behind.

    The timeline is single-threaded: once a scheduler is made for it, change its plan only through
    the scheduler (:meth:`run`, :meth:`toggle`, :meth:`set_plan`).
    """

    def __init__(self, timeline):
        self.timeline = timeline
        #: Steps whose toggle the warm-up computes first (the one the user is looking at, say).
        self.warm_first: tuple[str, ...] = ()
        #: Seconds the last completed warm-up took, and the error that stopped one (or None).
        self.warm_s: float | None = None
        self.warm_error: str | None = None
        #: The steps whose toggle the current (or last) warm-up has computed, in the order it did.
        self.warmed: list[str] = []
        self._auto_warm = False
        self._cancel: threading.Event | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------ runs the user waits for
    def run(self):
        """The timeline's snapshots under its plan (:meth:`set_plan` with the plan it has)."""
        return self.set_plan(self.timeline.plan)

    def toggle(self, step: str, on: bool):
        """Switch one step on or off (see ``Timeline.toggle``): a lookup once the warm-up computed it."""
        return self.set_plan(self.timeline.plan_with(step, on))

    def set_plan(self, plan):
        """Switch to ``plan`` and recompute from the first changed step, before any background work.

        The warm-up in progress is cancelled first (it gives the turn back after the step in flight)
        and starts again for the new plan when it is switched on. When every snapshot of ``plan`` is in
        memory (a warmed toggle) no engine runs and the engine turn is not waited for (a background step
        holds it up to seconds on bert-base).
        """
        tl = self.timeline
        self._cancel_warm()
        if tl.ready(plan):
            snaps = tl.set_plan(plan)
        else:
            with foreground(), engine_turn():
                snaps = tl.set_plan(plan)
        if self._auto_warm:
            self._start_warm()
        return snaps

    def toggle_ready(self, step: str) -> bool:
        """Whether switching ``step`` now would be a lookup: every snapshot of that plan is in memory (the
        warm-up computed it, or it was read back from disk). True for a name that is no step."""
        tl = self.timeline
        return not tl.is_step(step) or tl.ready(tl.plan_with(step, not tl.enabled(step)))

    # ------------------------------------------------------------ background work
    def _background(self, engine: str, enabled, cancelled: Callable[[], bool]):
        """``engine``'s snapshots under ``enabled``, one engine step per turn, none started while a run
        the user waits for is waiting; None once ``cancelled()``."""
        while True:
            if cancelled():
                return None
            if _WAITING["n"]:  # a toggle is waiting: it goes first
                time.sleep(0.01)
                continue
            with engine_turn():
                if cancelled():
                    return None
                snaps = self.timeline.run_engine(engine, enabled, budget=1)
            if snaps is not None:
                return snaps
            time.sleep(0.001)  # let a waiting toggle take the turn

    def compare_engines(self, cancelled: Callable[[], bool] | None = None, *, after_warm_up: bool = False):
        """Every engine's snapshots under the plan shown, without changing it (what ``engine="auto"`` decides
        on, computed after the fact); they land in the caches a later ``set_plan(engine=...)`` reads.

        ``after_warm_up``: wait for the warm-up first (the user's first clicks wait for its steps only).
        None once ``cancelled()`` says so.
        """
        cancelled = cancelled or (lambda: False)
        while after_warm_up and self.warming and not cancelled():
            self.wait_warm(0.2)
        plan = self.timeline.plan
        out = {}
        for e in ENGINE_NAMES:
            snaps = self._background(e, self.timeline.enabled_under(plan), cancelled)
            if snaps is None:
                return None
            out[e] = snaps
        return out

    def start_warming(self) -> None:
        """Precompute, on a background thread, the timeline each single toggle would give.

        For every step of the engine(s) run, the plan with that step switched is computed one engine
        step per turn, the steps in ``warm_first`` first, then the earliest steps (they recompute the
        most), into the caches a toggle reads, at the lowest CPU priority. Once switched on, the warm-up
        starts again after every run of :meth:`set_plan`; :meth:`stop_warming` switches it off.
        """
        if not self.timeline.snapshots:
            self.run()
        self._auto_warm = True
        _LIVE.add(self)
        self._start_warm()

    def stop_warming(self, wait: bool = True) -> None:
        """Switch the warm-up off and cancel the one in progress."""
        self._auto_warm = False
        thread = self._thread
        self._cancel_warm()
        if wait and thread is not None and thread is not threading.current_thread():
            thread.join()

    def wait_warm(self, timeout: float | None = None) -> bool:
        """Wait for the warm-up in progress; True when none is running any more."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
            return not thread.is_alive()
        return True

    @property
    def warming(self) -> bool:
        """Whether a warm-up is running now."""
        return self._thread is not None and self._thread.is_alive()

    def _cancel_warm(self) -> None:
        if self._cancel is not None:
            self._cancel.set()

    def _start_warm(self) -> None:
        tl = self.timeline
        engines = list(tl.runs)
        if not engines:
            return
        plan = tl.plan
        order = tl.single_toggles()
        order.sort(key=lambda name: name not in self.warm_first)  # what the user looks at, then in order
        runs = tl.enabled_under(plan)
        cancel = self._cancel = threading.Event()
        self.warm_error, self.warmed = None, []

        def work() -> None:
            lower_priority()
            t0 = time.perf_counter()
            try:
                for step in order:
                    flipped = tl.enabled_under(plan.with_step(step, not runs(step)))
                    for e in engines:
                        if self._background(e, flipped, cancel.is_set) is None:
                            return
                    self.warmed.append(step)
                self.warm_s = time.perf_counter() - t0
            except Exception as e:  # a branch that fails here fails again, visibly, when toggled
                self.warm_error = f"{type(e).__name__}: {e}"

        self._thread = threading.Thread(target=work, name="workbench-fusion-warm", daemon=True)
        self._thread.start()


# ------------------------------------------------------------------ a participant's rule under a time limit

#: Seconds a rule's pass may take by default (bert-base's own rules take well under one).
DEFAULT_RULE_TIME_LIMIT_S = 5.0
_LIMIT = {"s": DEFAULT_RULE_TIME_LIMIT_S}
#: How long a stopped rule's thread is given to leave after the exception is raised in it.
_STOP_WAIT_S = 1.0


class RuleStopped(BaseException):
    """Raised inside a rule's thread once its time is up (a BaseException: a rule's ``except Exception``
    does not swallow it)."""


def rule_time_limit() -> float:
    """Seconds a rule's ``match`` and ``rewrite`` (one pass over a graph) may take in this process."""
    return _LIMIT["s"]


def set_rule_time_limit(seconds: float) -> None:
    """Change the time limit of every rule's pass in this process (the app's ``rule_time_limit_s``).

    Raises:
        WorkbenchError: not a positive number of seconds.
    """
    try:
        s = float(seconds)
    except (TypeError, ValueError):
        s = float("nan")
    if isinstance(seconds, bool) or not math.isfinite(s) or s <= 0:
        raise WorkbenchError(f"the rule time limit must be a positive number of seconds, not {seconds!r}")
    _LIMIT["s"] = s


def run_limited(fn: Callable[[], T], what: str, limit_s: float | None = None) -> T:
    """``fn()``'s result, computed on a daemon thread that may take at most ``limit_s`` seconds.

    ``fn`` runs in a copy of the caller's context variables; its exception is raised here.

    Raises:
        StepFailed: ``fn`` did not return in time (the sentence says whether its thread was stopped).
    """
    limit = rule_time_limit() if limit_s is None else float(limit_s)
    box: dict = {}
    ctx = contextvars.copy_context()

    def body() -> None:
        try:
            box["value"] = ctx.run(fn)
        except RuleStopped:
            box["stopped"] = True
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
            box["error"] = e

    t = threading.Thread(target=body, name=f"workbench-{what}", daemon=True)
    t.start()
    t.join(limit)
    if t.is_alive():
        _stop(t)
        t.join(_STOP_WAIT_S)
        fate = ("it was stopped" if not t.is_alive() else
                "it is blocked outside Python and keeps running in the background (its CPU is not reclaimed)")
        raise StepFailed(f"{what} did not finish within {limit:g} s (the rule time limit; app.rule_time_limit_s "
                         f"changes it); {fate}, and the graph is left as it was")
    if "error" in box:
        raise box["error"]
    if box.get("stopped"):
        raise StepFailed(f"{what} was stopped")
    return box["value"]


def _stop(t: threading.Thread) -> None:
    """Raise :class:`RuleStopped` in ``t`` at its next bytecode (CPython's asynchronous exception)."""
    if t.ident is not None:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(t.ident), ctypes.py_object(RuleStopped))


__all__ = ["FusionScheduler", "engine_turn", "foreground", "Lane", "spawn", "new_lock", "new_flag", "lower_priority",
           "write_behind", "flush_writes",
           "run_limited", "rule_time_limit", "set_rule_time_limit",
           "DEFAULT_RULE_TIME_LIMIT_S", "RuleStopped"]
