"""Models in the cache, each weight stored once.

Every export of one source model (any exporter, opset, attention or head) and every model built from them
(fused, int8, guarded, ...) lives in one folder, ``<cache>/models/<group>/``, and keeps its weights there as
ONNX external data, one file per tensor named by its content::

    models/<group>/
      weights/<sha256>.bin         a tensor's bytes, written once, read by every graph here that holds it
      export-<key>.onnx            an export's graph (tensors of at least SHARE_BYTES point into weights/)
      export-<key>.json            its meta; written last, so an entry is complete when its meta exists
      variant-<key>.onnx / .json   a model built from an export, and its origin
      variant-<key>.<name>         files the build wrote beside it (a search report, ...): :func:`sidecar`
      variant-<key>/               a build that is no ONNX model (an OpenVINO IR), kept whole

So a second exporter or opset of the same model adds only its graph, a fused variant only the tensors the
fusions made (packed QKV), and the folder still is plain ONNX: ``onnx.load``, ONNX Runtime and OpenVINO read
any graph in it, ``cp -a`` and ``rsync -a`` copy it whole. (Hard links across folders would share weights
too, but ``onnx`` refuses external data with more than one link, as a guard against link attacks.)

Nothing is handed out unchecked: :func:`find` checks an entry's own files against the SHA-256 its meta
records and every weights file its graph reads against its name (:mod:`workbench.cache.integrity`: hashed once per
process), removes what is damaged so that the caller builds the entry again, and says in one line what it
cannot remove; :func:`publish` writes again a weights file that is damaged instead of keeping it.

A writer leases its entry (``exports/<key>``, ``variants/<key>``) and the group (``models/<group>``) before it
writes; ``workbench cache prune`` removes an entry's own files and then the weight files no graph of the
group reads any more, never in a group a live process holds (:func:`unused_weights`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

import onnx
from onnx import numpy_helper
from onnx.external_data_helper import _get_all_tensors

from ..errors import CacheDamagedError
from ..modelio import external_tensors, load_model
from . import integrity
from .atomic import atomic_write_bytes, atomic_write_text
from .identity import file_identity
from .kinds import BY_NAME
from .root import cache_entry, cache_root, storing

#: Tensors at least this large are stored once in ``weights/``; smaller ones stay in the graph file.
SHARE_BYTES = 64 * 1024
WEIGHTS_DIR = "weights"
#: The key of an entry's meta that records the SHA-256 of each of its own files (graph, side files).
SHA256 = "sha256"
_WEIGHT_NAME = re.compile(rf"{WEIGHTS_DIR}/([0-9a-f]{{64}})\.bin")
#: The cache kind (folder) of the groups, and each entry kind's file prefix inside a group.
KIND = "models"
PREFIX = {"exports": "export", "variants": "variant"}


def group_of(identity: str) -> str:
    """The group of a source model's identity (``ModelSource.identity``) or a file's content hash."""
    return hashlib.sha256(f"group|{identity}".encode()).hexdigest()[:24]


def group_of_model(path: Path) -> str:
    """The group a model built from ``path`` belongs to: ``path``'s own group when it lies in one, else the
    group of its content (a user's ``.onnx`` file)."""
    path = Path(path)
    try:
        if path.parent.parent.resolve() == _folder().resolve():
            return path.parent.name
    except OSError:
        pass

    return group_of(file_identity(path))


def _folder() -> Path:
    return cache_root() / KIND


def open_group(group: str) -> Path:
    """``<cache>/models/<group>``, leased to this process (its weights are never collected while it lives)."""
    folder = cache_entry(KIND, group)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def paths(kind: str, key: str, group: str) -> tuple[Path, Path]:
    """``(graph, meta)`` of entry ``kind``/``key`` in ``group`` (``kind``: "exports" or "variants")."""
    stem = f"{PREFIX[kind]}-{key}"
    folder = _folder() / group
    return folder / f"{stem}.onnx", folder / f"{stem}.json"


def find(kind: str, key: str, group: str, name: str = "model.onnx") -> tuple[Path, dict] | None:
    """The stored file and meta of a complete, intact entry (leased and marked used now), or None.

    Every file the entry is made of is checked first (:func:`damage`): a damaged one is removed (so the caller
    builds the entry again) and None returned; one that cannot be removed raises.

    ``name``: ``model.onnx`` gives the entry's graph; another name, the file of that name in an entry kept
    whole in its folder (:func:`publish` of a build that is no ONNX model).

    Raises:
        CacheDamagedError: a file of the entry is damaged and cannot be removed here (a read-only cache, a
            folder in a file's place): one line naming it and what to do.
    """
    cache_entry(kind, key)
    graph, meta = paths(kind, key, group)
    target = graph if name.endswith(".onnx") else graph.with_suffix("") / name
    try:
        doc = json.loads(meta.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or not target.is_file():
        return None
    problems = damage(graph, doc)
    if problems:
        _clear_damage(graph, meta, problems)
        return None
    try:
        os.utime(meta)
    except OSError:
        pass
    return target, doc


def sidecar(model_path: Path, name: str) -> Path:
    """A file a build wrote beside ``model_path`` (``variant-<key>.<name>`` next to ``variant-<key>.onnx``)."""
    model_path = Path(model_path)
    return model_path.with_name(f"{model_path.stem}.{name}")


def publish(model: Path, *, kind: str, key: str, group: str, meta: dict) -> Path:
    """Store the build at ``model`` as entry ``kind``/``key`` of ``group`` and return the stored file's path.

    An ONNX model (weights inside it or beside it) has its large tensors moved into ``weights/`` (those
    already there are not written again), its graph stored, the other files of its folder kept as side files;
    anything else (an OpenVINO IR) is kept whole: its folder's files move into ``<stem>/``. The meta comes
    last, after every file was checked (an earlier meta of the entry goes first, so a publish that fails
    leaves an incomplete entry, never used; its own files are removed). The source is only read or moved out
    of its temporary folder; the caller removes that folder.

    Raises:
        OutputPathError: the cache cannot be written (read-only, full): one line naming it.
    """
    cache_entry(kind, key)
    graph, meta_path = paths(kind, key, group)
    what = (f"the export of {(meta.get('model') or {}).get('name') or 'the model'}" if kind == "exports"
            else f"a model built from an export ({meta.get('recipe', 'variant')})")
    with storing(what):
        folder = open_group(group)
        meta_path.unlink(missing_ok=True)
        try:
            return _store(model, folder, graph, meta_path, meta)
        except BaseException:
            for f in [graph, *(p for p in graph.parent.glob(f"{graph.stem}.*") if p != meta_path)]:
                f.unlink(missing_ok=True)
            shutil.rmtree(graph.with_suffix(""), ignore_errors=True)
            raise


def _store(model: Path, folder: Path, graph: Path, meta_path: Path, meta: dict) -> Path:
    own: dict[str, str] = {}  # the entry's own files (relative to the group) and their SHA-256
    if model.suffix == ".onnx":
        stored = _externalize(load_model(model, check=False, check_runtime=False), folder)
        own[graph.name] = _atomic_bytes(graph, stored.SerializeToString())
        data_files = {model.name} | _data_files(model)
        for f in sorted(model.parent.iterdir()):
            if f.is_file() and f.name not in data_files:
                side = sidecar(graph, f.name)
                own[side.name] = _atomic_bytes(side, f.read_bytes())
        out = graph
    else:
        whole = graph.with_suffix("")
        shutil.rmtree(whole, ignore_errors=True)  # an earlier copy of the same build (same key, same content)
        shutil.copytree(model.parent, whole)
        for f in sorted(p for p in whole.rglob("*") if p.is_file()):
            own[f.relative_to(folder).as_posix()] = integrity.sha256_of(f)
            integrity.mark_checked(f)
        out = whole / model.name
    doc = {**meta, SHA256: own}
    problems = damage(graph, doc)  # what is kept is what was checked: every file, and every weight it reads
    if problems:
        raise CacheDamagedError(_damage_line(graph, problems, "it changed while it was stored"))
    atomic_write_text(meta_path, json.dumps(doc, indent=1, default=str))
    return out


def _data_files(model: Path) -> set[str]:
    return set(_reads(model))


def _reads(model: Path) -> dict[str, int | None]:
    """The external data files the graph at ``model`` reads, with the bytes it reads from each (None: unknown)."""
    out: dict[str, int | None] = {}
    for t in external_tensors(onnx.load(str(model), load_external_data=False)):
        info = {e.key: e.value for e in t.external_data}
        loc = info.get("location", "")
        try:
            length = int(info["length"]) + int(info.get("offset") or 0)
        except (KeyError, ValueError):
            length = None
        prev = out.get(loc, 0)
        out[loc] = None if prev is None or length is None else max(prev, length)
    return out


def _externalize(model: onnx.ModelProto, folder: Path) -> onnx.ModelProto:
    """``model`` (modified in place) with each large tensor in ``folder/weights/<sha256>.bin``."""
    for t in _get_all_tensors(model):
        data = _raw(t)
        if data is None or len(data) < SHARE_BYTES:
            continue
        digest = hashlib.sha256(data).hexdigest()
        rel = f"{WEIGHTS_DIR}/{digest}.bin"
        target = folder / rel
        why = integrity.file_problem(target, digest, len(data))
        if why is not None:  # missing or damaged: written (again)
            if why != integrity.MISSING:
                integrity.clear(target)
                integrity.note_repair(target, why)
            _atomic_bytes(target, data)
        for name in ("raw_data", "float_data", "int32_data", "int64_data", "double_data", "uint64_data"):
            t.ClearField(name)
        t.data_location = onnx.TensorProto.EXTERNAL
        del t.external_data[:]
        for k, v in (("location", rel), ("offset", "0"), ("length", str(len(data)))):
            e = t.external_data.add()
            e.key, e.value = k, v
    return model


def _raw(t: onnx.TensorProto) -> bytes | None:
    """The tensor's bytes as external data stores them (little-endian), or None when it cannot move out."""
    if t.data_type == onnx.TensorProto.STRING or t.data_location == onnx.TensorProto.EXTERNAL:
        return None
    if t.HasField("raw_data"):
        return t.raw_data

    return numpy_helper.from_array(numpy_helper.to_array(t)).raw_data


def _atomic_bytes(path: Path, data: bytes) -> str:
    """Write through a temporary file and a rename (no fsync: a cache entry lost to a crash is rebuilt); return
    the SHA-256 of what was written (the file counts as checked in this process)."""
    atomic_write_bytes(path, data, durable=False)
    integrity.mark_checked(path)
    return hashlib.sha256(data).hexdigest()


def staging(group: str, what: str = "a model built from an export") -> Path:
    """A temporary folder for a writer of ``group`` (``<cache>/models/.<group>.tmp-XXXXXXXX``), after the group's
    lease: the clean-up of dead writers' debris never takes a live writer's.

    Raises:
        OutputPathError: the cache cannot be written (read-only, full): one line naming it and ``what``.
    """
    with storing(what):
        open_group(group)
        return Path(tempfile.mkdtemp(dir=_folder(), prefix=f".{group}.tmp-"))


def read_files(graph: Path) -> set[str]:
    """The weight files (relative to the group) that the graph at ``graph`` reads."""
    try:
        return {loc for loc in _data_files(graph) if loc}
    except Exception:  # a damaged graph holds nothing: its weights may go
        return set()


def entry_files(graph: Path) -> list[Path]:
    """An entry's own files: its graph, meta, side files and the folder of a build kept whole (not the
    weights it shares)."""
    stem = graph.stem
    own = [p for p in graph.parent.iterdir() if p.is_file() and (p.name.startswith(stem + "."))]
    whole = graph.with_suffix("")
    if whole.is_dir() and not whole.is_symlink():
        own += [Path(d) / n for d, _, names in os.walk(whole) for n in names]
    return own


def unused_weights(folder: Path) -> list[Path]:
    """Weight files of a group folder that no graph in it reads."""
    used: set[str] = set()
    for g in folder.glob("*.onnx"):
        used |= read_files(g)
    return [p for p in (folder / WEIGHTS_DIR).glob("*.bin")
            if f"{WEIGHTS_DIR}/{p.name}" not in used and BY_NAME[KIND].owns_file(f"{WEIGHTS_DIR}/{p.name}")]


def damage(graph: Path, meta: dict) -> list[tuple[Path, str]]:
    """What is wrong with the files of the entry whose graph is ``graph`` (meta ``meta``): each own file against
    the SHA-256 its meta records (entries written before that was recorded: not checked), then every weights
    file the graph reads against its name. Empty when the entry is whole."""
    folder, stem = graph.parent, graph.stem
    own = meta.get(SHA256) or {}
    if not isinstance(own, dict):
        return [(graph.with_suffix(".json"), "records no readable list of its files")]
    for rel, digest in own.items():
        parts = str(rel).split("/")
        if not (parts[0] == graph.name or parts[0].startswith(stem + ".") or parts[0] == stem) or ".." in parts:
            return [(graph.with_suffix(".json"), f"names {rel!r}, not a file of its entry")]
        why = integrity.file_problem(folder / rel, str(digest))
        if why:
            return [(folder / rel, why)]
    if not graph.is_file():
        return []  # a build kept whole in its folder: its files are all its own
    try:
        reads = _reads(graph)
    except Exception:
        return [(graph, "cannot be read as an ONNX graph")]
    problems = []
    for loc, size in sorted(reads.items()):
        m = _WEIGHT_NAME.fullmatch(loc)
        if m is None:
            return [(graph, f"reads {loc!r}, which is not a weights file of its folder")]
        why = integrity.file_problem(folder / loc, m.group(1), size)
        if why:
            problems.append((folder / loc, why))
    return problems


def damaged_entries(root: Path) -> list[tuple[Path, Path, str]]:
    """``(graph, damaged file, what is wrong)`` for every complete entry of the models in the cache folder
    ``root`` whose files are not what was written (:func:`damage`); nothing is changed (``prepare --check``)."""
    out = []
    for group in sorted(p for p in (Path(root) / KIND).glob("*") if p.is_dir() and not p.is_symlink()):
        for meta_path in sorted(group.glob("*.json")):
            try:
                meta = json.loads(meta_path.read_text())
            except (OSError, ValueError):
                continue
            if isinstance(meta, dict) and meta_path.stem.split("-")[0] in PREFIX.values():
                out += [(meta_path.with_suffix(".onnx"), f, why) for f, why in damage(meta_path.with_suffix(".onnx"),
                                                                                      meta)]
    return out


def _damage_line(graph: Path, problems: list[tuple[Path, str]], why: str) -> str:
    path, what = problems[0]
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return (f"the cache entry {graph.name} in {graph.parent} is damaged: {path.relative_to(graph.parent)} "
            f"{what}{more}; {why}: remove it (or run `workbench cache prune --all`) and run again, or point "
            f"WORKBENCH_CACHE at another folder")


def _clear_damage(graph: Path, meta: Path, problems: list[tuple[Path, str]]) -> None:
    """Remove what is damaged (a weights file, or the entry's meta when its own files are), so that the entry is
    built again; raises :class:`CacheDamagedError` when that cannot be done here."""
    try:
        for path, what in problems:
            weights = path.parent.name == WEIGHTS_DIR and path.parent.parent == graph.parent
            integrity.clear(path if weights else meta)  # an entry without its meta is incomplete: built again
            integrity.note_repair(path, what)
    except CacheDamagedError:
        raise
    except OSError as e:
        raise CacheDamagedError(_damage_line(graph, problems, f"it cannot be removed here ({e.strerror})")) from e


__all__ = ["SHARE_BYTES", "WEIGHTS_DIR", "SHA256", "KIND", "group_of", "group_of_model", "open_group", "paths",
           "find", "sidecar", "publish", "staging", "read_files", "entry_files", "unused_weights", "damage",
           "damaged_entries"]
