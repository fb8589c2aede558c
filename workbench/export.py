"""PyTorch → ONNX with either torch exporter, cached on disk.

Exports are keyed by everything that changes the result: the model's
identity (preset config and seed, or a hash of the folder's files), exporter,
opset, attention implementation, dynamic axes and the versions of torch,
transformers, onnx and onnxscript. A second request for the same export is a
file lookup and never imports torch.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import math
import os
import shutil
import time
import warnings
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Callable

from .cache import model_store
from .cache.root import cache_write_problem
from .concurrency import spawn
from .config import ExportConfig
from .errors import BrokenModelError, ExportError, OutputPathError
from .export_parity import (THREAD_WAIT_S, ReferenceOutputs, broken_line, checked_parity, head_output, join_bounded,
                            root_cause)
from .modelio import load_model, save_model
from .models import ModelSource, resolve
from .ort.inputs import InputSpec, make_inputs

#: Bump when the export recipe changes in a way the key would not see.
RECIPE_VERSION = 4
Progress = Callable[[str, float], None]


@dataclass
class ExportResult:
    """An exported model on disk and what is known about it."""

    path: Path
    source: ModelSource
    config: ExportConfig
    cached: bool
    export_s: float
    nodes: int
    opset: int
    meta: dict = field(default_factory=dict)

    @property
    def parity(self) -> dict | None:
        return self.meta.get("parity")

    def to_dict(self) -> dict:
        return {"path": str(self.path), "model": self.source.describe(), "export": self.config.to_dict(),
                "cached": self.cached, "export_s": round(self.export_s, 3), "nodes": self.nodes,
                "opset": self.opset, "parity": self.parity}


def _version(pkg: str) -> str:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return "absent"


def cache_key(source: ModelSource, cfg: ExportConfig) -> str:
    payload = {
        "recipe": RECIPE_VERSION, "model": source.identity, "export": cfg.to_dict(),
        "versions": {p: _version(p) for p in ("torch", "transformers", "onnx", "onnxscript")},
    }
    if getattr(source, "task", "embedding") != "embedding":  # a kept head changes the graph (keys of bare encoders stay)
        payload["task"] = source.task
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:24]


def _cache_write_failed(e: BaseException, what: str) -> None:
    """Raise the one line of a write into the cache that failed for the folder's sake (full, read-only) when
    that is what ``e`` (or an exception it was raised from) is."""
    while e is not None:
        if isinstance(e, OSError) and (line := cache_write_problem(e, what)):
            raise OutputPathError(line) from e
        e = e.__cause__ or e.__context__


def _noop(stage: str, fraction: float) -> None:
    pass


def keyword_wrapper(model, input_names: tuple[str, ...]):
    """transformers 5 models take keyword inputs; torch.onnx passes positionals.

    The wrapper returns the task's output: a model with a head (masked LM,
    classification) gives its logits, a bare encoder its last hidden state.
    """
    import torch

    class KeywordInputs(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask, token_type_ids):
            out = self.inner(input_ids=input_ids, attention_mask=attention_mask,
                             token_type_ids=token_type_ids, return_dict=True)
            return head_output(out)

    class KeywordInputsNoTypes(KeywordInputs):
        def forward(self, input_ids, attention_mask):  # DistilBERT has no token types
            return head_output(self.inner(input_ids=input_ids, attention_mask=attention_mask, return_dict=True))

    if tuple(input_names) == ("input_ids", "attention_mask"):
        return KeywordInputsNoTypes(model).eval()
    return KeywordInputs(model).eval()


def _example_inputs(source: ModelSource, batch: int = 2, seq: int = 16, seed: int = 0):
    import torch

    spec = InputSpec(names=source.input_names, vocab_size=source.vocab_size,
                     type_vocab_size=int(source.config_dict.get("type_vocab_size", 2)),
                     max_positions=source.max_positions)
    feeds = make_inputs(spec, batch, min(seq, spec.max_positions), seed=seed, padded=True)
    return tuple(torch.from_numpy(feeds[n]) for n in source.input_names)


@contextlib.contextmanager
def _quiet():
    """torch.onnx prints banners and warnings; the workbench shows its own progress."""
    buf = io.StringIO()
    loggers = [logging.getLogger(n) for n in ("torch.onnx", "onnxscript", "torch.export", "torch._dynamo")]
    old = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(buf):
            warnings.simplefilter("ignore")
            yield buf
    finally:
        for lg, lvl in zip(loggers, old):
            lg.setLevel(lvl)


def torch_export(model, source: ModelSource, cfg: ExportConfig, path: Path) -> None:
    """Call torch.onnx.export with the settings in ``cfg`` (no caching)."""
    import torch

    names = list(source.input_names)
    wrapped = keyword_wrapper(model, source.input_names)
    args = _example_inputs(source, seed=cfg.seed)
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    out_name = getattr(source, "output_name", "last_hidden_state")
    kwargs = dict(input_names=names, output_names=[out_name], opset_version=cfg.resolved_opset)
    if cfg.exporter == "torchscript":
        if cfg.dynamic_axes:
            axes = {n: {0: "batch", 1: "sequence"} for n in names}
            # Sequence classification logits are (batch, labels): no sequence axis.
            axes[out_name] = ({0: "batch"} if getattr(source, "task", "") == "sequence_classification"
                              else {0: "batch", 1: "sequence"})
            kwargs["dynamic_axes"] = axes
        kwargs["dynamo"] = False
        kwargs["do_constant_folding"] = True
    else:
        if cfg.dynamic_axes:
            batch, seq = torch.export.Dim("batch", min=1, max=4096), torch.export.Dim("sequence", min=1, max=source.max_positions)
            kwargs["dynamic_shapes"] = {n: {0: batch, 1: seq} for n in names}
        kwargs["dynamo"] = True
        kwargs["external_data"] = params > 1_800_000_000
        kwargs["verbose"] = False
    with torch.no_grad(), _quiet():
        torch.onnx.export(wrapped, args, str(path), **kwargs)


def export(source: ModelSource | str | None = None, cfg: ExportConfig | None = None, *,
           use_cache: bool = True, progress: Progress | None = None, check_parity: bool = True) -> ExportResult:
    """Export ``source`` to ONNX, or return the cached export.

    Args:
        source: a ModelSource, or a name/path for :func:`workbench.models.resolve`.
        cfg: export settings (default: TorchScript, opset 17, eager attention).
        use_cache: return a cached export when there is one (a new export is always stored).
        progress: ``progress(stage, fraction)`` called as work advances.
        check_parity: compare with PyTorch on the parity cases after export.

    Raises:
        ExportError: the exporter failed or could not honour the settings.
        BrokenModelError: the export's outputs are not finite, or differ from PyTorch's beyond tolerance
            (at real tokens): such a model is never stored, fused or measured.
    """
    src = source if isinstance(source, ModelSource) else resolve(source)
    cfg = cfg or ExportConfig()
    progress = progress or _noop
    if src.kind == "onnx":
        return _onnx_file(src, cfg)

    key = cache_key(src, cfg)
    group = model_store.group_of(src.identity)  # every export of this model shares its weights (model_store)
    if use_cache:
        hit = _cached(key, group, src, cfg, check_parity)
        if hit is not None:
            progress("cached", 1.0)
            return hit
    progress("building model", 0.05)
    model = src.build(cfg.attention)
    tmp = model_store.staging(group, f"the export of {src.label}")
    try:
        meta = _export_into(tmp, model, src, cfg, key, check_parity=check_parity, progress=progress)
        # Stored, always: use_cache=False means "export again", and the fresh export replaces the old one.
        path = model_store.publish(tmp / "model.onnx", kind="exports", key=key, group=group, meta=meta)
        progress("done", 1.0)
        return ExportResult(path, src, cfg, cached=False, export_s=meta["export_s"], nodes=meta["nodes"],
                            opset=meta["opset"], meta=meta)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _onnx_file(src: ModelSource, cfg: ExportConfig) -> ExportResult:
    """An ``.onnx`` file needs no export: its own path, node count and opset."""
    m = load_model(src.path, load_external_data=False)
    opset = next((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), 0)
    return ExportResult(src.path, src, cfg, cached=True, export_s=0.0, nodes=len(m.graph.node),
                        opset=opset, meta={"source": "onnx file"})


def _cached(key: str, group: str, src: ModelSource, cfg: ExportConfig, check_parity: bool) -> ExportResult | None:
    """The stored export (leased: ``workbench cache`` leaves it alone; None when absent or damaged: it is
    rebuilt); a stored export whose parity failed (written before exports were refused for it) is refused as
    a fresh one would be."""
    hit = model_store.find("exports", key, group)
    if hit is None:
        return None
    path, meta = hit
    parity = meta.get("parity")
    try:
        if check_parity and not (isinstance(parity, dict) and isinstance(parity.get("ok"), bool)):
            return None  # never trusted without its parity record: exported (and checked) again
        result = ExportResult(path, src, cfg, cached=True, export_s=0.0, nodes=meta["nodes"], opset=meta["opset"],
                              meta=meta)
    except (KeyError, TypeError):
        return None  # a damaged entry is rebuilt
    if check_parity and isinstance(parity, dict) and parity.get("ok") is False:
        finite = parity.get("finite", math.isfinite(parity.get("max_abs_diff") or 0.0))
        raise BrokenModelError(broken_line(src.label, cfg, parity, finite_onnx=finite))
    return result


def _export_into(tmp: Path, model, src: ModelSource, cfg: ExportConfig, key: str, *, check_parity: bool,
                 progress: Progress) -> dict:
    """Export into ``tmp/model.onnx``, check it (opset, parity against PyTorch); return its meta."""
    progress(f"exporting with {cfg.exporter}", 0.15)
    t0 = time.perf_counter()
    refs = None
    try:
        refs = ReferenceOutputs(model, src, concurrent=check_parity and cfg.exporter == "torchscript")
        torch_export(model, src, cfg, tmp / "model.onnx")
    except Exception as e:
        if refs is not None:
            refs.settle()  # a daemon still inside PyTorch when the process exits aborts it (C++ terminate)
        _cache_write_failed(e, f"the export of {src.label}")
        msg = root_cause(e)
        raise ExportError(f"torch.onnx ({cfg.exporter}) could not export {src.label}: {msg}") from e
    export_s = time.perf_counter() - t0
    progress("checking and parity against PyTorch", 0.7)
    # Parity opens an onnxruntime session, which validates the graph fully, so onnx.checker
    # would add a second on bert-base for nothing more; the session starts in a thread
    # while this one reads the file.
    parity: dict = {}

    def run_parity():
        try:
            parity["result"] = checked_parity(model, src, tmp / "model.onnx", refs=refs.get())
        except BaseException as e:  # re-raised below, in the caller's thread
            parity["error"] = e

    checker = spawn("export-parity", run_parity) if check_parity else None
    # On Ctrl-C the checker, a daemon, is left to end alone; on an error (out of memory) it is waited for, since
    # a daemon still inside ONNX Runtime when the process exits aborts it.
    try:
        m = load_model(tmp / "model.onnx", load_external_data=False, check=not check_parity,
                       full_check=not check_parity)
    except Exception:
        if checker:
            checker.join(THREAD_WAIT_S)
        raise
    if checker:
        join_bounded(checker, f"the parity check of {src.label} against PyTorch")
    opset = next((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), 0)
    if opset != cfg.resolved_opset:
        raise ExportError(
            f"the {cfg.exporter} exporter could not produce opset {cfg.resolved_opset} (it emitted opset {opset}; "
            f"it writes LayerNormalization, which needs opset 17 or newer): choose opset 17 or 18, "
            f"or the torchscript exporter")
    meta = {"key": key, "model": src.describe(), "export": cfg.to_dict(), "nodes": len(m.graph.node),
            "opset": opset, "ir_version": m.ir_version, "export_s": export_s,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "versions": {p: _version(p) for p in ("torch", "transformers", "onnx", "onnxscript", "onnxruntime-gpu")}}
    del m
    if check_parity:
        if "error" in parity:
            raise parity["error"]
        result, finite_onnx, finite_torch = parity["result"]
        meta["parity"] = {**result.to_dict(), "finite": finite_onnx}
        if not result.ok:  # never stored: a broken model must not be fused, measured or called good
            raise BrokenModelError(broken_line(src.label, cfg, meta["parity"], finite_onnx=finite_onnx,
                                               finite_torch=finite_torch))
    return meta


def copy_export(result: ExportResult, out_dir: str | os.PathLike, *, overwrite: bool = False) -> Path:
    """Write an export into a user folder through the safe save path."""
    name = f"{result.source.name}-{result.config.exporter}-{result.config.attention}-opset{result.opset}.onnx"
    model = load_model(result.path, full_check=False)
    return save_model(model, Path(out_dir) / name, overwrite=overwrite, protect=[result.path])
