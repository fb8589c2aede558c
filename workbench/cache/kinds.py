"""What the cache holds, as one table: a record per kind of entry, with the names the workbench gives it.

Every reader of the cache's layout (``workbench cache list`` / ``prune``, the size limit, the clean-up of a
killed writer's temporary files) goes through these records. A name that fits no record, or a file inside an
entry that its record does not name, was not written by the workbench: it is never removed, whatever it is
called and wherever it lies in the cache folder. A temporary file or folder of the exact shape the
workbench's writers use (``.<name>.tmp-XXXXXXXX``, ``.<name>.XXXXXXXX.tmp``), standing for a name the
workbench writes there, is the workbench's, whole.

An entry is a folder (``files`` names what the workbench writes inside it, as paths relative to the entry) or
a single file (``files`` empty). The ``models`` folders hold several entries each (exports and the models
built from them, sharing their weights): :mod:`workbench.cache.model_store`.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from ..settings import env_folder


@dataclass(frozen=True)
class CacheKind:
    """One kind of cache entry."""

    name: str
    #: Plain words for ``workbench cache --help`` and the docs.
    what: str
    #: The names the workbench gives this kind's entries in its folder (a full match).
    entry: str
    #: For folder entries: the files the workbench writes inside one (relative, '/'-separated; full matches).
    files: tuple[str, ...] = ()
    #: Entries are leased one by one (:func:`workbench.cache.root.cache_entry`); else an entry counts as in use
    #: while any other workbench process runs.
    leased: bool = True
    #: The environment variable that moves this kind's folder out of the cache folder, if any.
    env: str | None = None

    def folder(self, root: Path) -> Path:
        moved = env_folder(self.env) if self.env else None
        return moved or root / self.name

    def owns_entry(self, name: str) -> bool:
        return re.fullmatch(self.entry, name) is not None

    def owns_file(self, rel: str) -> bool:
        """Whether ``rel`` (inside an entry of this kind) is a file the workbench writes there."""
        return any(re.fullmatch(p, rel) for p in self.files)

    def owns_dir(self, rel: str) -> bool:
        """Whether ``rel`` (inside an entry of this kind) is a folder the workbench makes there."""
        parts = rel.split("/")
        for p in self.files:
            segs = p.split("/")
            if len(segs) > len(parts) and all(re.fullmatch(a, b) for a, b in zip(segs, parts)):
                return True
        return False

    def owns_path(self, rel: str) -> bool:
        return self.owns_file(rel) or self.owns_dir(rel)


_HEX24 = r"[0-9a-f]{24}"
_STEM = r"(export|variant)-[0-9a-f]{24}"

KINDS: tuple[CacheKind, ...] = (
    CacheKind("models", "exports and the models built from them (fused, int8, ...), one folder per source "
              "model, each weight stored once in it", _HEX24,
              (r"weights/[0-9a-f]{64}\.bin", _STEM + r"\.(onnx|json)", _STEM + r"\.[\w-]+(\.[\w-]+)*",
               _STEM + r"/[\w-]+(\.[\w-]+)*")),
    CacheKind("timelines", "fusion timelines: weight-free snapshots of every step, their parity",
              r"[0-9a-f]{24}", (r"key\.json", r"input\.json", r"graphs/[0-9a-f]{40}\.onnx", r"weights/[0-9a-f]{32}\.pb",
                               r"steps/[0-9a-f]{32}/(meta|parity|task_parity)\.json"),
              leased=False, env="WORKBENCH_TIMELINE_CACHE"),
    CacheKind("plans", "this machine's fusion plans (a cached ablation, for tune)", _HEX24 + r"\.json"),
    CacheKind("floor", "this machine's measured MatMul rates", r"matmul-[A-Za-z0-9-]+-[0-9a-f]{16}\.json"),
    CacheKind("hashes", "content hashes of files, memoised on size and modification time", r"[0-9a-f]{64}"),
    # Earlier versions kept each export and variant in a folder of its own, with its own copy of the weights.
    CacheKind("exports", "exports written by earlier versions", _HEX24,
              (r"model\.onnx", r"model\.onnx\.data", r"meta\.json")),
    CacheKind("variants", "models built by earlier versions", _HEX24,
              (r"model\.onnx", r"model\.onnx\.data", r"origin\.json", r"search\.json")),
)
BY_NAME = {k.name: k for k in KINDS}
#: Files the workbench writes at the top of the cache folder.
ROOT_FILES = ("workshop.json",)

# Temporary names of the workbench's own writers: ``tempfile.mkdtemp(prefix=f".{name}.tmp-")`` and
# ``tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp")`` add eight characters of [a-z0-9_].
_TEMP_DIR = re.compile(r"\.(?P<name>.+)\.tmp-[a-z0-9_]{8}")
_TEMP_FILE = re.compile(r"\.(?P<name>.+)\.[a-z0-9_]{8}\.tmp")


def temp_target(name: str) -> str | None:
    """The name a workbench writer's temporary ``name`` stands for, or None when it is no such name."""
    m = _TEMP_DIR.fullmatch(name) or _TEMP_FILE.fullmatch(name)
    return m.group("name") if m else None


def is_temp_name(name: str) -> bool:
    """Whether ``name`` has the shape of a workbench writer's temporary file or folder."""
    return temp_target(name) is not None


def remove_owned(folder: Path, kind: CacheKind) -> list[Path]:
    """Delete what the workbench wrote in the entry ``folder`` of ``kind``, then the folders left empty; return
    the files it did not write, which stay where they are (with the folders that hold them).

    Owned: the files ``kind`` names, and temporary names of the workbench's writers standing for them (a
    temporary folder of that shape goes whole). A symbolic link is removed as a link, never followed.
    """
    kept: list[Path] = []
    for sub, dirs, names in os.walk(folder, topdown=False):
        rel = os.path.relpath(sub, folder).replace(os.sep, "/")
        if any(temp_target(part) for part in rel.split("/")):
            continue  # inside a writer's temporary folder: removed whole below
        for name in names + [d for d in dirs if Path(sub, d).is_symlink()]:
            path = Path(sub) / name
            if _owned(kind, _join(rel, name)):
                try:
                    path.unlink()
                    continue
                except OSError:
                    pass
            kept.append(path)
        for name in dirs:
            d = Path(sub) / name
            if d.is_symlink():
                continue
            if temp_target(name) is not None and kind.owns_path(_join(rel, temp_target(name))):
                shutil.rmtree(d, ignore_errors=True)
            else:
                _rmdir(d)
    _rmdir(folder)
    return kept


def _owned(kind: CacheKind, rel: str) -> bool:
    if kind.owns_file(rel):
        return True
    head, _, name = rel.rpartition("/")
    target = temp_target(name)  # a writer's .<file>.XXXXXXXX.tmp
    return target is not None and kind.owns_file(_join(head, target))


def _join(a: str, b: str) -> str:
    return b if a in ("", ".") else (a if b in ("", ".") else f"{a}/{b}")


def _rmdir(d: Path) -> None:
    try:
        d.rmdir()
    except OSError:
        pass  # not empty: something the workbench did not write is in it


__all__ = ["remove_owned", "CacheKind", "KINDS", "BY_NAME", "ROOT_FILES", "temp_target", "is_temp_name"]
