"""Whether a file of the cache holds what the workbench wrote: its SHA-256 against the one its name (a weights
file, ``<sha256>.bin``) or its entry's meta records, checked before anything uses it.

Files found intact are remembered in this process by their stamp (device, inode, size, mtime_ns, ctime_ns).
Writing, truncating, replacing or touching a file changes one of these (the kernel sets ctime on every change,
one that puts mtime back included), so each file is hashed once per process and again only when its stamp
changed. Nothing is trusted across processes: bit rot on the disk and a copy that keeps times change no stamp,
and hashing bert-base's weights costs well under a second.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from pathlib import Path

from ..errors import CacheDamagedError

MISSING = "is missing"
_checked: dict[str, tuple] = {}
_repaired: list[str] = []


def _stamp(st: os.stat_result) -> tuple:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _what(mode: int) -> str:
    return ("a folder" if stat.S_ISDIR(mode) else "a symbolic link" if stat.S_ISLNK(mode)
            else "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device")


def sha256_of(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def file_problem(path: Path, digest: str, size: int | None = None) -> str | None:
    """Why the file at ``path`` does not hold bytes of SHA-256 ``digest`` (and ``size`` bytes, when given), or
    None when it does. A link is never followed and a FIFO never waited on."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return MISSING
    except OSError as e:
        return f"cannot be read ({e.strerror or type(e).__name__})"
    if not stat.S_ISREG(st.st_mode):
        return f"is {_what(st.st_mode)}, not a file"
    if size is not None and st.st_size != size:
        return f"holds {st.st_size:,} bytes, not the {size:,} written (truncated or replaced)"
    if _checked.get(str(path)) == _stamp(st):
        return None
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
        with open(fd, "rb", buffering=0) as f:
            st = os.fstat(fd)  # the stamp before reading: a change while it is read is seen next time
            if not stat.S_ISREG(st.st_mode):
                return f"is {_what(st.st_mode)}, not a file"
            got = hashlib.file_digest(f, "sha256").hexdigest()
    except OSError as e:
        return f"cannot be read ({e.strerror or type(e).__name__})"
    if got != digest:
        return "does not hold what was written (its content changed)"
    _checked[str(path)] = _stamp(st)
    return None


def mark_checked(path: Path) -> None:
    """``path`` was just written from bytes whose hash the writer knows: intact until its stamp changes."""
    try:
        _checked[str(path)] = _stamp(os.lstat(path))
    except OSError:
        pass


def clear(path: Path) -> None:
    """Remove a damaged file of the cache so that it can be written again: a file, link or FIFO goes (a link as
    a link, never followed); an empty folder goes; a folder with something in it is not the workbench's to
    empty: :class:`CacheDamagedError` names it. Raises OSError when the cache cannot be changed here."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    _checked.pop(str(path), None)
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(path)
        return
    try:
        os.rmdir(path)
    except OSError as e:
        if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):  # anything else (a read-only cache) is the caller's
            raise
        raise CacheDamagedError(f"{path} is a folder with files in it where the cache keeps a file: remove it "
                                f"(the workbench never empties a folder it did not make) and run again") from e


def note_repair(path: Path, what: str) -> None:
    _repaired.append(f"{path}: {what}")


def repairs() -> list[str]:
    """The damaged files of the cache this process found and removed or wrote again, each with what was wrong."""
    return list(_repaired)
