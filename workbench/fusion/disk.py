"""Files of the timeline store written safely, on one background thread (``persist.py`` uses these).

Every file goes through a temporary name and a rename, and a folder of files (one snapshot's entry)
through a temporary folder renamed into place, so concurrent writers never leave half an entry. No
fsync: a cache entry lost to a crash is rebuilt. Writes are queued to one thread per process;
:func:`flush` waits for them (they are also flushed at exit).
"""

from __future__ import annotations

import atexit
import os
import queue
import shutil
import tempfile
import threading
from pathlib import Path


def _write_file(path: Path, data: bytes) -> None:
    """Write through a temporary file and a rename (no fsync: a cache entry lost to a crash is rebuilt)."""
    from ..cache.atomic import atomic_write_bytes

    atomic_write_bytes(path, data, durable=False)


def _write_if_new(path: Path, data: bytes) -> None:
    """Write a content-addressed file unless one of the same size is there already."""
    try:
        if path.stat().st_size == len(data):
            return
    except OSError:
        pass
    _write_file(path, data)


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


def _write_entry(folder: Path, files: dict[str, bytes]) -> None:
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


# ---------------------------------------------------------------- the writer thread
_QUEUE: "queue.Queue" = queue.Queue()
_WRITER: threading.Thread | None = None
_WRITER_LOCK = threading.Lock()


def _writer_loop() -> None:
    while True:
        job = _QUEUE.get()
        try:
            job()
        except Exception:  # noqa: BLE001 - a cache that cannot be written only costs speed next time
            pass
        finally:
            _QUEUE.task_done()


def _submit(job) -> None:
    global _WRITER
    with _WRITER_LOCK:
        if _WRITER is None or not _WRITER.is_alive():
            _WRITER = threading.Thread(target=_writer_loop, name="workbench-persist", daemon=True)
            _WRITER.start()
    _QUEUE.put(job)


def flush(timeout: float | None = None) -> bool:
    """Wait until every queued write is on disk; False if ``timeout`` passed first."""
    if timeout is None:
        _QUEUE.join()
        return True
    done = threading.Event()

    def wait():
        _QUEUE.join()
        done.set()

    threading.Thread(target=wait, name="workbench-persist-flush", daemon=True).start()
    return done.wait(timeout)


# Snapshots made and not yet written reach the disk at exit (warming.py stops warm-ups and flushes first).
atexit.register(flush, 30.0)
