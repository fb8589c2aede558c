"""The process's resource limits (``ulimit``, a container's task limit) and the one line for a failure one
of them caused.

A limit reached deep inside a library surfaces in that library's words ("std::bad_alloc", "graph.cc:5436
... Failed to write external initializers", "can't start new thread", "pthread_create failed"); the command
line asks :func:`limit_reached` which limit it was and says so in the words of :func:`limit_words`, naming the
limit and its value. A model's size is held against the address-space limit before anything is built
(:func:`address_space_gb`, read by :func:`workbench.checks.check_config`).
"""

from __future__ import annotations

import errno
from pathlib import Path

try:
    import resource
except ImportError:  # Windows: no ulimit
    resource = None

#: Words of a failed allocation (lower case), from Python, PyTorch (c10's allocator), C++, ONNX Runtime.
_MEMORY = ("bad_alloc", "can't allocate memory", "cannot allocate memory", "failed to allocate", "out of memory")
#: Words of a thread or process that could not start: Python, pthreads, ONNX Runtime's thread pool, OpenBLAS.
_TASKS = ("can't start new thread", "pthread_create", "posixthread", "resource temporarily unavailable")
#: Words of a write stopped at the file-size limit (errno EFBIG), from Python and ONNX Runtime's writers.
_WRITE = ("file too large", "failed to write")
#: Where a container's task limit is read (cgroup v2, then v1).
_PIDS_MAX = (Path("/sys/fs/cgroup/pids.max"), Path("/sys/fs/cgroup/pids/pids.max"))


def soft_limit(name: str) -> int | None:
    """The soft limit ``resource.RLIMIT_<name>`` (``AS``, ``FSIZE``, ``NPROC``) of this process; None: unlimited
    or unknown."""
    if resource is None or not hasattr(resource, f"RLIMIT_{name}"):
        return None
    soft, _ = resource.getrlimit(getattr(resource, f"RLIMIT_{name}"))
    return None if soft == resource.RLIM_INFINITY or soft < 0 else int(soft)


def address_space_gb() -> float | None:
    """The address-space limit (``ulimit -v``) in GB, or None when there is none."""
    limit = soft_limit("AS")
    return None if limit is None else limit / 1e9


def _chain(e: BaseException):
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        yield e
        e = e.__cause__ or e.__context__


def limit_reached(e: BaseException) -> str | None:
    """Which limit ``e`` (or an exception it was raised from) ran into: "memory", "file size", "tasks", or None."""
    for x in _chain(e):
        text = f"{type(x).__name__}: {x}".lower()
        if isinstance(x, MemoryError) or any(w in text for w in _MEMORY):
            return "memory"
        if isinstance(x, OSError) and x.errno == errno.EFBIG or (soft_limit("FSIZE") and any(w in text for w in _WRITE)):
            return "file size"
        if any(w in text for w in _TASKS) or isinstance(x, OSError) and x.errno == errno.EAGAIN and "fork" in text:
            return "tasks"
    return None


def limit_set(kind: str) -> bool:
    """Whether a limit of ``kind`` is in force here (then a failure of that kind is put down to it)."""
    if kind == "memory":
        return soft_limit("AS") is not None
    if kind == "file size":
        return soft_limit("FSIZE") is not None
    return task_limit() is not None


def _size(n: float) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB"


def task_limit() -> str | None:
    """The task limit in words: ``ulimit -u``'s, else the container's ``pids.max``; None when neither is set."""
    limit = soft_limit("NPROC")
    if limit is not None:
        return f"the task limit (ulimit -u) of {limit:,} threads and processes"
    for path in _PIDS_MAX:
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            return f"the container's task limit (pids.max) of {int(text):,} threads and processes"
    return None


def limit_words(kind: str, doing: str, target: str | None = None) -> str:
    """One line for a failure at a limit of ``kind`` (:func:`limit_reached`) while ``doing`` (the command, in
    words); ``target``: what the command writes (its output), for the file-size limit."""
    if kind == "memory":
        limit = soft_limit("AS")
        if limit is not None:
            return (f"the process ran out of memory at its address-space limit (ulimit -v {limit // 1024}: "
                    f"{_size(limit)}) during {doing}: raise the limit (ulimit -v unlimited) or use a smaller model")
        return f"the process ran out of memory during {doing}: close other programs or use a smaller model"
    if kind == "file size":
        limit = soft_limit("FSIZE")
        what = f"a file of {doing}" + (f" (its output {target})" if target else "")
        size = f" (ulimit -f {limit // 1024}: {_size(limit)})" if limit is not None else ""
        return (f"the file-size limit{size} stopped the write of {what}; nothing half-written was kept: raise the "
                f"limit (ulimit -f unlimited)")
    return (f"no new thread could start during {doing}: {task_limit() or 'the limit on threads and processes'} "
            f"is reached; raise it, or use fewer threads (--threads 1)")


__all__ = ["soft_limit", "address_space_gb", "limit_reached", "limit_set", "limit_words", "task_limit"]
