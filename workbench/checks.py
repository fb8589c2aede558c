"""Checks a user's input passes before anything reads or builds it: refuse at once, never hang or crash.

- Special files (named pipes, sockets, devices, ``/dev/zero`` behind a symlink) are refused before
  they are opened: reading one blocks forever or never ends.
- A model built from a ``config.json`` is sized from the config first (parameters and fp32 memory)
  and refused when it cannot fit; impossible values (zero layers, heads that do not divide the
  hidden size) are named.
- A ``.safetensors`` file's header is read and checked against the file's size before any tensor is
  loaded (truncated files, headers that lie about sizes, unknown dtypes).
- The files a model folder names are checked in :mod:`workbench.folder_checks`.

Every message is one line and names the user's file.
"""
from __future__ import annotations

import json
import math
import os
import stat
import struct
from pathlib import Path

from .errors import ModelSourceError
from .families import POSITION_KEYS, ROTARY_BASE_KEYS
from .limits import address_space_gb
from .path_checks import not_utf8, shown, too_long
from .settings import env_number

#: Limit for the fp32 memory a model may need, in GB (raise it with this environment variable).
MAX_MODEL_GB_ENV = "WORKBENCH_MAX_MODEL_GB"
#: Address space PyTorch and ONNX Runtime take before any model (libraries, thread stacks and arenas; measured
#: 1.4 GB for bert-tiny's export on 2 cores): what ``ulimit -v`` leaves for a model is the rest.
RUNTIMES_GB = 1.2
#: Seconds the TorchScript export takes per encoder layer at the least (measured 0.3 s on a 2-core Zen 5 with
#: hidden size 32, where the per-layer work is all overhead), and the export time past which a model is refused.
EXPORT_S_PER_LAYER, MAX_EXPORT_HOURS = 0.25, 1.0
#: ONNX nodes per BERT layer in the TorchScript export (bert-base: 1061 nodes, 12 layers).
NODES_PER_LAYER = 85

_KINDS = ((stat.S_ISFIFO, "a named pipe"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"))


def special_kind(path: str | os.PathLike) -> str | None:
    """"a named pipe", "a socket", "a character device", "a block device", or None (regular, folder, missing)."""
    try:
        mode = os.stat(path).st_mode  # follows symlinks: a link to /dev/zero is a device
    except OSError:
        return None
    return next((name for test, name in _KINDS if test(mode)), None)


def check_model_path(path: Path) -> Path:
    """``path``, once it is known that a reader below can open it, before anything is read: not a pipe or a device
    (opening it would block or never end), not a name too long for the file system or no UTF-8 (bytes of an old
    disk's encoding: safetensors, ONNX and ONNX Runtime take UTF-8 paths only, and would each fail in their own
    words)."""
    kind = special_kind(path)
    if kind:
        raise ModelSourceError(f"{path} is {kind}, not a model file or folder; refused")
    problem = too_long(path)
    if problem is not None:
        raise ModelSourceError(f"{shown(path)}: {problem}")
    problem = not_utf8(path)
    if problem is not None:
        raise ModelSourceError(problem)
    return path


def require_regular_file(path: str | os.PathLike, error=ModelSourceError) -> Path:
    """Refuse anything but an existing regular file, without opening it."""
    p = Path(path)
    if (problem := too_long(p)) is not None:
        raise error(f"{shown(p)}: {problem}")
    kind = special_kind(p)
    if kind:
        raise error(f"{p} is {kind}, not a file; refused (reading it could block forever)")
    if p.is_dir():
        raise error(f"{p} is a directory, not a file")
    if not p.exists():
        raise error(f"{p}: no such file")
    return p


# ── configs ──────────────────────────────────────────────────────────────────────────────────────
_POSITIVE = ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size", "vocab_size",
             *POSITION_KEYS)
#: Of those, keys some configs leave null (read as absent).
_NULLABLE = POSITION_KEYS[1:]
#: Sizes of relative-position tables (DeBERTa, MPNet): whole numbers; DeBERTa's -1 means "none".
_RELATIVE = ("max_relative_positions", "position_buckets", "relative_attention_num_buckets")
_ALIASES = {"n_layers": "num_hidden_layers", "dim": "hidden_size", "n_heads": "num_attention_heads",
            "hidden_dim": "intermediate_size"}  # DistilBERT's names


def _normalized(config: dict) -> dict:
    out = dict(config)
    for alias, name in _ALIASES.items():
        if name not in out and alias in out:
            out[name] = out[alias]
    return out


def estimate_params(config: dict) -> int:
    """Parameters of a BERT-family encoder described by ``config`` (embeddings + layers; heads ignored)."""
    c = _normalized(config)
    h, layers, inter = int(c["hidden_size"]), int(c["num_hidden_layers"]), int(c.get("intermediate_size", 4 * c["hidden_size"]))
    emb = (int(c["vocab_size"]) + _positions(c) + int(c.get("type_vocab_size", 2) or 0)) * h + 2 * h
    layer = 4 * (h * h + h) + 2 * h + (h * inter + inter) + (inter * h + h) + 2 * h
    return emb + layers * layer + _relative_params(c, h)


def _positions(c: dict) -> int:
    """The longest sequence the config allows, under whichever name it gives it (512 when none)."""
    return next((int(c[k]) for k in POSITION_KEYS if isinstance(c.get(k), int)), 512)


def _relative_params(c: dict, h: int) -> int:
    """Parameters of relative-position tables: DeBERTa's 2 × (buckets, or max relative positions, or
    positions) rows of the hidden size; MPNet's (and T5's) buckets × heads."""
    n = 0
    if c.get("relative_attention"):
        buckets, most = int(c.get("position_buckets", -1) or -1), int(c.get("max_relative_positions", -1) or -1)
        n += 2 * (buckets if buckets > 0 else most if most > 0 else _positions(c)) * h
    buckets = c.get("relative_attention_num_buckets")
    if isinstance(buckets, int) and buckets > 0:
        n += buckets * int(c.get("num_attention_heads", 1) or 1)
    return n


def _available_gb() -> float | None:
    """Memory available to a new allocation, in GB, on Linux, macOS and Windows alike (psutil's
    ``virtual_memory().available``: MemAvailable, free + inactive pages, or GlobalMemoryStatusEx)."""
    try:
        import psutil

        return psutil.virtual_memory().available / 1e9
    except Exception:  # psutil missing or refused by the platform: the size guard says nothing
        return None


def check_config(config: dict, where: str) -> None:
    """Refuse impossible values and models too large to build here, before anything is allocated."""
    c = _normalized(config)
    for key in _POSITIVE:
        if key not in c or c[key] is None and key in _NULLABLE:
            continue
        v = c[key]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ModelSourceError(f"{where}: {key} is {v!r}; it must be a whole number of at least 1")
    for key in _RELATIVE:
        v = c.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            raise ModelSourceError(f"{where}: {key} is {v!r}; it must be a whole number")
    for key, v in _rotary_bases(c):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0):
            raise ModelSourceError(f"{where}: {key} is {v!r}; a rotary base must be a positive number "
                                   f"(zero or below gives outputs that are not numbers)")
    h, heads = c.get("hidden_size"), c.get("num_attention_heads")
    if isinstance(h, int) and isinstance(heads, int) and h % heads:
        raise ModelSourceError(f"{where}: hidden_size {h} is not divisible by num_attention_heads {heads}")
    if all(k in c for k in ("hidden_size", "num_hidden_layers", "vocab_size")):
        _check_size(c, where)
        _check_time(c, where)


