"""The one place that loads and saves ONNX models.

Loading checks, in this order, so each failure gets its own clear line:
the path (exists, a file, readable, not empty), the bytes (a protobuf
ModelProto and not an image or text), external data (kept inside the model's
own folder, present, offsets inside the data file), versions (IR and opsets
against the installed onnxruntime, and contrib ops it knows), then
``onnx.checker`` with full shape checks.

Saving is atomic (temporary file, then rename), refuses to overwrite the file
a model was read from, and moves weights to external data past 2 GB.
"""

from __future__ import annotations

import functools
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Iterable

import onnx
from onnx import external_data_helper
from onnx import helper as h

from .errors import ModelIOError, OutputPathError, first_line
from .path_checks import check_output_path

#: protobuf's hard limit is 2 GiB; keep a margin for the graph itself.
EXTERNAL_DATA_THRESHOLD = 1_900_000_000
CONTRIB_DOMAINS = ("com.microsoft", "com.microsoft.nchwc", "com.microsoft.experimental")

_MAGIC = {
    b"\x89PNG": "a PNG image",
    b"\xff\xd8\xff": "a JPEG image",
    b"GIF8": "a GIF image",
    b"%PDF": "a PDF document",
    b"PK\x03\x04": "a zip archive (a PyTorch checkpoint?)",
    b"\x80\x02": "a Python pickle",
    b"\x80\x04": "a Python pickle",
}



# ---------------------------------------------------------------- versions
@functools.lru_cache(maxsize=1)
def runtime_limits() -> dict:
    """What the installed onnxruntime accepts, found by asking it.

    Returns ``{"version": str, "max_ir": int, "max_opset": int, "contrib_ops": set}``.
    Probing tiny models is exact where a hand-kept table goes stale.
    """
    import onnxruntime as ort

    def accepts(ir: int, opset: int) -> bool:
        g = h.make_graph([h.make_node("Identity", ["x"], ["y"])], "probe",
                         [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])],
                         [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])])
        m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
        m.ir_version = ir
        try:
            ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
            return True
        except Exception:
            return False

    def highest(lo: int, hi: int, ok) -> int:
        while lo < hi:  # invariant: ok(lo)
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if ok(mid) else (lo, mid - 1)
        return lo

    max_ir = highest(7, 40, lambda ir: accepts(ir, 13))
    max_opset = highest(13, 60, lambda op: accepts(7, op))
    try:
        from onnxruntime.capi import onnxruntime_pybind11_state as C
        contrib = {(s.domain, s.name) for s in C.get_all_operator_schema() if s.domain in CONTRIB_DOMAINS}
    except Exception:  # an onnxruntime build without the schema API
        contrib = None
    return {"version": ort.__version__, "max_ir": max_ir, "max_opset": max_opset, "contrib_ops": contrib}


def check_runtime_compat(model: onnx.ModelProto, where: str = "model") -> None:
    """Raise ModelIOError if the installed onnxruntime cannot run ``model``."""
    lim = runtime_limits()
    if model.ir_version > lim["max_ir"]:
        raise ModelIOError(
            f"{where} has IR version {model.ir_version}, but the installed onnxruntime "
            f"{lim['version']} supports at most IR version {lim['max_ir']}")
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx") and imp.version > lim["max_opset"]:
            raise ModelIOError(
                f"{where} uses ai.onnx opset {imp.version}, but the installed onnxruntime "
                f"{lim['version']} supports at most opset {lim['max_opset']}")
    known = lim["contrib_ops"]
    if known is not None:
        local_funcs = {(f.domain, f.name) for f in model.functions}
        for node in _all_nodes(model.graph):
            key = (node.domain, node.op_type)
            if node.domain in CONTRIB_DOMAINS and key not in known and key not in local_funcs:
                raise ModelIOError(
                    f"{where} uses {node.domain}:{node.op_type} (node {node.name or '?'}), an operator the "
                    f"installed onnxruntime {lim['version']} does not know")


