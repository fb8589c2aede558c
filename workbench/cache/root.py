"""Where the workbench keeps its caches (the cache folder, a write into it that fails for the folder's sake),
which entries each running process holds (leases), and the clean-up of dead writers' temporary files."""

from __future__ import annotations

import atexit
import contextlib
import errno
import json
import os
import re
import shutil
import time
from pathlib import Path

from ..errors import OutputPathError
from ..path_checks import folder_unwritable
from ..settings import env_folder
from .atomic import atomic_write_text
from .kinds import KINDS, ROOT_FILES, temp_target
from .kinds import is_temp_name as shaped


def cache_root(*, write: bool = True) -> Path:
    """The cache folder: $WORKBENCH_CACHE, else ~/.cache/bert-fusion-workbench.

    Args:
        write: this process may write in the cache: the folder is made, this process's lease is written and
            dead writers' debris goes (once per process). ``False`` (``workbench cache list``) changes nothing
            and does not even make the folder.

    Raises:
        OutputPathError: the folder cannot be made or written (one line naming it and the setting).
        ConfigError: the setting names a path the file system cannot take (too long, no UTF-8).
    """
    env = env_folder("WORKBENCH_CACHE")
    root = env or (env_folder("XDG_CACHE_HOME") or Path.home() / ".cache") / "bert-fusion-workbench"
    if not write:
        return root
    setting = "WORKBENCH_CACHE" if env else "WORKBENCH_CACHE (or XDG_CACHE_HOME)"
    if not os.path.isdir(root):
        problem = folder_unwritable(root)
        if problem is None:
            try:
                root.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                problem = e.strerror or type(e).__name__
        if problem is not None:
            raise OutputPathError(f"the cache folder {root} cannot be used: {problem}; "
                                  f"point {setting} at a writable folder")
    _open_lease(root)
    return root


def check_cache_settings() -> None:
    """The folders the cache settings name (``WORKBENCH_CACHE``, ``XDG_CACHE_HOME``, a kind moved out of the cache
    such as ``WORKBENCH_TIMELINE_CACHE``), checked before any work without touching them (one line naming the
    variable): a background writer would otherwise meet the problem late, or only in a thread."""
    root = cache_root(write=False)
    for kind in KINDS:
        kind.folder(root)


#: Why a write into the cache failed, when it is the folder's fault and not the workbench's.
_UNWRITABLE = {errno.EROFS: "it is read-only", errno.EACCES: "this user may not write in it",
               errno.EPERM: "this user may not write in it"}
_FULL = (errno.ENOSPC, errno.EDQUOT)


@contextlib.contextmanager
def storing(what: str):
    """Around a write of ``what`` (a new cache entry) into the cache: a folder that cannot be written (read-only,
    no permission) or a full disk becomes one line naming the cache folder and ``WORKBENCH_CACHE``.

    Raises:
        OutputPathError: the write failed for one of those reasons (what was half-written is the caller's to
            remove; a cache entry without its meta is never used).
    """
    try:
        yield
    except OSError as e:
        line = cache_write_problem(e, what)
        if line is None:
            raise
        raise OutputPathError(line) from e


def cache_write_problem(e: OSError, what: str) -> str | None:
    """The one line for a failed write of ``what`` into the cache, or None when ``e`` is no such failure."""
    root = cache_root(write=False)
    if e.errno in _FULL:
        return (f"cannot store {what} in the cache folder {root}: the disk is full ({e.strerror}); nothing "
                f"half-written was kept: free some space (`workbench cache prune`) or point WORKBENCH_CACHE at "
                f"a folder on another disk")
    why = _UNWRITABLE.get(e.errno)
    if why is None:
        return None
    return (f"cannot store {what} in the cache folder {root}: {why} ({e.strerror}); the workbench uses what "
            f"such a cache holds, but this needs a new entry: point WORKBENCH_CACHE at a writable folder "
            f"(a copy of this one keeps what it holds: cp -a {root} DIR)")


# ── leases: which cache entries a running workbench process uses ─────────────────────────────────
#: Each process that opens the cache writes ``<cache>/.leases/<pid>.json`` (its start time and the
#: entries it used); ``workbench cache`` never removes an entry a live process holds, and a lease of a
#: dead process (psutil: pid gone, or reused by another process) means nothing.
LEASES = ".leases"
_lease: dict = {}


def _process_start(pid: int) -> float | None:
    try:
        import psutil

        return psutil.Process(pid).create_time()
    except Exception:  # no such process, no access, or no psutil: unknown
        return None


def _write_lease(root: Path) -> None:
    folder = root / LEASES
    folder.mkdir(exist_ok=True)
    atomic_write_text(folder / f"{os.getpid()}.json", json.dumps(
        {"pid": os.getpid(), "started": _lease.get("started"), "opened": _lease.get("opened"),
         "entries": sorted(_lease.get("entries", ()))}))


def _open_lease(root: Path) -> None:
    """Once per process and cache folder: the process's lease, then the debris of dead writers goes."""
    if _lease.get("root") == root:
        return

    _lease.clear()

    # "started" (psutil's, to tell a reused pid) and "opened" (this clock, precise: nothing this process
    # writes in the cache is older than the moment it first opened it).
    _lease.update(root=root, started=_process_start(os.getpid()), opened=time.time(), entries=set())
    try:
        _write_lease(root)
    except OSError:
        return  # a read-only cache: nothing is written, so nothing needs protecting or cleaning
    if not _lease.get("atexit"):
        atexit.register(_close_lease)
        _lease["atexit"] = True
    try:
        remove_stale_temps(root)
    except Exception:  # cleaning is a courtesy; it never stops the work the user asked for
        pass