def _check_time(c: dict, where: str) -> None:
    """Refuse a model whose export alone would take hours, estimated from its layers (before anything is built)."""
    layers = int(c["num_hidden_layers"])
    hours = layers * EXPORT_S_PER_LAYER / 3600
    if hours > MAX_EXPORT_HOURS:
        raise ModelSourceError(
            f"{where}: num_hidden_layers {layers:,} makes a graph of about {layers * NODES_PER_LAYER:,} nodes: about "
            f"{hours:,.0f} hours only to export it here ({EXPORT_S_PER_LAYER} s a layer at the least), before any "
            f"fusion or measurement; refused (the workbench builds up to "
            f"{int(MAX_EXPORT_HOURS * 3600 / EXPORT_S_PER_LAYER):,} layers)")


def _check_size(c: dict, where: str) -> None:
    """Refuse a model too large for the memory here: free memory or ``WORKBENCH_MAX_MODEL_GB``, and what the
    address-space limit (``ulimit -v``) leaves once the runtimes are loaded."""
    params = estimate_params(c)
    need_gb = params * 4 * 3 / 1e9  # fp32 weights, the exporter's copy, an ONNX Runtime session
    limit = max_model_gb()
    cap = limit if limit is not None else _available_gb()
    fix = f"set {MAX_MODEL_GB_ENV} to raise the limit"
    source = f"the limit {MAX_MODEL_GB_ENV}={limit}" if limit else f"this machine's {cap or 0:.1f} GB of free memory"
    space = address_space_gb()
    if space is not None and (cap is None or space - RUNTIMES_GB < cap):
        cap, fix = space - RUNTIMES_GB, "raise the limit (ulimit -v unlimited)"
        source = (f"the {max(cap, 0):.1f} GB the address-space limit (ulimit -v: {space:.1f} GB) leaves beside "
                  f"PyTorch's and ONNX Runtime's own {RUNTIMES_GB} GB")
    if cap is not None and need_gb > cap:
        raise ModelSourceError(
            f"{where} describes a model of {_human(params)} parameters ({c['num_hidden_layers']:,} layers, hidden "
            f"{c['hidden_size']:,}{_largest_table(c, params)}): about {need_gb:,.1f} GB to export and run, more "
            f"than {source}; {fix}")


def max_model_gb() -> float | None:
    """$WORKBENCH_MAX_MODEL_GB (None: unset); "nan", "inf", "-5": one line naming the variable."""
    return env_number(MAX_MODEL_GB_ENV, minimum=0.001)