def _all_nodes(graph: onnx.GraphProto):
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _all_nodes(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    yield from _all_nodes(g)


# ---------------------------------------------------------------- loading
def _sniff(data: bytes, path: Path) -> None:
    for magic, what in _MAGIC.items():
        if data.startswith(magic):
            raise ModelIOError(f"{path} is {what}, not an ONNX model")
    head = data[:512]
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        return
    # A model proto starts with field tags (0x08 ir_version, 0x12 ...), never printable prose.
    if text and all(c.isprintable() or c in "\r\n\t" for c in text):
        raise ModelIOError(f"{path} is a text file, not an ONNX model")


def external_tensors(model: onnx.ModelProto) -> list[onnx.TensorProto]:
    return [t for t in external_data_helper._get_all_tensors(model)
            if t.data_location == onnx.TensorProto.EXTERNAL]


def _check_external(model: onnx.ModelProto, folder: Path, path: Path) -> None:
    """Every external-data reference must resolve to a file inside ``folder``."""
    root = folder.resolve()
    for t in external_tensors(model):
        info = {e.key: e.value for e in t.external_data}
        loc = info.get("location", "")
        if not loc:
            raise ModelIOError(f"{path}: tensor {t.name!r} says its data is external but names no file")
        rel = Path(loc)
        if rel.is_absolute() or loc.startswith(("/", "\\")) or (len(loc) > 1 and loc[1] == ":"):
            raise ModelIOError(f"{path}: tensor {t.name!r} points to an absolute path ({loc}); refused")
        if ".." in rel.parts or ".." in loc.replace("\\", "/").split("/"):
            raise ModelIOError(f"{path}: tensor {t.name!r} points outside the model's folder ({loc}); refused")
        target = folder / rel
        # Resolve symlinks at every level: the final file must still be inside the folder.
        real = target.resolve()
        if root != real and root not in real.parents:
            raise ModelIOError(
                f"{path}: tensor {t.name!r} data file {loc} is a link that leaves the model's folder; refused")
        if not real.is_file():
            raise ModelIOError(f"{path}: tensor {t.name!r} needs external data file {loc}, which is missing")
        size = real.stat().st_size
        try:
            offset = int(info.get("offset", 0) or 0)
            length = int(info["length"]) if "length" in info else size - offset
        except ValueError as e:
            raise ModelIOError(f"{path}: tensor {t.name!r} has a non-numeric external data offset/length") from e
        if offset < 0 or length < 0 or offset + length > size:
            raise ModelIOError(
                f"{path}: tensor {t.name!r} reads bytes {offset}..{offset + length} of {loc}, "
                f"which has only {size} bytes (truncated data file?)")


def _read_model_bytes(p: Path) -> bytes:
    """The bytes of the file ``p``; a missing, unreadable, non-regular or empty file is one line."""
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise ModelIOError(f"{p}: no such file") from None
    except PermissionError:
        raise ModelIOError(f"{p}: permission denied (cannot reach the file)") from None
    except OSError as e:
        raise ModelIOError(f"{p}: cannot read: {first_line(e)}") from e
    if stat.S_ISDIR(st.st_mode):
        raise ModelIOError(f"{p} is a directory, not an ONNX file")
    if not stat.S_ISREG(st.st_mode):
        raise ModelIOError(f"{p} is not a regular file")
    try:
        with open(p, "rb") as f:
            data = f.read()
    except PermissionError as e:
        raise ModelIOError(f"{p}: permission denied (cannot read the file)") from e
    except OSError as e:
        raise ModelIOError(f"{p}: cannot read: {first_line(e)}") from e
    if not data:
        raise ModelIOError(f"{p} is empty (0 bytes), not an ONNX model")
    return data


def _parse_model_file(p: Path) -> onnx.ModelProto:
    """Parse the file ``p`` as an ONNX model with an IR version, a graph and an opset (not yet checked)."""
    data = _read_model_bytes(p)
    _sniff(data, p)
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except Exception as e:  # google.protobuf DecodeError and friends
        raise ModelIOError(f"{p} is not a valid ONNX model (protobuf parse failed: truncated or corrupt file)") from e
    del data
    if model.ir_version <= 0 or not model.HasField("graph"):
        raise ModelIOError(f"{p} is not an ONNX model (no IR version or no graph)")
    if not model.opset_import:
        raise ModelIOError(f"{p} declares no opset; not a usable ONNX model")
    return model


def load_model(path: str | os.PathLike, *, full_check: bool = True, check: bool = True,
               load_external_data: bool = True, check_runtime: bool = True) -> onnx.ModelProto:
    """Load and check an ONNX model.

    Args:
        path: the ``.onnx`` file. External data is only read from its folder.
        full_check: let ``onnx.checker`` run shape inference too (seconds on bert-base).
        check: run ``onnx.checker`` at all (graph structure: cycles, SSA, undeclared inputs).
        load_external_data: read external tensors into memory.
        check_runtime: check IR version, opsets and contrib ops against onnxruntime.

    Raises:
        ModelIOError: one line saying what is wrong with the file.
    """
    p = Path(path).expanduser()
    model = _parse_model_file(p)
    has_external = bool(external_tensors(model))
    if has_external:
        _check_external(model, p.parent, p)
    if check_runtime:
        check_runtime_compat(model, str(p))
    if check:
        try:
            # By path: the checker reads the file in C++; given the proto, onnx first serializes it
            # again in Python (bert-base's 440 MB: about twice the time).
            onnx.checker.check_model(str(p), full_check=full_check)
        except Exception as e:
            raise ModelIOError(f"{p} is not a valid ONNX graph: {first_line(e)}") from e
    if has_external and load_external_data:
        try:
            external_data_helper.load_external_data_for_model(model, str(p.parent))
        except Exception as e:
            raise ModelIOError(f"{p}: cannot read external data: {first_line(e)}") from e
    return model


# ---------------------------------------------------------------- saving
def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve() or (a.exists() and b.exists() and os.path.samefile(a, b))
    except OSError:
        return False


def _write_atomically(model: onnx.ModelProto, dest: Path, external_data: bool) -> None:
    """Write ``model`` in a temporary folder beside ``dest``, then move it (and its ``.data``) into place."""
    data_name = dest.name + ".data"
    data_dest = dest.parent / data_name
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmpdir = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}.tmp-"))
    except OSError as e:
        raise ModelIOError(f"could not write {dest}: {e.strerror or first_line(e)}") from None
    try:
        tmp_model = tmpdir / dest.name
        if external_data:
            copy = onnx.ModelProto()
            copy.CopyFrom(model)  # onnx.save moves tensor bytes out of the proto it is given
            onnx.save_model(copy, str(tmp_model), save_as_external_data=True,
                            all_tensors_to_one_file=True, location=data_name, size_threshold=1024)
            os.replace(tmpdir / data_name, data_dest)
        else:
            with open(tmp_model, "wb") as f:
                f.write(model.SerializeToString())
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp_model, dest)
    except ModelIOError:
        raise
    except Exception as e:
        raise ModelIOError(f"could not write {dest}: {first_line(e)}") from e
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)


