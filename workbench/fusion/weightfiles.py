"""The timeline store's weight files (``weights/<k>.pb``: packed QKV and the other tensors steps make),
checked against the SHA-256 their step's ``meta.json`` records before a snapshot reads them.

A weight file is named by its key (name, type, shape, size), which says nothing of its bytes: a flipped
byte parses as a tensor of the same key. So every entry that names a weight file records its digest, and a
file read back is hashed (once per process: the store keeps what it read) and compared. A file that does not
match is removed and its step recomputed (``timeline_store.TimelineStore.load`` treats it as a damaged entry).
Writing checks an existing file of the same name with :func:`workbench.cache.integrity.file_problem` (hashed
once per process, trusted on its stamp after that) and replaces it when it is not the bytes being written.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import onnx

from ..cache.integrity import file_problem, mark_checked
from .disk import unlink, write_file
from .snapshot_weights import nbytes, weight_key


class WeightFileDamaged(Exception):
    """A weight file that is missing, unreadable, or not the tensor its entry recorded."""


def digest_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_weight(path: Path, key: str, digest: object) -> onnx.TensorProto:
    """The tensor of ``key`` in ``path``, whose bytes must hash to ``digest``; a damaged file is removed and
    :class:`WeightFileDamaged` says what was wrong."""
    if not isinstance(digest, str):
        raise WeightFileDamaged(f"{path}: no digest recorded for weight {key}")
    try:
        data = path.read_bytes()
    except OSError as e:
        raise WeightFileDamaged(f"{path}: cannot be read ({e.strerror or type(e).__name__})") from e
    tensor = onnx.TensorProto()
    try:
        if digest_of(data) != digest:
            raise WeightFileDamaged(f"{path}: does not hold what was written (its content changed)")
        tensor.ParseFromString(data)
        if (weight_key(tensor, nbytes(tensor)) != key or len(tensor.raw_data) != nbytes(tensor)
                or tensor.data_location == onnx.TensorProto.EXTERNAL):
            raise WeightFileDamaged(f"{path}: is not weight {key}")
    except Exception as e:  # noqa: BLE001 - protobuf's DecodeError and friends: the file goes either way
        unlink(path)
        if isinstance(e, WeightFileDamaged):
            raise
        raise WeightFileDamaged(f"{path}: not a tensor ({type(e).__name__})") from e
    return tensor


def write_weight(path: Path, data: bytes) -> str:
    """Write a tensor's serialized bytes unless ``path`` holds them already; their digest."""
    digest = digest_of(data)
    if file_problem(path, digest, len(data)) is not None:
        write_file(path, data)
        mark_checked(path)
    return digest