def _largest_table(c: dict, params: int) -> str:
    """", of which N in its <table> (<key> <value>)" when one table holds most of the parameters, else ""."""
    h = int(c["hidden_size"])
    tables = [(_relative_params(c, h), "relative-position table", [k for k in _RELATIVE if k in c]),
              (_positions(c) * h, "position table", [k for k in POSITION_KEYS if k in c][:1]),
              (int(c["vocab_size"]) * h, "vocabulary table", ["vocab_size"])]
    n, what, keys = max(tables, key=lambda t: t[0])
    if n * 2 < params:
        return ""
    named = ", ".join(f"{k} {c[k]:,}" if isinstance(c[k], int) else f"{k} {c[k]!r}" for k in keys)
    return f", of which {_human(n)} in its {what}" + (f": {named}" if named else "")


def _rotary_bases(c: dict) -> list[tuple[str, object]]:
    """``(key, value)`` of every rotary base the config gives: the families' names for it, and ``rope_theta``
    inside ``rope_parameters`` (transformers 5; per attention kind for ModernBERT)."""
    out = [(k, c[k]) for k in ROTARY_BASE_KEYS if k in c]
    stack = [("rope_parameters", c.get("rope_parameters"))]
    while stack:
        name, d = stack.pop()
        if isinstance(d, dict):
            for k, v in d.items():
                if k == "rope_theta":
                    out.append((f"{name}.{k}", v))
                elif isinstance(v, dict):
                    stack.append((f"{name}.{k}", v))
    return out


def _human(n: int) -> str:
    for unit, div in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= div:
            return f"{n / div:,.1f}{unit}"
    return str(n)


# ── safetensors ──────────────────────────────────────────────────────────────────────────────────
_DTYPE_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "I16": 2, "U16": 2, "F16": 2,
                "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}
_MAX_HEADER = 100 * 1024 * 1024


def check_safetensors(path: str | os.PathLike) -> dict:
    """Read and check a ``.safetensors`` header against the file; return ``{name: (dtype, shape)}``.

    Raises:
        ModelSourceError: truncated file, a header that is not JSON or lies about sizes or offsets,
            an unknown dtype, overlapping or out-of-file tensor data.
    """
    p = require_regular_file(path)
    size = p.stat().st_size
    if size < 8:
        raise ModelSourceError(f"{p} is truncated ({size} bytes): not a safetensors file")
    with open(p, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        if n > min(size - 8, _MAX_HEADER):
            raise ModelSourceError(f"{p}: its header claims {n:,} bytes but the file has {size - 8:,} after the "
                                   f"length field (truncated or not a safetensors file)")
        raw = f.read(n)
    try:
        header = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise ModelSourceError(f"{p}: its header is not valid JSON (damaged safetensors file)") from None
    if not isinstance(header, dict):
        raise ModelSourceError(f"{p}: its header is not a JSON object (damaged safetensors file)")
    data = size - 8 - n
    spans, out = [], {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(t, dict) or not {"dtype", "shape", "data_offsets"} <= set(t):
            raise ModelSourceError(f"{p}: tensor {name!r} has no dtype, shape or data_offsets (damaged header)")
        dtype, shape, offs = t["dtype"], t["shape"], t["data_offsets"]
        if dtype not in _DTYPE_BYTES:
            raise ModelSourceError(f"{p}: tensor {name!r} has unknown dtype {dtype!r}")
        if (not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)
                or not isinstance(offs, list) or len(offs) != 2
                or not all(isinstance(o, int) and not isinstance(o, bool) for o in offs)):
            raise ModelSourceError(f"{p}: tensor {name!r} has a malformed shape or data_offsets")
        begin, end = offs
        if not 0 <= begin <= end <= data:
            raise ModelSourceError(f"{p}: tensor {name!r} claims bytes {begin:,}-{end:,} but the file holds "
                                   f"{data:,} bytes of data (truncated or the header lies)")
        want = math.prod(shape) * _DTYPE_BYTES[dtype]
        if end - begin != want:
            raise ModelSourceError(f"{p}: tensor {name!r} of shape {shape} in {dtype} needs {want:,} bytes "
                                   f"but the header gives it {end - begin:,}")
        spans.append((begin, end, name))
        out[name] = (dtype, tuple(shape))
    spans.sort()
    for (b0, e0, n0), (b1, e1, n1) in zip(spans, spans[1:]):
        if b1 < e0:
            raise ModelSourceError(f"{p}: tensors {n0!r} and {n1!r} overlap in the file (damaged header)")
    return out


def check_float_weights(tensors: dict, path: str | os.PathLike) -> None:
    """Refuse weights in dtypes a BERT checkpoint never stores its weights in (e.g. all-integer)."""
    floats = {"F16", "BF16", "F32", "F64"}
    bad = [n for n, (dtype, _) in tensors.items() if dtype not in floats and not n.endswith(("position_ids", "token_type_ids"))]
    if bad:
        raise ModelSourceError(f"{path}: tensor {bad[0]!r} is stored as {tensors[bad[0]][0]}, not a floating-point "
                               f"type (wrong dtype for model weights)")


__all__ = ["special_kind", "check_model_path", "require_regular_file", "estimate_params", "check_config",
           "check_safetensors", "check_float_weights", "MAX_MODEL_GB_ENV"]
