"""Where the workbench keeps its caches, and the atomic-write primitive."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .errors import OutputPathError


def cache_root() -> Path:
    """The cache folder: $WORKBENCH_CACHE, else ~/.cache/bert-fusion-workbench.

    Raises:
        OutputPathError: the folder cannot be made or written (one line naming it and the setting).
    """
    env = os.environ.get("WORKBENCH_CACHE")
    root = Path(env).expanduser() if env else (Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
                                               / "bert-fusion-workbench")
    setting = "WORKBENCH_CACHE" if env else "WORKBENCH_CACHE (or XDG_CACHE_HOME)"
    if not root.is_dir():
        problem = _unwritable(root, folder=True)
        if problem is None:
            try:
                root.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                problem = e.strerror or type(e).__name__
        if problem is not None:
            raise OutputPathError(f"the cache folder {root} cannot be used: {problem}; "
                                  f"point {setting} at a writable folder")
    return root


def _nearest_existing(path: Path) -> Path:
    """``path`` or its closest ancestor that exists (as anything: a folder, a file, a link)."""
    p = path
    while not os.path.lexists(p) and p.parent != p:
        p = p.parent
    return p


def _unwritable(path: Path, *, folder: bool) -> str | None:
    """Why nothing can be created at ``path`` (None: it can), without creating anything that stays.

    The closest existing ancestor must be a folder this process can create files in; that is tried
    with a temporary file removed at once, because permissions alone do not tell (``/proc``, a
    read-only mount, root's access everywhere).
    """
    start = path if folder else path.parent
    anc = _nearest_existing(start)
    if not anc.is_dir():
        return f"{anc} is a file, not a folder"
    try:
        fd, probe = tempfile.mkstemp(dir=anc, prefix=".workbench-probe-")
    except OSError as e:
        return f"cannot create files in {anc} ({e.strerror or type(e).__name__})"
    os.close(fd)
    try:
        os.unlink(probe)
    except OSError:
        pass
    return None


def check_output_path(path: str | os.PathLike, *, folder: bool = False, existing_ok: bool = False) -> Path:
    """Refuse, before any work, an output that cannot be written; nothing is created.

    Args:
        path: the user's output (a file, or with ``folder`` a folder to write into).
        folder: ``path`` names a folder (it may exist, as a folder).
        existing_ok: an existing file is fine (a sweep's result file is resumed, not overwritten).

    Raises:
        OutputPathError: one line naming the path, what is wrong and what to do.
    """
    p = Path(path).expanduser()
    if folder:
        if os.path.lexists(p) and not p.is_dir():
            raise OutputPathError(f"{p} is a file, not a folder: give a folder for the output (it is made if missing)")
    elif p.is_dir():
        raise OutputPathError(f"{p} is a folder: give a file name for the output")
    elif os.path.lexists(p) and not existing_ok:
        raise OutputPathError(f"{p} already exists; choose another output path (the workbench never overwrites a file)")
    problem = _unwritable(p, folder=folder)
    if problem is not None:
        raise OutputPathError(f"cannot write {p}: {problem}; choose an output path in a folder you can write to")
    return p


def atomic_write_bytes(path: Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary file and a rename.

    A crash mid-write leaves the old file (or nothing), never half a file.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp makes 0600; a report or model is the user's ordinary file
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


def atomic_write_text(path: Path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))
