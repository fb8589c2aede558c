"""What the cache holds, per model and kind, and pruning it without touching what a running process uses.

The kinds of entry, where they live and the names the workbench gives them are one table,
:mod:`workbench.cache_kinds` (exports, variants, timelines, plans, floor, hashes, blobs). Only what fits that
table is an entry: a file or folder the workbench did not write, anywhere in the cache folder, is never
listed as an entry nor removed, and inside an entry folder only the files the workbench writes there go
(the rest stay, with the folders that hold them, and ``prune`` says so). An entry is *in use* when a live
workbench process leased it (:func:`workbench.paths.cache_entry`; a writer leases an entry before it makes
its temporary folder); timelines are not leased one by one, so they count as in use while any other
workbench process runs; a writer's temporary folder counts as in use until no live process can be writing
it. In-use entries are never removed. An entry's last use is its modification time (``cache_entry`` touches
it on every use). Listing changes nothing.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from .cache_kinds import BY_NAME, KINDS, manifest_files, remove_owned, temp_target
from .errors import ConfigError
from .paths import STALE_TEMP_S, cache_root, live_leases

#: The kind folders' names, in the table's order.
KIND_NAMES = tuple(k.name for k in KINDS)
#: Optional size limit of the cache in GB; past it the least recently used entries go (after each CLI command).
MAX_GB_ENV = "WORKBENCH_CACHE_MAX_GB"
#: The largest size limit accepted, in GB (a petabyte): anything larger is a typo.
MAX_GB = 1e6
#: A command that stored more than this says so.
REPORT_BYTES = 100_000_000


@dataclass
class Entry:
    kind: str
    key: str
    path: Path
    bytes: int
    last_used: float
    model: str = "?"
    in_use: bool = False
    temp: bool = False
    #: Bytes of files this entry shares with other entries (hard links to the same weights).
    shared_bytes: int = 0
    inodes: set = field(default_factory=set, repr=False)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "key": self.key, "path": str(self.path), "bytes": self.bytes,
                "shared_bytes": self.shared_bytes, "last_used": self.last_used, "model": self.model,
                "in_use": self.in_use, "temp": self.temp}


def _walk_sizes(path: Path) -> tuple[int, int, set]:
    """``(bytes, bytes in files with other links, {(device, inode)})`` under ``path`` (links not followed)."""
    try:
        st = path.lstat()
    except OSError:
        return 0, 0, set()
    if not path.is_dir() or path.is_symlink():
        return st.st_size, st.st_size if st.st_nlink > 1 else 0, {(st.st_dev, st.st_ino, st.st_size)}
    total, shared, inodes = 0, 0, set()
    for folder, dirs, files in os.walk(path):
        for name in files:
            try:
                f = os.lstat(os.path.join(folder, name))
            except OSError:
                continue
            total += f.st_size
            shared += f.st_size if f.st_nlink > 1 else 0
            inodes.add((f.st_dev, f.st_ino, f.st_size))
    return total, shared, inodes


def size_of(path: Path) -> int:
    """Bytes under ``path`` (links not followed; a file with several names counted at each)."""
    return _walk_sizes(path)[0]


def total_bytes(root: Path | None = None) -> int:
    """What the cache's entries take on disk: each file once, however many entries share it."""
    return unique_bytes(entries(root, models=False))


def _read_json(p: Path) -> dict:
    import json

    try:
        d = json.loads(p.read_text())
        return d if isinstance(d, dict) else {}
    except (OSError, ValueError):
        return {}


def _models(root: Path) -> tuple[dict, dict]:
    """``(export folder → model name, export content hash → model name)`` from the exports' meta."""
    by_path, by_hash = {}, {}
    exports = BY_NAME["exports"].folder(root)
    for d in exports.glob("*"):
        if not d.is_dir() or not BY_NAME["exports"].owns_entry(d.name):
            continue
        name = (_read_json(d / "meta.json").get("model") or {}).get("name") or "?"
        by_path[str(d.resolve())] = name
        if (d / "model.onnx").is_file():
            try:
                from .models import file_identity  # memoized on (path, size, mtime): a lookup after the first

                by_hash[file_identity(d / "model.onnx", write=False)] = name
            except OSError:
                pass
    return by_path, by_hash


