"""Files of the timeline store written safely, on one background thread (``persist.py`` uses these).

Every file goes through a temporary name and a rename, and a folder of files (one snapshot's entry)
through a temporary folder renamed into place, so concurrent writers never leave half an entry. No
fsync: a cache entry lost to a crash is rebuilt. Writes are queued to one thread per process;
``persist.flush`` waits for them (they are also flushed at exit).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from .scheduler import flush_writes, write_behind
from ..cache.atomic import atomic_write_bytes


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


def flush(timeout: float | None = None) -> bool:
    """Wait until every queued write is on disk; False if ``timeout`` passed first."""
    return flush_writes(timeout)
