"""Checks of the paths a user names for the workbench to write or read as a folder: an output that cannot be
written (under ``/proc``, through a file used as a folder, onto an existing file, a read-only mount) is refused
in one line before any work, nothing created; a folder that cannot be read as one (a symbolic link loop, a FIFO)
is named. Beside :mod:`workbench.checks`, the checks of a model's own files."""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path

from .errors import OutputPathError


def not_a_folder(path: Path) -> str | None:
    """Why ``path`` cannot be read as a folder, in words naming it (None: it is a folder, or nothing is there
    yet): a symbolic link loop, a FIFO, a file, a link to nothing, a folder this user may not read."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return f"{path} is a symbolic link to nothing" if os.path.islink(path) else None
    except OSError as e:
        if e.errno == errno.ELOOP:
            return f"{path} leads through a symbolic link loop"
        return f"{path} cannot be read ({e.strerror or type(e).__name__})"
    if not stat.S_ISDIR(st.st_mode):
        what = "a FIFO" if stat.S_ISFIFO(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode) else "a file"
        return f"{path} is {what}, not a folder"
    try:
        with os.scandir(path):
            pass
    except OSError as e:
        return f"{path} cannot be read ({e.strerror or type(e).__name__})"
    return None


def not_utf8(path: Path) -> str | None:
    """Why ``path`` cannot be handed to the libraries below (None: it can): its name, links followed, holds bytes
    that are no UTF-8 (an old disk's encoding); safetensors, ONNX and ONNX Runtime take UTF-8 paths only."""
    try:
        os.fsdecode(os.path.realpath(path)).encode("utf-8")  # realpath: a symbolic link loop is another check's
    except UnicodeEncodeError:
        return (f"{path}: its name is not valid UTF-8, and safetensors, ONNX and ONNX Runtime open UTF-8 paths only: "
                f"rename it, or use a folder named in UTF-8")
    return None


def shown(path: str | os.PathLike, keep: int = 72) -> str:
    """``path`` for a message: whole when short, else its start and end around an ellipsis, with its length."""
    text = os.fspath(path)
    if len(text) <= keep:
        return text
    return f"{text[:keep - 24]}...{text[-20:]} ({len(text):,} characters)"


def too_long(path: str | os.PathLike, reserve: int = 0) -> str | None:
    """Why the file system cannot take ``path`` (None: it can): a name in it past the file system's name limit,
    or the whole, plus ``reserve`` bytes of names the workbench adds inside, past its path limit."""
    p = Path(os.path.abspath(os.fspath(path)))
    anc = _nearest_existing(p)
    try:
        name_max, path_max = os.pathconf(anc, "PC_NAME_MAX"), os.pathconf(anc, "PC_PATH_MAX")
    except (OSError, ValueError):
        name_max, path_max = 255, 4096
    longest = max((len(os.fsencode(part)) for part in p.parts), default=0)
    if longest > name_max:
        return f"it holds a name of {longest:,} bytes and the file system takes names of at most {name_max}"
    size = len(os.fsencode(p)) + reserve
    if size >= path_max:
        room = f" with the {reserve} the workbench's own names inside it need" if reserve else ""
        return f"it is {size:,} bytes long{room}, and the file system takes paths of at most {path_max:,}"
    return None


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
        return not_a_folder(anc) or f"{anc} is not a folder"
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


def folder_unwritable(folder: Path) -> str | None:
    """Why nothing can be created in ``folder`` (None: it can), trying it with a file removed at once."""
    return _unwritable(Path(folder), folder=True)


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
    problem = not_utf8(p)
    if problem is not None:
        raise OutputPathError(problem)
    problem = too_long(p, reserve=64)  # a writer's temporary name beside it, a folder's files inside
    if problem is not None:
        raise OutputPathError(f"cannot write {shown(p)}: {problem}; choose a shorter output path")
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


__all__ = ["shown", "too_long", "not_a_folder", "not_utf8", "folder_unwritable", "check_output_path"]