def _model_of(kind: str, path: Path, by_path: dict, by_hash: dict) -> str:
    if kind == "exports":
        return by_path.get(str(path.resolve()), "?")
    if kind == "variants":
        origin = _read_json(path / "origin.json")
        exp = origin.get("export")
        if not exp:
            return "?"
        name = by_path.get(str(Path(exp).parent.resolve()))
        return f"{name or Path(exp).stem} ({origin.get('recipe', '?')})"
    if kind == "timelines":
        return by_hash.get(_read_json(path / "key.json").get("export_sha256"), "?")
    return "-"


def _scan(root: Path) -> list[tuple]:
    """``(kind, name, path, temp target or None)`` of every entry the workbench wrote, nothing else."""
    found = []
    for kind in KINDS:
        folder = kind.folder(root)
        try:
            items = list(os.scandir(folder))
        except OSError:
            continue
        for e in items:
            target = temp_target(e.name)
            if kind.owns_entry(e.name) or (target is not None and kind.owns_entry(target)):
                found.append((kind, e.name, Path(e.path), target))
    return found


def entries(root: Path | None = None, *, models: bool = True) -> list[Entry]:
    """Every entry of the cache with its size, last use, model and whether a running process uses it.

    The folders are listed before the leases are read: a writer leases its entry before it makes anything,
    so whatever the listing saw being written, the leases read afterwards hold.
    """
    root = root or cache_root(write=False)
    found = _scan(root)
    leases = live_leases(root)
    leased = {e for lease in leases.values() for e in lease.get("entries", ())}
    others = any(pid != os.getpid() for pid in leases)
    opened = [float(v.get("opened") or v.get("started") or 0) for v in leases.values()]
    oldest_open = min(opened) if opened else time.time()
    by_path, by_hash = _models(root) if models else ({}, {})
    out = []
    for kind, name, p, target in found:
        try:
            mtime = p.lstat().st_mtime
        except OSError:
            continue
        key = target if target is not None else name
        in_use = f"{kind.name}/{key}" in leased or (not kind.leased and others)
        if target is not None:  # a writer's temporary entry: maybe a live one's
            in_use = in_use or not (mtime < oldest_open - 0.01 or time.time() - mtime > STALE_TEMP_S)
        total, shared, inodes = _walk_sizes(p)
        out.append(Entry(kind.name, name, p, total, mtime,
                         _model_of(kind.name, p, by_path, by_hash) if models else "?", in_use, target is not None,
                         shared, inodes))
    return out


def foreign(root: Path | None = None) -> list[Path]:
    """What lies in the kinds' folders that the workbench did not write (never listed as entries, never removed)."""
    root = root or cache_root(write=False)
    out = []
    for kind in KINDS:
        try:
            items = list(os.scandir(kind.folder(root)))
        except OSError:
            continue
        out += [Path(e.path) for e in items if not kind.owns_entry(e.name)
                and not kind.owns_entry(temp_target(e.name) or "")]
    return out


def summary(items: list[Entry]) -> list[dict]:
    """Totals per (model, kind), largest first."""
    groups: dict[tuple[str, str], dict] = {}
    for e in items:
        model = e.model.split(" (")[0]
        g = groups.setdefault((model, e.kind), {"model": model, "kind": e.kind, "entries": 0, "bytes": 0,
                                                "in_use": 0, "last_used": 0.0})
        g["entries"] += 1
        g["bytes"] += e.bytes
        g["in_use"] += e.in_use
        g["last_used"] = max(g["last_used"], e.last_used)
    return sorted(groups.values(), key=lambda g: -g["bytes"])


def _remove(e: Entry) -> list[Path]:
    """Remove what the workbench wrote of entry ``e``; return the files it left (not the workbench's)."""
    kind = BY_NAME[e.kind]
    if not e.path.is_dir() or e.path.is_symlink():
        try:
            e.path.unlink()
            return []
        except OSError:
            return [e.path]
    listed = set() if e.temp else manifest_files(e.path)
    return remove_owned(e.path, kind, "", listed)


