"""What the cache holds, per model and kind, and pruning it without touching what a running process uses.

The kinds of entry, where they live and the names the workbench gives them are one table,
:mod:`workbench.cache.kinds`. Only what fits that table is an entry: a file or folder the workbench did not
write, anywhere in the cache folder, is never listed as an entry nor removed, and inside an entry folder
only the files the workbench writes there go (the rest stay, with the folders that hold them, and ``prune``
says so). Exports and the models built from them share one folder per source model
(:mod:`workbench.cache.model_store`): each is an entry of its own (its graph, meta and side files, plus the weight
files it reads, which other entries may read too), and a weight file goes only when no graph of its folder
reads it any more.

An entry is *in use* when a live workbench process leased it (:func:`workbench.cache.root.cache_entry`; a writer
leases its entry, and its model folder, before it writes anything); timelines are not leased one by one, so
they count as in use while any other workbench process runs; a writer's temporary file or folder, and weight
files no graph reads yet, count as in use until no live process can be writing them. In-use entries are
never removed. An entry's last use is its modification time (touched on every use). Listing changes nothing.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ConfigError
from ..settings import env_number
from .identity import file_identity
from .kinds import BY_NAME, KINDS, remove_owned, temp_target
from .root import STALE_TEMP_S, cache_root, live_leases

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
    #: A writer's temporary file or folder, or weights no graph reads: removed whatever the criterion.
    temp: bool = False
    #: Bytes of weight files this entry reads that other entries read too.
    shared_bytes: int = 0
    inodes: set = field(default_factory=set, repr=False)
    #: For an entry in a model folder: its own files (the weights it reads are not its own).
    files: list = field(default_factory=list, repr=False)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "key": self.key, "path": str(self.path), "bytes": self.bytes,
                "shared_bytes": self.shared_bytes, "last_used": self.last_used, "model": self.model,
                "in_use": self.in_use, "temp": self.temp}


def _stat_files(paths) -> tuple[int, set]:
    """``(bytes, {(device, inode, size)})`` of files (links not followed)."""
    total, inodes = 0, set()
    for p in paths:
        try:
            st = os.lstat(p)
        except OSError:
            continue
        total += st.st_size
        inodes.add((st.st_dev, st.st_ino, st.st_size))
    return total, inodes


def _walk_files(path: Path) -> list[str]:
    if not path.is_dir() or path.is_symlink():
        return [str(path)]
    return [os.path.join(d, n) for d, _, names in os.walk(path) for n in names]


def unique_bytes(items) -> int:
    """What ``items`` take on disk together: a file several entries read counted once."""
    seen: set = set()
    for e in items:
        seen |= e.inodes
    return sum(size for _, _, size in seen)


def total_bytes(root: Path | None = None) -> int:
    """What the cache's entries take on disk, each file once."""
    return unique_bytes(entries(root, models=False))


def _read_json(p: Path) -> dict:
    try:
        d = json.loads(p.read_text())
        return d if isinstance(d, dict) else {}
    except (OSError, ValueError):
        return {}


class _Leases:
    """The live leases, read once, after the folders were listed (a writer leases before it writes, so
    whatever the listing saw being written, these hold)."""

    def __init__(self, root: Path):
        leases = live_leases(root)
        self.names = {e for lease in leases.values() for e in lease.get("entries", ())}
        self.others = any(pid != os.getpid() for pid in leases)
        opened = [float(v.get("opened") or v.get("started") or 0) for v in leases.values()]
        self.oldest_open = min(opened) if opened else time.time()

    def young(self, mtime: float) -> bool:
        """Whether a live process may have written something changed at ``mtime``."""
        return not (mtime < self.oldest_open - 0.01 or time.time() - mtime > STALE_TEMP_S)


def _listing(root: Path):
    """``(kind, entry, temp target or None, owned)`` for everything in the kinds' folders."""
    for kind in KINDS:
        try:
            items = list(os.scandir(kind.folder(root)))
        except OSError:
            continue
        for e in items:
            target = temp_target(e.name)
            yield kind, e, target, kind.owns_entry(e.name) or (target is not None and kind.owns_entry(target))


def _scan(root: Path) -> list[tuple]:
    """``(kind, name, path, temp target or None)`` of every entry the workbench wrote, nothing else."""
    return [(kind, e.name, Path(e.path), target) for kind, e, target, owned in _listing(root) if owned]


