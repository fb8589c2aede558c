"""One timeline's work in the right order: the runs the user waits for first, the warm-up and auto's engine
comparison behind them (see the package's docstring)."""

from __future__ import annotations

import atexit
import sys
import threading
import time
import weakref
from typing import Callable

from ...concurrency import Flag, Thread, engine_turn, flush_writes, foreground, lower_priority, new_flag, spawn, waiting
from ...settings import env_number
from ..adapters import ENGINE_NAMES

#: How long :meth:`FusionScheduler.stop_warming` waits for the warm-up's thread to end (one engine step, or a
#: participant's rule up to its own time limit); ``WORKBENCH_STOP_WARMING_WAIT_S`` overrides.
STOP_WARMING_WAIT_S = 60.0
ENV_STOP_WARMING_WAIT = "WORKBENCH_STOP_WARMING_WAIT_S"

#: Schedulers that warmed up in this process: their warm-ups stop at exit before the disk writes are flushed.
_LIVE: "weakref.WeakSet" = weakref.WeakSet()


@atexit.register
def _stop_warming_then_flush() -> None:
    # At exit no new snapshot is started, and the ones already made reach the disk (fusion/timeline_store.py).
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
        self._cancel: Flag | None = None
        self._thread: Thread | None = None

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
            if waiting():  # a toggle is waiting: it goes first
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

    def stop_warming(self, wait: bool = True, timeout: float | None = None) -> bool:
        """Switch the warm-up off and cancel the one in progress; with ``wait``, wait for its thread at most
        ``timeout`` s (default ``$WORKBENCH_STOP_WARMING_WAIT_S``, else :data:`STOP_WARMING_WAIT_S`). False,
        said in one line on stderr, when the thread still runs then (it stops at its next step, unused)."""
        self._auto_warm = False
        thread = self._thread
        self._cancel_warm()
        if not wait or thread is None or thread is threading.current_thread():
            return True
        limit = float(env_number(ENV_STOP_WARMING_WAIT, STOP_WARMING_WAIT_S, minimum=0.001)
                      if timeout is None else timeout)
        thread.join(limit)
        if not thread.is_alive():
            return True
        print(f"workbench: gave up after {limit:g} s waiting for the fusion warm-up to stop (a step or rule "
              f"still running; set {ENV_STOP_WARMING_WAIT} to wait longer); it ends at its next step, unused",
              file=sys.stderr)
        return False

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
        cancel = self._cancel = new_flag()
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

        self._thread = spawn("workbench-fusion-warm", work)