def save_model(model: onnx.ModelProto, path: str | os.PathLike, *,
               protect: Iterable[str | os.PathLike] = (), overwrite: bool = False,
               external_data: bool | None = None) -> Path:
    """Write ``model`` to ``path`` atomically.

    Args:
        model: the model; it is not modified.
        path: destination ``.onnx`` file.
        protect: files that must never be written (the model's inputs).
        overwrite: replace an existing destination (never a protected file).
        external_data: force weights into ``<name>.data`` beside the model;
            default: only when the model is too large for one protobuf.

    Returns:
        The destination path.

    Raises:
        ModelIOError: destination protected, existing, or the write failed.
    """
    dest = Path(path).expanduser()
    data_name = dest.name + ".data"
    data_dest = dest.parent / data_name
    for prot in protect:
        prot = Path(prot)
        for d in (dest, data_dest):
            if _same_file(d, prot):
                raise ModelIOError(f"refusing to write {d}: it is the input model; choose another output path")

    try:  # a file in the way, an unwritable folder (/proc, read-only): one line before anything is written
        check_output_path(dest, existing_ok=overwrite)
    except OutputPathError as e:
        raise ModelIOError(str(e)) from None
    if external_data is None:
        try:
            external_data = model.ByteSize() > EXTERNAL_DATA_THRESHOLD
        except Exception:
            external_data = True
    _write_atomically(model, dest, external_data)
    return dest


def copy_model(src: str | os.PathLike, dest: str | os.PathLike) -> Path:
    """Copy the ONNX model ``src`` to ``dest`` with the weights it reads: a model of the cache reads them from
    the shared ``weights/`` folder beside it (:mod:`workbench.cache.model_store`), so a plain file copy would leave them
    behind. Small models come out as one file, large ones with ``<name>.data`` beside them."""
    src, dest = Path(src), Path(dest)
    proto = onnx.load(str(src), load_external_data=False)
    if not external_tensors(proto) and src.stat().st_size <= EXTERNAL_DATA_THRESHOLD:
        shutil.copyfile(src, dest)
        return dest
    return save_model(load_model(src, check=False), dest, overwrite=True)


def model_bytes(path: Path) -> int:
    """The model file plus the external data files it reads, each once (no weights are read)."""
    path = Path(path)
    total = path.stat().st_size
    seen = set()
    for t in external_tensors(onnx.load(str(path), load_external_data=False)):
        loc = {e.key: e.value for e in t.external_data}.get("location")
        if loc and loc not in seen:
            seen.add(loc)
            try:
                total += (path.parent / loc).stat().st_size
            except OSError:
                pass
    return total