def entries(root: Path | None = None, *, models: bool = True) -> list[Entry]:
    """Every entry of the cache with its size, last use, model and whether a running process uses it."""
    root = root or cache_root(write=False)
    found = _scan(root)
    leases = _Leases(root)
    out: list[Entry] = []
    for kind, name, p, target in found:
        if kind.name == "models" and target is None:
            out += _group_entries(p, leases)
            continue
        try:
            mtime = p.lstat().st_mtime
        except OSError:
            continue
        key = target if target is not None else name
        in_use = f"{kind.name}/{key}" in leases.names or (not kind.leased and leases.others)
        if target is not None:  # a writer's temporary entry: maybe a live one's
            in_use = in_use or leases.young(mtime)
        total, inodes = _stat_files(_walk_files(p))
        out.append(Entry(kind.name, name, p, total, mtime, "?", in_use, target is not None, 0, inodes))
    if models:
        _name_models(root, out)
    return out


def _group_entries(folder: Path, leases: _Leases) -> list[Entry]:
    """The exports and variants of one model folder, and the weights none of them reads."""
    # lazy: `workbench --version` reads this module's MAX_GB; the model store loads onnx
    from .model_store import WEIGHTS_DIR, entry_files, read_files

    group_held = f"models/{folder.name}" in leases.names
    out, reads, readers = [], {}, {}
    stems = {p.with_suffix("") for p in [*folder.glob("*.onnx"), *folder.glob("*.json")]}
    for graph in sorted(s.with_suffix(".onnx") for s in stems):
        prefix, _, key = graph.stem.partition("-")
        kind = {"export": "exports", "variant": "variants"}.get(prefix)
        if kind is None or not BY_NAME["models"].owns_file(graph.name):
            continue
        meta = graph.with_suffix(".json")
        own = entry_files(graph)
        reads[graph] = [folder / rel for rel in read_files(graph)]
        for w in reads[graph]:
            readers[w] = readers.get(w, 0) + 1
        total, inodes = _stat_files(own + reads[graph])
        try:
            mtime = (meta if meta.is_file() else graph).lstat().st_mtime
        except OSError:
            continue
        incomplete = not meta.is_file()  # a publish under way, or one a killed process left
        in_use = f"{kind}/{key}" in leases.names or (incomplete and (group_held or leases.young(mtime)))
        out.append(Entry(kind, key, graph, total, mtime, "?", in_use, incomplete, 0, inodes, own))
    for e in out:
        e.shared_bytes = sum(_size(w) for w in reads[e.path] if readers[w] > 1)
    unused = [p for p in (folder / WEIGHTS_DIR).glob("*.bin")
              if p not in readers and BY_NAME["models"].owns_file(f"{WEIGHTS_DIR}/{p.name}")]
    if unused:
        total, inodes = _stat_files(unused)
        newest = max(_mtime(p) for p in unused)
        out.append(Entry("models", folder.name, folder, total, newest, "(weights no model reads)",
                         group_held or leases.young(newest), True, 0, inodes, unused))
    return out


def _size(p: Path) -> int:
    try:
        return p.stat().st_size
    except OSError:
        return 0


def _mtime(p: Path) -> float:
    try:
        return p.lstat().st_mtime
    except OSError:
        return 0.0


def _name_models(root: Path, items: list[Entry]) -> None:
    """Each entry's model, from the exports' meta (variants and timelines point at their export)."""
    by_path, by_hash = {}, {}
    for e in items:
        if e.kind == "exports" and e.files:
            name = (_read_json(e.path.with_suffix(".json")).get("model") or {}).get("name") or "?"
            e.model = by_path[str(e.path)] = name
            try:  # memoised on (path, size, mtime); a graph without its weights is small to hash anyway
                by_hash[file_identity(e.path, write=False)] = name
            except OSError:
                pass
    variants = [e for e in items if e.kind == "variants" and e.files]
    for _ in range(3):  # a variant built from a variant (int8 of the fused model) names the export's model
        for e in variants:
            origin = _read_json(e.path.with_suffix(".json"))
            exp = str(origin.get("export") or "")
            name = by_path.get(exp) or "?"
            by_path[str(e.path)] = name
            e.model = f"{name} ({origin.get('recipe', '?')})"
    for e in items:
        if e.kind in ("plans", "floor", "hashes"):
            e.model = "-"
        elif e.kind == "timelines" and not e.temp:
            e.model = by_hash.get(_read_json(e.path / "key.json").get("export_sha256"), "?")
        elif e.kind in ("exports", "variants") and not e.files:  # an earlier version's folder
            e.model = (_read_json(e.path / "meta.json").get("model") or {}).get("name") or "?"


def foreign(root: Path | None = None) -> list[Path]:
    """What lies in the kinds' folders that the workbench did not write (never listed as entries, never removed)."""
    root = root or cache_root(write=False)
    return sorted({Path(e.path) for _, e, _, owned in _listing(root) if not owned})


