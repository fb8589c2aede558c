"""What the cache holds, per model and kind, and pruning it without touching what a running process uses.

The cache (:func:`workbench.paths.cache_root`) holds entries by kind: ``exports/<key>`` (an export and its
meta), ``variants/<key>`` (fused, int8, fp16 builds), ``timelines/<key>`` (persisted fusion timelines),
``floor/*.json`` (MatMul rate probes) and ``hashes/*`` (file hash memos). An entry is *in use* when a
live workbench process leased it (:func:`workbench.paths.cache_entry`); timelines are not leased one by
one, so they count as in use while any other workbench process runs. In-use entries are never removed.
An entry's last use is its folder's modification time (``cache_entry`` touches it on every use).
"""
from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from .errors import ConfigError
from .paths import cache_root, is_temp_name, live_leases

KINDS = ("exports", "variants", "timelines", "floor", "hashes")
#: Optional size limit of the cache in GB; past it the least recently used entries go (after each CLI command).
MAX_GB_ENV = "WORKBENCH_CACHE_MAX_GB"
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

    def to_dict(self) -> dict:
        return {"kind": self.kind, "key": self.key, "path": str(self.path), "bytes": self.bytes,
                "last_used": self.last_used, "model": self.model, "in_use": self.in_use, "temp": self.temp}


def size_of(path: Path) -> int:
    """Bytes under ``path`` (links not followed)."""
    try:
        st = path.lstat()
    except OSError:
        return 0
    if not path.is_dir() or path.is_symlink():
        return st.st_size
    total = 0
    for folder, dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                pass
    return total


def total_bytes(root: Path | None = None) -> int:
    root = root or cache_root()
    return sum(size_of(root / k) for k in KINDS)


def _read_json(p: Path) -> dict:
    try:
        d = json.loads(p.read_text())
        return d if isinstance(d, dict) else {}
    except (OSError, ValueError):
        return {}


def _models(root: Path) -> tuple[dict, dict]:
    """``(export folder → model name, export content hash → model name)`` from the exports' meta."""
    by_path, by_hash = {}, {}
    for d in (root / "exports").glob("*"):
        if not d.is_dir() or is_temp_name(d.name):
            continue
        name = (_read_json(d / "meta.json").get("model") or {}).get("name") or "?"
        by_path[str(d.resolve())] = name
        if (d / "model.onnx").is_file():
            try:
                from .models import file_identity  # memoized on (path, size, mtime): a lookup after the first

                by_hash[file_identity(d / "model.onnx")] = name
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


def entries(root: Path | None = None) -> list[Entry]:
    """Every entry of the cache with its size, last use, model and whether a running process uses it."""
    root = root or cache_root()
    leases = {pid: lease for pid, lease in live_leases(root).items()}
    leased = {e for lease in leases.values() for e in lease.get("entries", ())}
    others = any(pid != os.getpid() for pid in leases)
    by_path, by_hash = _models(root)
    out = []
    for kind in KINDS:
        folder = root / kind
        if not folder.is_dir():
            continue
        for e in os.scandir(folder):
            p = Path(e.path)
            try:
                mtime = e.stat(follow_symlinks=False).st_mtime
            except OSError:
                continue
            in_use = f"{kind}/{e.name}" in leased or (kind == "timelines" and others)
            out.append(Entry(kind, e.name, p, size_of(p), mtime, _model_of(kind, p, by_path, by_hash), in_use,
                             is_temp_name(e.name)))
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


def _remove(e: Entry) -> bool:
    try:
        if e.path.is_dir() and not e.path.is_symlink():
            shutil.rmtree(e.path)
        else:
            e.path.unlink()
        return True
    except OSError:
        return False


def prune(*, older_than_days: float | None = None, max_bytes: int | None = None, everything: bool = False,
          dry_run: bool = False, root: Path | None = None, timeline_versions: dict | None = None) -> dict:
    """Remove entries: unused for ``older_than_days``, or the least recently used past ``max_bytes`` in all,
    or ``everything``, or (``timeline_versions``: the versions today's code writes) persisted timelines of
    other versions, which no run reads again; never one in use.
    ``{"removed": [...], "kept_in_use": [...], "freed_bytes"}``.

    Raises:
        ConfigError: no criterion, or a negative one.
    """
    if not everything and older_than_days is None and max_bytes is None and timeline_versions is None:
        raise ConfigError("say what to prune: --all, --older-than DAYS, --max-gb GB or --old-versions")
    for name, v in (("older-than", older_than_days), ("max-gb", max_bytes)):
        if v is not None and v < 0:
            raise ConfigError(f"--{name} must be at least 0, not {v}")
    items = sorted(entries(root), key=lambda e: e.last_used)  # least recently used first
    now, doomed = time.time(), []
    if everything:
        doomed = list(items)
    if timeline_versions is not None:
        doomed += [e for e in items if e.kind == "timelines" and not e.temp and e not in doomed
                   and _read_json(e.path / "key.json").get("versions") != timeline_versions]
    if older_than_days is not None:
        doomed += [e for e in items if now - e.last_used > older_than_days * 86400 and e not in doomed]
    if max_bytes is not None:
        left = sum(e.bytes for e in items if e not in doomed)
        for e in items:
            if left <= max_bytes:
                break
            if e not in doomed and not e.in_use:
                doomed.append(e)
                left -= e.bytes
    removed, kept = [], []
    for e in doomed:
        if e.in_use:
            kept.append(e.to_dict())
        elif dry_run or _remove(e):
            removed.append(e.to_dict())
    return {"removed": removed, "kept_in_use": kept, "freed_bytes": sum(e["bytes"] for e in removed),
            "dry_run": dry_run}


def max_bytes_setting() -> int | None:
    """``WORKBENCH_CACHE_MAX_GB`` in bytes, or None when unset."""
    raw = os.environ.get(MAX_GB_ENV)
    if not raw:
        return None
    try:
        gb = float(raw)
    except ValueError:
        raise ConfigError(f"{MAX_GB_ENV}={raw!r} is not a number of GB") from None
    if gb < 0:
        raise ConfigError(f"{MAX_GB_ENV}={raw!r} must be at least 0")
    return int(gb * 1e9)


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


__all__ = ["KINDS", "MAX_GB_ENV", "REPORT_BYTES", "Entry", "entries", "summary", "prune", "enforce_limit",
           "max_bytes_setting", "total_bytes", "size_of", "human"]