def _close_lease() -> None:
    root = _lease.get("root")
    if root is not None:
        try:
            os.unlink(root / LEASES / f"{os.getpid()}.json")
        except OSError:
            pass


def cache_entry(kind: str, key: str) -> Path:
    """``<cache>/<kind>/<key>``, leased to this process (``workbench cache`` leaves it alone while it lives)
    and marked used now (least recently used entries go first when the cache is over its size limit)."""
    root = cache_root()
    path = root / kind / key
    name = f"{kind}/{key}"
    if name not in _lease.get("entries", ()):
        _lease.setdefault("entries", set()).add(name)
        try:
            _write_lease(root)
        except OSError:
            pass
    try:
        os.utime(path)
    except OSError:
        pass  # not made yet
    return path


def live_leases(root: Path, *, clean: bool = False) -> dict[int, dict]:
    """The leases of workbench processes still running (pid alive and started when its lease says);
    ``clean`` removes the leases of processes that are gone."""
    out = {}
    folder = root / LEASES
    if not folder.is_dir():
        return out
    for f in folder.glob("*.json"):
        try:
            lease = json.loads(f.read_text())
            pid = int(lease["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        started = _process_start(pid)
        if started is None or (lease.get("started") and abs(started - float(lease["started"])) > 1.0):
            if clean:  # that process is gone (or its pid now belongs to another): its lease means nothing
                try:
                    f.unlink()
                except OSError:
                    pass
            continue
        out[pid] = lease
    return out


def is_temp_name(name: str) -> bool:
    """Whether ``name`` has the exact shape of a workbench writer's temporary file or folder
    (:func:`workbench.cache.kinds.temp_target`)."""
    return shaped(name)


#: A temporary entry untouched this long is debris whoever made it (no writer pauses a day).
STALE_TEMP_S = 24 * 3600.0


def _leased_names(leases: dict) -> set[str]:
    return {e for lease in leases.values() for e in lease.get("entries", ())}


def remove_stale_temps(root: Path) -> list[Path]:
    """Remove the temporary files and folders of workbench writers that no running process can still be writing.

    Only where the workbench's writers put them (the cache folder, each kind's folder, inside entry folders),
    only names of the exact shape those writers use, standing for a name the workbench writes there
    (:mod:`workbench.cache.kinds`), never one whose entry a live process leased, and only those last changed
    before every live workbench process opened the cache (so none of them made it) or untouched for
    :data:`STALE_TEMP_S`. Anything else, a user's ``notes.tmp`` included, stays. Returns what was removed.

    Runs when a process that may write first opens the cache (after its own lease is written, so the oldest
    live lease is never younger than the caller) and in ``workbench cache prune``; ``workbench cache list``
    changes nothing.
    """
    candidates = list(_temp_candidates(root))  # listed before the leases are read: see admin.entries
    leases = live_leases(root, clean=True)
    leased = _leased_names(leases)
    opened = [float(lease.get("opened") or lease.get("started") or 0) for lease in leases.values()]
    before = min(opened) if opened else time.time()
    removed = []
    for path, owner in candidates:
        if owner in leased:
            continue
        try:
            st = path.lstat()
        except OSError:
            continue
        if not (st.st_mtime < before - 0.01 or time.time() - st.st_mtime > STALE_TEMP_S):
            continue
        if path.is_dir() and not path.is_symlink():  # a writer's folder of the exact shape: wholly the workbench's
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                path.unlink()
            except OSError:
                continue
        removed.append(path)
    return removed


def _temp_candidates(root: Path):
    """``(path, lease name)`` of every temporary name a workbench writer may have left, where it leaves them.

    The lease name is the entry the writer leased (``kind/key``), or "" where writers lease nothing.
    """
    def scan(folder: Path):
        try:
            return [e for e in os.scandir(folder) if temp_target(e.name) is not None]
        except OSError:
            return []

    for e in scan(root):
        if temp_target(e.name) in ROOT_FILES and not e.is_dir(follow_symlinks=False):
            yield Path(e.path), ""
    for e in scan(root / LEASES):
        if re.fullmatch(r"\d+\.json", temp_target(e.name) or "") and not e.is_dir(follow_symlinks=False):
            yield Path(e.path), ""
    for kind in KINDS:
        folder = kind.folder(root)
        for e in scan(folder):
            target = temp_target(e.name)
            if kind.owns_entry(target):
                yield Path(e.path), f"{kind.name}/{target}"
        if not kind.files:
            continue
        try:
            entries = [e for e in os.scandir(folder) if e.is_dir(follow_symlinks=False) and kind.owns_entry(e.name)]
        except OSError:
            continue
        for entry in entries:
            for sub, dirs, names in os.walk(entry.path):
                rel = os.path.relpath(sub, entry.path)
                temps = [n for n in names + dirs if temp_target(n) is not None]
                dirs[:] = [d for d in dirs if temp_target(d) is None and kind.owns_dir(_join(rel, d))]
                for name in temps:
                    if kind.owns_path(_join(rel, temp_target(name))):
                        yield Path(sub) / name, f"{kind.name}/{entry.name}"


def _join(rel: str, name: str) -> str:
    return name if rel in ("", ".") else f"{rel}/{name}"
