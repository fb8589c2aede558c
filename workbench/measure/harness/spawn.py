"""Starting a measuring process: the one lock around the caller's environment, and what a death means.

The benchmark worker (:mod:`.bench`) and the as-shipped slice processes (:mod:`.slices`) are spawned
with their own environment (thread counts, spinning on or off) set in the caller's ``os.environ`` for
the moment of the start: :data:`ENV_LOCK` keeps two starts (from two threads) from mixing theirs.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys

from ...concurrency import new_lock
from ...errors import BenchmarkError
from ...limits import task_limit

#: Held while a process starts with its environment set in the caller's ``os.environ``.
ENV_LOCK = new_lock()
_MISSING = object()


@contextlib.contextmanager
def launch_context(env: dict):
    """Start the worker with ``env`` set and without re-running the caller's script.

    The child inherits the environment at exec time, and torch reads
    OMP_WAIT_POLICY when it loads. ``spawn`` normally re-imports the main
    script in the child (which would import torch first, re-run the script's
    side effects, and fail outright without an ``if __name__ == "__main__"``
    guard); the worker needs nothing from it, so it is hidden while starting.
    Hold :data:`ENV_LOCK` around it.
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


def start(proc, env: dict) -> None:
    """Start ``proc`` (a spawn-context Process) with ``env`` set for its start only."""
    with ENV_LOCK, launch_context(env):
        proc.start()


def died(exitcode: int | None) -> BenchmarkError:
    """The error for a worker that ended without reporting: its signal named, or its exit status."""
    if exitcode is not None and exitcode < 0:
        sig = -exitcode
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = "unknown"
        hint = " (possibly out of memory)" if sig == signal.SIGKILL else ""
        return BenchmarkError(f"worker died (signal {sig}, {name}){hint}")
    tasks = task_limit()  # libgomp and OpenBLAS end the process when they cannot start their threads
    hint = f" ({tasks} is in force here: raise it, or use fewer threads)" if tasks and exitcode else ""
    return BenchmarkError(f"worker died (exit status {exitcode}) before reporting a result{hint}")


__all__ = ["ENV_LOCK", "launch_context", "start", "died"]
