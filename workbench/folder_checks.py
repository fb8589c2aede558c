"""The files a model folder names, checked before anything reads them (one line naming the file).

- Every file a model folder names stays inside it: the shards a ``model.safetensors.index.json`` lists
  (no absolute paths, no ``..``, no symlink leading out) and the files the loaders read (weights, JSON,
  tokenizer files) when they are symlinks.
- A sentence-transformers ``modules.json`` is a list of module objects (a save copies the folders it names),
  refused when the folder is opened rather than after a tune's minutes of work.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from .checks import require_regular_file
from .errors import ModelSourceError

#: The largest shard index read (a real one lists a few thousand tensor names).
MAX_INDEX_BYTES = 100 * 1024 * 1024
#: The safetensors index transformers follows to a sharded checkpoint's files.
SAFETENSORS_INDEX = "model.safetensors.index.json"
#: Suffixes of the files the loaders read from a model folder (weights, configs, tokenizers).
_READ_SUFFIXES = (".safetensors", ".json", ".txt", ".model", ".jinja")


def inside_folder(folder: Path, target: Path) -> bool:
    """True when ``target``, symlinks followed, lies inside ``folder`` (or, for a Hugging Face hub snapshot
    folder ``…/snapshots/<rev>``, in that repository's own ``blobs/``, where the hub's links point)."""
    root = folder.resolve()
    roots = [root] + ([root.parent.parent / "blobs"] if root.parent.name == "snapshots" else [])
    real = target.resolve()
    return any(real == r or r in real.parents for r in roots)


def model_files(folder: Path) -> list[Path]:
    """The weight files a Hugging Face folder's checkpoint consists of, each checked to lie inside the folder.

    The ``*.safetensors`` files at its top and every shard ``model.safetensors.index.json`` lists; any file
    the loaders read (weights, JSON, tokenizer files) that is a symlink must resolve inside the folder too.

    Raises:
        ModelSourceError: an index that is not a JSON object with a ``weight_map``, a shard named by an
            absolute path or through ``..``, a missing shard, a symlink that leads out of the folder.
    """
    files = sorted(folder.glob("*.safetensors"))
    index = folder / SAFETENSORS_INDEX
    if index.exists() or index.is_symlink():
        files += [s for s in _index_shards(folder, index) if s not in files]
    for p in [*files, *sorted(folder.iterdir())]:
        if p.suffix in _READ_SUFFIXES and (p.is_symlink() or p.parent != folder) and not inside_folder(folder, p):
            raise ModelSourceError(f"{p} leads to {p.resolve()}, outside the model's folder {folder}; refused "
                                   f"(a model may only name files inside its own folder)")
    return files


def _index_shards(folder: Path, index: Path) -> list[Path]:
    require_regular_file(index)
    if not inside_folder(folder, index):
        raise ModelSourceError(f"{index} leads to {index.resolve()}, outside the model's folder; refused")
    if index.stat().st_size > MAX_INDEX_BYTES:
        raise ModelSourceError(f"{index} is {index.stat().st_size:,} bytes: too large for a shard index")
    try:
        doc = json.loads(index.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ModelSourceError(f"{index} is not readable JSON ({type(e).__name__})") from None
    wmap = doc.get("weight_map") if isinstance(doc, dict) else None
    if not isinstance(wmap, dict) or not all(isinstance(v, str) and v for v in wmap.values()):
        raise ModelSourceError(f"{index} is not a shard index: it needs a \"weight_map\" of tensor names to file "
                               f"names")
    shards = []
    for name in dict.fromkeys(wmap.values()):
        if os.path.isabs(name) or ".." in Path(name).parts or "\\" in name:
            raise ModelSourceError(f"{index} names the shard {name!r}, outside the model's folder; refused "
                                   f"(a model may only name files inside its own folder)")
        shard = folder / name
        if not inside_folder(folder, shard):
            raise ModelSourceError(f"{index} names the shard {name!r}, which leads to {shard.resolve()}, outside "
                                   f"the model's folder; refused")
        if not shard.is_file():
            raise ModelSourceError(f"{index} names the shard {name!r}, which is not in {folder}")
        shards.append(shard)
    return shards


def st_modules(folder: Path) -> list[dict]:
    """A sentence-transformers folder's ``modules.json`` entries ([] when it has none), checked when the folder is
    opened: a list of objects whose ``path`` is a folder name inside it (a save copies those folders).

    Raises:
        ModelSourceError: one line naming the file and what is wrong in it.
    """
    path = folder / "modules.json"
    if not os.path.lexists(path):
        return []
    require_regular_file(path)
    if path.stat().st_size > 1_000_000:
        raise ModelSourceError(f"{path} is larger than 1 MB; a modules.json lists a few modules")
    try:
        doc = json.loads(path.read_bytes().decode("utf-8-sig"))
    except ValueError as e:  # UnicodeDecodeError too
        raise ModelSourceError(f"{path} is not JSON: {e}") from None
    if not isinstance(doc, list):
        raise ModelSourceError(f"{path} must be a list of modules, not {type(doc).__name__}")
    for i, m in enumerate(doc):
        if not isinstance(m, dict) or not isinstance(m.get("path", ""), str):
            raise ModelSourceError(f"{path}: entry {i} is {json.dumps(m)[:60]}; each module must be an object "
                                   f"with a \"path\" (a folder name) and a \"type\", as sentence-transformers writes")
    return doc


__all__ = ["inside_folder", "model_files", "st_modules", "SAFETENSORS_INDEX"]
