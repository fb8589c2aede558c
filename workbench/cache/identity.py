"""A file's content hash, memoised in the cache on (path, size, mtime): a model file is hashed once."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from .atomic import atomic_write_text
from .root import cache_root


def _sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def file_identity(path: Path, *, write: bool = True) -> str:
    """Content hash of a file, memoised on (path, size, mtime) in the cache (``write=False``: read the memo,
    never write it: ``workbench cache list`` changes nothing)."""
    st = path.stat()
    # The path as the file system's bytes: a folder named in bytes that are no UTF-8 (an old disk) still hashes.
    memo = cache_root(write=write) / "hashes" / hashlib.sha256(
        os.fsencode(path.resolve()) + f"|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()
    try:
        return memo.read_text().strip()
    except OSError:
        pass
    digest = _sha256_file(path)
    if not write:
        return digest
    try:
        atomic_write_text(memo, digest)
    except OSError:
        pass  # a read-only cache only costs speed
    return digest
