"""Background warm-up of a timeline: every single toggle computed ahead, at low priority.

A mixin of :class:`~workbench.fusion.timeline.Timeline`, kept apart so the
runner stays readable; it uses the timeline's ``_run_engine``, ``runs``,
``plan``, ``opted_in`` and engine lock.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
import weakref

from ..config import FusionPlan
from .catalog import BY_NAME
from .engines import engine_steps


#: Timelines that warmed up in this process: their warm-ups stop at exit before the disk writes are flushed.
_WARMED: "weakref.WeakSet" = weakref.WeakSet()


@atexit.register
def _stop_warming_then_flush() -> None:
    # Registered after the app's own handler (this module is imported later), so it runs first: no new
    # snapshot is started, and the ones already made reach the disk (fusion/persist.py).
    for tl in list(_WARMED):
        try:
            tl._cancel_warming()
        except Exception:  # noqa: BLE001 - never fail an interpreter exit
            pass
    from .persist import flush

    flush(30.0)


class WarmingMixin:
    """``start_warming`` / ``stop_warming`` / ``wait_warm`` / ``warming`` for a Timeline."""

    def start_warming(self) -> None:
        """Precompute, in a background thread, the timeline each single toggle would give.

        For every step of the engine(s) run, the plan with that step switched
        (on to off, or off to on) is computed one step at a time, the steps in
        ``warm_first`` first, then the earliest steps (they recompute the most),
        and lands in the same caches a toggle reads. The thread runs at the
        lowest CPU priority the system allows and holds the timeline's lock
        for one engine step at a time, and none while a toggle waits for it; a
        toggle cancels it and waits at most for the step in flight. Once
        switched on, warming restarts after every run, for the new plan.
        Call :meth:`stop_warming` to switch it off.
        """
        if not self.snapshots:
            self.run()
        self._auto_warm = True
        self._start_warm_thread()

    def stop_warming(self, wait: bool = True) -> None:
        """Switch background warming off and cancel a warm-up in progress."""
        self._auto_warm = False
        thread = self._warm_thread
        self._cancel_warming()
        if wait and thread is not None and thread is not threading.current_thread():
            thread.join()

    def wait_warm(self, timeout: float | None = None) -> bool:
        """Wait for the warm-up in progress; True when none is running any more."""
        thread = self._warm_thread
        if thread is not None:
            thread.join(timeout)
            return not thread.is_alive()
        return True

    @property
    def warming(self) -> bool:
        """Whether a warm-up is running now."""
        return self._warm_thread is not None and self._warm_thread.is_alive()

    def _cancel_warming(self) -> None:
        if self._warm_cancel is not None:
            self._warm_cancel.set()

    def _start_warm_thread(self) -> None:
        engines = list(self.runs)
        if not engines:
            return
        plan, opted = self.plan, set(self.opted_in)
        seen: list[str] = []
        for e in engines:
            for es in engine_steps(e):
                if es.name not in seen and (BY_NAME[es.name].default_on or es.name in opted):
                    seen.append(es.name)
        # The steps the user is likely to click first (warm_first), then the earliest steps.
        seen.sort(key=lambda name: name not in self.warm_first)
        cancel = threading.Event()
        self._warm_cancel = cancel
        _WARMED.add(self)
        self.warm_error = None

        def work():
            _lower_priority()
            t0 = time.perf_counter()
            try:
                for step in seen:
                    enabled = _toggled(plan, opted, step)
                    for e in engines:
                        if self._run_in_background(e, enabled, cancel) is None:
                            return
                self.warm_s = time.perf_counter() - t0
            except Exception as e:  # a branch that fails here fails again, visibly, when toggled
                self.warm_error = f"{type(e).__name__}: {e}"

        self._warm_thread = threading.Thread(target=work, name="workbench-fusion-warm", daemon=True)
        self._warm_thread.start()


def _enabled_in(plan: FusionPlan, opted_in: set[str], step: str) -> bool:
    s = BY_NAME[step]
    if s.default_on:
        return plan.enabled(step)
    return step in opted_in and plan.enabled(step)


def _toggled(plan: FusionPlan, opted_in: set[str], step: str):
    """``enabled(name)`` of the plan a click on ``step``'s checkbox gives (as ``Timeline.toggle`` does: a step
    switched on is opted in)."""
    on = not _enabled_in(plan, opted_in, step)
    flipped = plan.with_step(step, on)
    opted = set(opted_in) | ({step} if on else set())
    return lambda name: _enabled_in(flipped, opted, name)


def _lower_priority() -> None:
    """Give the calling thread the lowest CPU priority (Linux schedules threads one by one)."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except (AttributeError, OSError):
        pass
