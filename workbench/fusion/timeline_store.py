"""The fusion timeline on disk: a model opened before shows its snapshots without running an engine.

Every snapshot a :class:`~workbench.fusion.timeline.Timeline` computes (the run, the background warm-up
of single toggles) is written here, and every parity check found later is added to it; a timeline of the
same export opened again reads them back instead of running engine steps. Only protobuf and JSON are read
(a cache folder is user-writable: no pickle).

Layout, under ``$WORKBENCH_CACHE/timelines/`` (or ``$WORKBENCH_TIMELINE_CACHE``)::

    <base>/                      one export file, Timeline arguments and versions (see ``TimelineStore.open``)
      key.json                   what the base key was made of, for people
      input.json                 the export's snapshot: its graph, node count, detected shape parameters
      graphs/<fingerprint>.onnx  weight-free skeletons, shared by equal graphs; named by their sha1, checked on read
      weights/<k>.pb             large initializers the steps made (e.g. packed QKV), as TensorProto, each
                                 checked on read against the SHA-256 the meta.json naming it records
                                 (``weightfiles.py``); the export's own weights are read from the export file
      steps/<k>/meta.json        one snapshot, k = hash of its plan prefix ``(engine, (step, on), ...)``
      steps/<k>/parity.json      its parity, once checked
      steps/<k>/task_parity.json its answer-level parity, per text

A missing, partial or damaged entry reads as a miss (and is computed and written again); every entry is
written to a temporary name and renamed into place, so concurrent writers never leave half an entry. Each
entry names the graph it was computed from, so a chain is only read back where its links join (two
processes writing at once may leave links that do not: a step run on a skeleton read back can name things
differently from one run on the engine's in-memory model; such an entry is rebuilt once). Writes happen on
the scheduler's writer thread (:func:`workbench.fusion.disk.flush` waits; so does the exit). A failed step is never written.
``persist=False`` on the Timeline, or ``WORKBENCH_PERSIST_TIMELINE=0``, switches all of it off.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import onnx

from .. import __version__
from ..cache.identity import file_identity
from ..cache.root import cache_root
from ..errors import ConfigError
from ..graph.diff import Diff
from ..ort.parity import Parity
from ..settings import env_folder
from .disk import submit, unlink, write_entry, write_file, write_if_new
from .engine_types import StepOutcome
from .snapshot import Snapshot, fingerprint
from .snapshot_weights import WeightStore
from .weightfiles import WeightFileDamaged, read_weight, write_weight

#: Bump when what is written changes shape or meaning in a way the versions and code hash would not see.
FORMAT = 2
#: "0", "off", "false" or "no" switches persistence off (tests that need a cold run, read-only setups).
ENV_SWITCH = "WORKBENCH_PERSIST_TIMELINE"
#: Where the store lives (default: ``$WORKBENCH_CACHE/timelines``).
ENV_ROOT = "WORKBENCH_TIMELINE_CACHE"
#: The packages whose code makes the snapshots; the fusion, graph and ort code of the workbench is hashed too.
PACKAGES = ("onnx", "onnx-ir", "onnxruntime", "onnxruntime-gpu", "onnxscript")


class _Damaged(Exception):
    """An entry that cannot be used as it is (missing part, wrong hash, bad JSON)."""


def enabled(flag: bool | None = None) -> bool:
    """Whether timelines persist: ``flag`` when given, else the environment (on unless switched off)."""
    if flag is not None:
        return bool(flag)
    return os.environ.get(ENV_SWITCH, "1").strip().lower() not in ("0", "off", "false", "no")


def store_root() -> Path:
    """The folder that holds every persisted timeline."""
    return env_folder(ENV_ROOT) or cache_root() / "timelines"


_VERSIONS: dict | None = None


def versions() -> dict[str, str]:
    """Versions of the engines and of the workbench, plus a hash of the workbench code that makes snapshots.

    The code hash covers ``fusion/``, ``graph/`` and ``ort/``, so an edited
    checkout (same version number) never reads snapshots of older code.
    """
    global _VERSIONS
    if _VERSIONS is None:
        from importlib import metadata

        out = {}
        for name in PACKAGES:
            try:
                out[name] = metadata.version(name)
            except metadata.PackageNotFoundError:
                pass
        h = hashlib.sha256()
        pkg = Path(__file__).resolve().parents[1]
        for sub in ("fusion", "graph", "ort"):
            for f in sorted((pkg / sub).rglob("*.py")):
                h.update(str(f.relative_to(pkg)).encode())
                h.update(f.read_bytes())
        out["workbench"] = __version__
        out["workbench_code"] = h.hexdigest()[:16]
        _VERSIONS = out
    return dict(_VERSIONS)


def _plain(obj):
    """JSON for numpy scalars and arrays in task-parity results."""
    return obj.tolist() if hasattr(obj, "tolist") else str(obj)


def _hash(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:32]


def _plain_key(key: tuple) -> list:
    """A plan key as JSON gives it back: ``["ort", ["ort_basic", true], ...]``."""
    return json.loads(json.dumps(key))


# ---------------------------------------------------------------- one export's store
@dataclass
class InputEntry:
    """The export's snapshot as persisted: its skeleton and what was detected from the full model."""

    skeleton: onnx.ModelProto
    fingerprint: str
    hidden_size: int
    num_heads: int
    num_layers: int
    histogram: dict
    fused: dict


