"""Files of the timeline store written safely, on one background thread (``timeline_store.py`` uses these).

Every file goes through a temporary name and a rename, and a folder of files (one snapshot's entry)
through a temporary folder renamed into place, so concurrent writers never leave half an entry. No
fsync: a cache entry lost to a crash is rebuilt. Writes are queued to one thread per process;
``flush`` waits for them (they are also flushed at exit).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

from ..cache.atomic import atomic_write_bytes
from ..concurrency import flush_writes, write_behind
from ..settings import env_number

#: How long :func:`flush` waits for the queued writes when given no time; ``WORKBENCH_FLUSH_WAIT_S`` overrides.
#: Generous: a bert-large timeline writes a few hundred MB of packed weights on a slow disk well within it.
FLUSH_WAIT_S = 300.0
ENV_FLUSH_WAIT = "WORKBENCH_FLUSH_WAIT_S"


def write_file(path: Path, data: bytes) -> None:
    """Write through a temporary file and a rename (no fsync: a cache entry lost to a crash is rebuilt)."""

    atomic_write_bytes(path, data, durable=False)


def write_if_new(path: Path, data: bytes) -> None:
    """Write a content-addressed file unless one of the same size is there already."""
    try:
        if path.stat().st_size == len(data):
            return
    except OSError:
        pass
    write_file(path, data)


def unlink(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


def write_entry(folder: Path, files: dict[str, bytes]) -> None:
    """Write a folder of files as one entry: into a temporary folder, renamed into place.

    When another process wrote the same entry first, its copy stays (same key, same content).
    """
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}.tmp-"))
    try:
        for name, data in files.items():
            (tmp / name).write_bytes(data)
        try:
            os.rename(tmp, folder)
        except OSError:
            if not (folder / "meta.json").is_file():  # a damaged entry in the way: replace it
                shutil.rmtree(folder, ignore_errors=True)
                os.rename(tmp, folder)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def submit(job) -> None:
    """Queue ``job()`` (a write) on the scheduler's one writer thread; at exit the scheduler stops the
    warm-ups, then waits for the queued writes."""
    write_behind(job)


def flush_bound() -> float:
    """How long :func:`flush` waits when given no time: ``$WORKBENCH_FLUSH_WAIT_S``, else :data:`FLUSH_WAIT_S`."""
    return float(env_number(ENV_FLUSH_WAIT, FLUSH_WAIT_S, minimum=0.001))


def flush(timeout: float | None = None) -> bool:
    """Wait until every queued write is on disk, at most ``timeout`` s (default :func:`flush_bound`); when it
    passes first, say so in one line on stderr and return False (an entry not written is computed again)."""
    limit = flush_bound() if timeout is None else timeout
    if flush_writes(limit):
        return True
    print(f"workbench: gave up after {limit:g} s waiting for the timeline store's queued disk writes "
          f"(set {ENV_FLUSH_WAIT} to wait longer); what is not written yet is computed again next time",
          file=sys.stderr)
    return False