def summary(items: list[Entry]) -> list[dict]:
    """Totals per (model, kind), largest first."""
    groups: dict[tuple[str, str], dict] = {}
    for e in items:
        model = e.model.split(" (")[0] if not e.model.startswith("(") else e.model
        g = groups.setdefault((model, e.kind), {"model": model, "kind": e.kind, "entries": 0, "bytes": 0,
                                                "in_use": 0, "last_used": 0.0})
        g["entries"] += 1
        g["bytes"] += e.bytes
        g["in_use"] += e.in_use
        g["last_used"] = max(g["last_used"], e.last_used)
    return sorted(groups.values(), key=lambda g: -g["bytes"])


def _remove(e: Entry, leases: _Leases) -> list[Path]:
    """Remove what the workbench wrote of entry ``e``; return the files it left (not the workbench's)."""
    if e.files:  # an entry of a model folder: its own files, then the weights no graph there reads any more
        for p in e.files:
            try:
                p.unlink()
            except OSError:
                pass
        whole = e.path.with_suffix("")
        if e.kind != "models" and whole.is_dir() and not whole.is_symlink():  # a build kept whole
            for d, _, _ in sorted(os.walk(whole), key=lambda t: -len(t[0])):
                try:
                    os.rmdir(d)
                except OSError:
                    pass
        _collect(e.path if e.kind == "models" else e.path.parent, leases)
        return []
    if e.temp and e.path.is_dir() and not e.path.is_symlink():
        shutil.rmtree(e.path, ignore_errors=True)  # a writer's folder of the exact shape: wholly the workbench's
        return []
    if not e.path.is_dir() or e.path.is_symlink():
        try:
            e.path.unlink()
            return []
        except OSError:
            return [e.path]
    return remove_owned(e.path, BY_NAME[e.kind])


def _collect(folder: Path, leases: _Leases) -> None:
    """A model folder's weights no graph reads, unless a live process holds the folder; then empty folders."""
    from .model_store import WEIGHTS_DIR, unused_weights  # lazy: the model store loads onnx (as above)

    if f"models/{folder.name}" in leases.names:
        return
    for p in unused_weights(folder):
        try:
            p.unlink()
        except OSError:
            pass
    for d in (folder / WEIGHTS_DIR, folder):
        try:
            d.rmdir()
        except OSError:
            pass


def prune(*, older_than_days: float | None = None, max_bytes: int | None = None, everything: bool = False,
          dry_run: bool = False, root: Path | None = None, timeline_versions: dict | None = None) -> dict:
    """Remove entries: unused for ``older_than_days``, or the least recently used past ``max_bytes`` in all,
    or ``everything``, or (``timeline_versions``: the versions today's code writes) persisted timelines of
    other versions, which no run reads again; never one in use; and in every case the temporary entries and
    unread weights no live process can still be writing. Only what the workbench wrote goes (module doc).

    Returns:
        ``{"removed": [...], "kept_in_use": [...], "freed_bytes", "dry_run", "left_alone": [paths]}``:
        ``left_alone`` lists files inside removed entries that the workbench did not write (they stay).

    Raises:
        ConfigError: no criterion, or a negative or non-finite one.
    """
    if not everything and older_than_days is None and max_bytes is None and timeline_versions is None:
        raise ConfigError("say what to prune: --all, --older-than DAYS, --max-gb GB or --old-versions")
    for name, v in (("older-than", older_than_days), ("max-gb", max_bytes)):
        if v is not None and (not math.isfinite(v) or v < 0):
            raise ConfigError(f"--{name} must be a finite number of at least 0, not {v}")
    root = root or cache_root(write=False)
    items = sorted(entries(root), key=lambda e: e.last_used)  # least recently used first
    doomed = _doomed(items, older_than_days, max_bytes, everything, timeline_versions)
    leases = _Leases(root)
    removed, kept, left = [], [], []
    freed = unique_bytes(items) - unique_bytes(e for e in items if e not in doomed or e.in_use)
    for e in doomed:
        if e.in_use:
            kept.append(e.to_dict())
            continue
        if not dry_run:
            left += _remove(e, leases)
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


def max_bytes_setting() -> int | None:
    """``WORKBENCH_CACHE_MAX_GB`` in bytes, or None when unset.

    Raises:
        ConfigError: not a finite number from 0 to :data:`MAX_GB` (one line naming the variable).
    """
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


__all__ = ["MAX_GB", "MAX_GB_ENV", "REPORT_BYTES", "Entry", "entries", "foreign", "summary", "prune",
           "enforce_limit", "max_bytes_setting", "total_bytes", "unique_bytes", "human"]