class TimelineStore:
    """The persisted snapshots of one export file, for one Timeline (which owns the WeightStore)."""

    def __init__(self, folder: Path, store: WeightStore):
        self.dir = folder
        self.store = store
        #: Skeletons already read or written, by fingerprint: equal graphs share one object.
        self.graphs: dict[str, onnx.ModelProto] = {}
        #: Stub keys of the export's own weights (read from the export file, never written here).
        self.input_keys: frozenset[str] = frozenset()
        #: SHA-256 of the weight files known to be on disk (written or checked by this process), by key.
        self._digests: dict[str, str] = {}
        #: Plan keys written (or found) by this process, so nothing is written twice.
        self._written: set[str] = set()

    @classmethod
    def open(cls, path: str | os.PathLike, store: WeightStore, *, num_layers=None, num_heads=None,
             hidden_size=None) -> "TimelineStore | None":
        """The store for the export at ``path``, or None when it cannot be had (unreadable file, no cache).

        The base key is the export's content hash (memoised under ``hashes/``), the
        Timeline's shape arguments, :func:`versions` and :data:`FORMAT`.
        """

        try:
            content = file_identity(Path(path))
            payload = {"format": FORMAT, "export_sha256": content,
                       "args": {"num_layers": num_layers, "num_heads": num_heads, "hidden_size": hidden_size},
                       "versions": versions()}
            folder = store_root() / _hash(payload)[:24]
            out = cls(folder, store)
            out._payload = payload
            return out
        except ConfigError:
            raise  # a setting that names an unusable folder: the user's to fix, said in one line
        except (OSError, ValueError):
            return None

    # ------------------------------------------------------------ reading
    def _read_json(self, path: Path) -> dict:
        try:
            d = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise _Damaged(str(path)) from e
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise _Damaged(str(path))
        return d

    def _graph(self, fp: str, digests: dict) -> onnx.ModelProto:
        g = self.graphs.get(fp)
        if g is None:
            g = self._read_graph(fp)
            self._check_weights(g, digests)
            self.graphs[fp] = g
        return g

    def _read_graph(self, fp: str) -> onnx.ModelProto:
        """A skeleton file, checked against its name (a damaged one is removed, so it is written again)."""
        if not isinstance(fp, str) or len(fp) != 40 or any(c not in "0123456789abcdef" for c in fp):
            raise _Damaged(f"graph name {fp!r}")
        path = self.dir / "graphs" / f"{fp}.onnx"
        try:
            data = path.read_bytes()
        except OSError as e:
            raise _Damaged(fp) from e
        g = onnx.ModelProto()
        try:
            if hashlib.sha1(data).hexdigest() != fp:
                raise _Damaged(f"graph {fp}: content does not match its name")
            g.ParseFromString(data)
        except Exception as e:  # protobuf's DecodeError and friends
            unlink(path)
            raise _Damaged(fp) from e
        return g

    def _check_weights(self, skeleton: onnx.ModelProto, digests: dict) -> None:
        """Every weight stub of ``skeleton`` is in the store, deferred from the export, or read from disk now,
        its bytes checked against ``digests`` (the SHA-256 the entry's meta records, by key); every damaged
        file is removed, so the recomputed step writes it again."""
        damaged = []
        for t in skeleton.graph.initializer:
            key = WeightStore.stub_key(t)
            if key is None or self.store.has(key):
                continue
            try:
                tensor = read_weight(self.dir / "weights" / f"{_hash(key)}.pb", key, digests.get(key))
            except WeightFileDamaged as e:
                damaged.append(str(e))
                continue
            self.store.add(key, tensor)
            self._digests[key] = digests[key]
        if damaged:
            raise _Damaged("; ".join(damaged))

    def load_input(self) -> InputEntry | None:
        """The export's persisted snapshot, or None (first open, or a damaged entry)."""
        try:
            d = self._read_json(self.dir / "input.json")
            fp = d["graph"]
            skel = self._read_graph(fp)
            entry = InputEntry(skel, fp, int(d["hidden_size"]), int(d["num_heads"]), int(d["num_layers"]),
                               dict(d["histogram"]), dict(d["fused"]))
        except Exception:  # noqa: BLE001 - whatever is wrong with it, the export is read instead
            return None
        self.graphs[fp] = skel
        self.input_keys = frozenset(k for k in map(WeightStore.stub_key, skel.graph.initializer) if k)
        return entry

    def load(self, key: tuple, prev: Snapshot) -> tuple[Snapshot, StepOutcome] | None:
        """The snapshot of plan prefix ``key`` after ``prev``, with the step's outcome, or None.

        A damaged entry is removed, so the snapshot computed instead is written again.
        """
        k = _hash(_plain_key(key))
        folder = self.dir / "steps" / k
        if not (folder / "meta.json").is_file():
            return None
        try:
            d = self._read_json(folder / "meta.json")
            if d["key"] != _plain_key(key) or d["prev"] != fingerprint(prev):
                raise _Damaged("key")
            skel = prev.skeleton if d["graph"] == d["prev"] else self._graph(d["graph"], dict(d["weights"]))
            diff = Diff(**{f: d["diff"][f] for f in ("removed", "added", "provenance", "layer_of", "rewired")})
            snap = Snapshot(step=d["step"], engine=d["engine"], skeleton=skel, nodes=int(d["nodes"]),
                            histogram=dict(d["histogram"]), fused=dict(d["fused"]), elapsed_s=float(d["elapsed_s"]),
                            diff=diff, counts=dict(d["counts"]), messages=list(d["messages"]), key=key,
                            store=self.store, chain=dict(d["chain"]))
            if snap.nodes != len(skel.graph.node):
                raise _Damaged("node count")
            snap.base_diagnostic = snap.diagnostic = d["diagnostic"]
            snap.fingerprint = d["graph"]
            snap.reused = bool(d.get("reused", False))
            snap.persisted = True
            out = d["outcome"]
            outcome = StepOutcome(None, dict(snap.counts), list(snap.messages), list(out["notes"]), str(out["skipped"]))
            snap.skipped = outcome.skipped
            snap.parity = self._parity(folder)
        except (_Damaged, KeyError, TypeError, ValueError, AttributeError):
            shutil.rmtree(folder, ignore_errors=True)
            return None
        self._written.add(k)
        return snap, outcome

    def _parity(self, folder: Path) -> Parity | None:
        try:
            d = json.loads((folder / "parity.json").read_text())
            p = d["parity"]
            return Parity(float(p["max_abs_diff"]), float(p["cosine"]), bool(p["ok"]), int(p["cases"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def task_parity(self, snap: Snapshot, text_id: str) -> dict | None:
        """The answer-level parity stored for ``snap`` on the text ``text_id``, or None."""
        if not snap.key:
            return None
        try:
            d = json.loads((self.dir / "steps" / _hash(_plain_key(snap.key)) / "task_parity.json").read_text())
            found = d.get(text_id)
            return found if isinstance(found, dict) else None
        except (OSError, ValueError, AttributeError):
            return None

    # ------------------------------------------------------------ writing (on the writer thread)
    def save_input(self, snap: Snapshot, *, hidden_size: int, num_heads: int, num_layers: int) -> None:
        """Write the export's snapshot (its skeleton and detected shape parameters)."""
        self.input_keys = frozenset(k for k in map(WeightStore.stub_key, snap.skeleton.graph.initializer) if k)

        def job():
            fp = self._write_graph(snap)
            d = {"format": FORMAT, "graph": fp, "hidden_size": hidden_size, "num_heads": num_heads,
                 "num_layers": num_layers, "histogram": snap.histogram, "fused": snap.fused}
            write_file(self.dir / "key.json", json.dumps(self._payload, indent=1).encode())
            write_file(self.dir / "input.json", json.dumps(d).encode())

        submit(job)

    def save(self, snap: Snapshot, prev: Snapshot, outcome: StepOutcome) -> None:
        """Queue ``snap`` (computed after ``prev``) for writing, unless it is on disk already."""
        k = _hash(_plain_key(snap.key))
        if k in self._written:
            return
        self._written.add(k)
        notes, skipped = list(outcome.notes), outcome.skipped

        def job():
            if (self.dir / "steps" / k / "meta.json").is_file():
                return
            fp = self._write_graph(snap)
            d = {"format": FORMAT, "key": _plain_key(snap.key), "prev": fingerprint(prev), "graph": fp,
                 "weights": self._write_weights(snap.skeleton),
                 "step": snap.step, "engine": snap.engine, "nodes": snap.nodes, "histogram": snap.histogram,
                 "fused": snap.fused, "elapsed_s": snap.elapsed_s, "diff": snap.diff.to_dict(),
                 "diagnostic": snap.base_diagnostic, "counts": snap.counts, "messages": snap.messages,
                 "chain": snap.chain, "reused": snap.reused, "outcome": {"notes": notes, "skipped": skipped}}
            files = {"meta.json": json.dumps(d).encode()}
            if snap.parity is not None:
                files["parity.json"] = json.dumps({"parity": snap.parity.to_dict()}).encode()
            write_entry(self.dir / "steps" / k, files)

        submit(job)

    def save_parity(self, snap: Snapshot) -> None:
        """Queue ``snap``'s parity for writing beside its entry."""
        parity = snap.parity
        if not snap.key or parity is None:
            return
        folder = self.dir / "steps" / _hash(_plain_key(snap.key))

        def job():
            if (folder / "meta.json").is_file():
                write_file(folder / "parity.json", json.dumps({"parity": parity.to_dict()}).encode())

        submit(job)

    def save_task_parity(self, snap: Snapshot, text_id: str) -> None:
        """Queue ``snap``'s answer-level parity on the text ``text_id`` for writing."""
        result = snap.task_parity
        if not snap.key or result is None:
            return
        folder = self.dir / "steps" / _hash(_plain_key(snap.key))

        def job():
            if not (folder / "meta.json").is_file():
                return
            try:
                d = json.loads((folder / "task_parity.json").read_text())
                d = d if isinstance(d, dict) else {}
            except (OSError, ValueError):
                d = {}
            d[text_id] = result
            write_file(folder / "task_parity.json", json.dumps(d, default=_plain).encode())

        submit(job)

    def _write_graph(self, snap: Snapshot) -> str:
        data = snap.skeleton.SerializeToString(deterministic=True)
        fp = hashlib.sha1(data).hexdigest()
        if not snap.fingerprint:
            snap.fingerprint = fp
        self.graphs.setdefault(fp, snap.skeleton)
        write_if_new(self.dir / "graphs" / f"{fp}.onnx", data)
        return fp

    def _write_weights(self, skeleton: onnx.ModelProto) -> dict[str, str]:
        """Write the large initializers a step made (the export's own stay in the export file); their SHA-256
        by key, for the entry's meta."""
        digests = {}
        for t in skeleton.graph.initializer:
            key = WeightStore.stub_key(t)
            if key is None or key in self.input_keys:
                continue
            if key not in self._digests:
                tensor = self.store.get(key)
                if tensor is None:
                    raise _Damaged(f"weight {key} is not in the store")
                path = self.dir / "weights" / f"{_hash(key)}.pb"
                self._digests[key] = write_weight(path, tensor.SerializeToString())
            digests[key] = self._digests[key]
        return digests