def prune(*, older_than_days: float | None = None, max_bytes: int | None = None, everything: bool = False,
          dry_run: bool = False, root: Path | None = None, timeline_versions: dict | None = None) -> dict:
    """Remove entries: unused for ``older_than_days``, or the least recently used past ``max_bytes`` in all,
    or ``everything``, or (``timeline_versions``: the versions today's code writes) persisted timelines of
    other versions, which no run reads again; never one in use; and in every case the temporary entries no
    live process can still be writing. Only what the workbench wrote goes (see the module doc).

    Returns:
        ``{"removed": [...], "kept_in_use": [...], "freed_bytes", "dry_run", "left_alone": [paths]}``:
        ``left_alone`` lists files inside removed entries that the workbench did not write (they stay).

    Raises:
        ConfigError: no criterion, or a negative or non-finite one.
    """
    import math

    if not everything and older_than_days is None and max_bytes is None and timeline_versions is None:
        raise ConfigError("say what to prune: --all, --older-than DAYS, --max-gb GB or --old-versions")
    for name, v in (("older-than", older_than_days), ("max-gb", max_bytes)):
        if v is not None and (not math.isfinite(v) or v < 0):
            raise ConfigError(f"--{name} must be a finite number of at least 0, not {v}")
    items = sorted(entries(root), key=lambda e: e.last_used)  # least recently used first
    doomed = _doomed(items, older_than_days, max_bytes, everything, timeline_versions)
    removed, kept, left = [], [], []
    freed = _freed(doomed, items)
    for e in doomed:
        if e.in_use:
            kept.append(e.to_dict())
            continue
        if not dry_run:
            left += _remove(e)
        removed.append(e.to_dict())
    if not dry_run:  # what really went: files of others inside an entry stayed
        freed = unique_bytes(items) - unique_bytes(entries(root, models=False))
    return {"removed": removed, "kept_in_use": kept, "freed_bytes": freed, "dry_run": dry_run,
            "left_alone": [str(p) for p in left]}


def _doomed(items: list[Entry], older_than_days, max_bytes, everything: bool, timeline_versions) -> list[Entry]:
    now = time.time()
    doomed = [e for e in items if e.temp]  # stale ones go whatever the criterion; live ones are in use
    if everything:
        doomed += [e for e in items if e not in doomed]
    if timeline_versions is not None:
        doomed += [e for e in items if e.kind == "timelines" and not e.temp and e not in doomed
                   and _read_json(e.path / "key.json").get("versions") != timeline_versions]
    if older_than_days is not None:
        doomed += [e for e in items if now - e.last_used > older_than_days * 86400 and e not in doomed]
    if max_bytes is not None:
        left = unique_bytes(e for e in items if e not in doomed)
        for e in items:
            if left <= max_bytes:
                break
            if e not in doomed and not e.in_use:
                doomed.append(e)
                left = unique_bytes(x for x in items if x not in doomed)
    return doomed


def unique_bytes(items) -> int:
    """What ``items`` take on disk together: a file several entries share counted once."""
    seen: set = set()
    for e in items:
        seen |= e.inodes
    return sum(size for _, _, size in seen)


def _freed(doomed: list[Entry], items: list[Entry]) -> int:
    """Bytes the removal gives back: files no remaining entry still holds."""
    gone = [e for e in doomed if not e.in_use]
    return unique_bytes(items) - unique_bytes(e for e in items if e not in gone)


def max_bytes_setting() -> int | None:
    """``WORKBENCH_CACHE_MAX_GB`` in bytes, or None when unset.

    Raises:
        ConfigError: not a finite number from 0 to :data:`MAX_GB` (one line naming the variable).
    """
    from .settings import env_number

    gb = env_number(MAX_GB_ENV, None, minimum=0, maximum=MAX_GB)
    return None if gb is None else int(gb * 1e9)


def enforce_limit(root: Path | None = None) -> dict | None:
    """With :data:`MAX_GB_ENV` set, evict the least recently used entries not in use past it."""
    limit = max_bytes_setting()
    if limit is None:
        return None
    return prune(max_bytes=limit, root=root)


def human(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"


__all__ = ["KIND_NAMES", "MAX_GB", "foreign", "MAX_GB_ENV", "REPORT_BYTES", "Entry", "entries", "summary", "prune", "enforce_limit",
           "max_bytes_setting", "total_bytes", "unique_bytes", "size_of", "human"]
