"""A participant's rule under a time limit (see the package's docstring)."""

from __future__ import annotations

import contextvars
import ctypes
import math
from typing import Callable, TypeVar

from ...concurrency import Thread, spawn
from ...errors import WorkbenchError
from ..engine_types import StepFailed

T = TypeVar("T")



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

    t = spawn(f"workbench-{what}", body)
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


def _stop(t: Thread) -> None:
    """Raise :class:`RuleStopped` in ``t`` at its next bytecode (CPython's asynchronous exception)."""
    if t.ident is not None:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(t.ident), ctypes.py_object(RuleStopped))
