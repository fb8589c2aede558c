"""What a benchmark is given and gives back: :class:`Variant`, :class:`RunSample`, :class:`VariantStats`,
:class:`BenchResult` (plain dataclasses; :mod:`.bench` re-exports them), and :func:`prepare_variants`, which
turns variants into what the worker is sent."""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ...errors import BenchmarkError, ConfigError, RuntimeUnavailableError
from ...ort.assignment import Assignment
from ...ort.session import LEVELS, cuda_status
from ..worker.floor import plausible_bound
from ..worker.kinds import kinds
from .load import MachineLoad


@dataclass(frozen=True)
class Variant:
    """One thing to time.

    Attributes:
        name: label in results and plots; unique within a benchmark.
        model: ONNX path or serialized bytes (``kind="onnx"``).
        provider: "cpu" or "cuda".
        level: ONNX Runtime graph optimization level at session creation
            ("disable", "basic", "extended", "all").
        kind: the worker's runner: "onnx" (ONNX Runtime), "torch" (PyTorch), "openvino" (OpenVINO on the ONNX
            file), or another recipe's (:func:`workbench.measure.variants.kinds`).
        fp16: convert to float16 first, keeping fp32 inputs and outputs
            (ONNX), or ``model.half()`` (torch).
        torch_source: for ``kind="torch"``: ``{"model": preset, folder or hub
            id, "attention": "eager"|"sdpa", "seed": int}``.
        disabled_optimizers: ONNX Runtime session transformers to skip, so
            fusions switched off in the plan stay off at level "all".
        options: engine settings: ``{"compile": True}`` (torch: ``torch.compile``, inductor),
            ``{"precision": "f32"}`` (openvino: its inference precision hint; absent: its default),
            ``{"ir": path}`` (openvino: run this OpenVINO IR; ``model`` stays the ONNX file it came from),
            ``{"ep": "openvino", "precision": "f32"}`` (onnx: ONNX Runtime with OpenVINO's execution provider in
            front of its CPU one; no precision: OpenVINO's default on this CPU).
        spinning: run as the engine ships (ONNX Runtime's threads spin, OpenVINO without a pinned
            stream count); only for a variant timed alone in time slices of its own (:mod:`.slices`).
    """

    name: str
    model: str | Path | bytes | None = None
    provider: str = "cpu"
    level: str = "all"
    kind: str = "onnx"
    fp16: bool = False
    torch_source: dict | None = None
    disabled_optimizers: tuple[str, ...] = ()
    options: dict | None = None
    spinning: bool = False

    def __post_init__(self):
        object.__setattr__(self, "disabled_optimizers", tuple(self.disabled_optimizers or ()))

        if not self.name:
            raise ConfigError("a variant needs a name")

        if self.kind not in kinds():
            raise ConfigError(f"variant kind must be one of {kinds()}, not {self.kind!r}")
        if self.provider not in ("cpu", "cuda"):
            raise ConfigError(f"provider must be 'cpu' or 'cuda', not {self.provider!r}")
        if self.level not in LEVELS:
            raise ConfigError(f"level must be one of {sorted(LEVELS)}, not {self.level!r}")
        if self.kind != "torch" and self.model is None:
            raise ConfigError(f"variant {self.name!r} needs a model (an ONNX path or bytes, or its engine's folder)")
        if self.kind == "torch" and not (self.torch_source or {}).get("model"):
            raise ConfigError(f"torch variant {self.name!r} needs torch_source={{'model': name or folder}}")

    def describe(self) -> dict:
        """Plain-dict form for the worker and for results (bytes not included)."""
        d = {"name": self.name, "provider": self.provider, "level": self.level, "kind": self.kind,
             "fp16": self.fp16, "torch_source": dict(self.torch_source) if self.torch_source else None,
             "disabled_optimizers": list(self.disabled_optimizers), "options": dict(self.options or {}),
             "spinning": self.spinning}
        d["model"] = None if self.model is None or isinstance(self.model, bytes) else str(self.model)
        return d


@dataclass(frozen=True)
class RunSample:
    """One timed run of one variant, streamed while the benchmark runs; ``shape``: the (batch, sequence) it was fed."""

    variant: str
    run_index: int
    ms: float
    shape: tuple[int, int] | None = None


@dataclass
class VariantStats:
    """Summary of one variant's timed runs (None where there were no runs)."""

    name: str
    provider: str
    p50_ms: float | None
    p90_ms: float | None
    p99_ms: float | None
    mean_ms: float | None
    std_ms: float | None
    throughput_per_s: float | None
    runs: int
    samples_ms: list[float] = field(default_factory=list)
    parity: dict | None = None
    floor_ratio: float | None = None
    session_providers: list[str] = field(default_factory=list)
    kind: str = "onnx"
    level: str = "all"
    fp16: bool = False
    #: ONNX Runtime session transformers this variant ran without (fusions the plan keeps off).
    disabled_optimizers: list[str] = field(default_factory=list)
    #: The answer-level check against the reference on real text (``ort.task_parity``); None for the
    #: reference and without text.
    task_parity: dict | None = None
    #: This variant's own floor: its FLOPs at the measured rate of each precision it runs in.
    floor_ms: float | None = None
    #: "fp32", "int8+fp32", "fp16": the precisions behind ``floor_ms``.
    floor_precision: str | None = None
    #: Its MatMuls alone with weights read from memory (streaming rates), per precision.
    matmul_bound_ms: float | None = None
    #: p50 over ``matmul_bound_ms``.
    bound_ratio: float | None = None
    #: The answers per part of the text (``{"search": ..., "check": ...}``) when the text was split.
    task_parity_parts: dict | None = None
    #: Which provider ran each node of its ONNX Runtime session (None for other engines, or an older onnxruntime).
    assignment: Assignment | None = None
    #: The (batch, sequence) of each timed run, beside ``samples_ms`` (with text, runs cycle through shapes).
    sample_shapes: list[tuple[int, int]] = field(default_factory=list)

    @classmethod
    def from_samples(cls, v: dict, samples: list[float], batch: int, floor: float | None,
                     parity: dict | None, session_providers: list[str],
                     shapes: list[tuple[int, int]] | None = None) -> "VariantStats":
        n = len(samples)
        if n:
            a = np.asarray(samples, dtype=np.float64)
            p50, p90, p99 = (float(x) for x in np.percentile(a, [50, 90, 99]))
            mean, std = float(a.mean()), float(a.std(ddof=1)) if n > 1 else 0.0
            thr = batch * 1000.0 / mean if mean > 0 else None
        else:
            p50 = p90 = p99 = mean = std = thr = None
        ratio = p50 / floor if p50 and floor else None
        return cls(v["name"], v["provider"], p50, p90, p99, mean, std, thr, n, list(samples), parity, ratio,
                   list(session_providers), v.get("kind", "onnx"), v.get("level", "all"), bool(v.get("fp16")),
                   list(v.get("disabled_optimizers") or ()), sample_shapes=list(shapes) if shapes and any(shapes) else [])

    def to_dict(self, samples: bool = True) -> dict:
        d = asdict(dataclasses.replace(self, assignment=None))
        # The counts per provider and the fall-backs, not every node.
        d["assignment"] = self.assignment.to_dict() if self.assignment else None
        if not samples:
            d.pop("samples_ms")
            d.pop("sample_shapes")
        return d


def prepare_variants(variants: list[Variant]) -> tuple[list[dict], list[Path]]:
    """Check names, and write byte models to a private temporary folder: ``(the worker's variant dicts,
    folders to remove when the job ends)``."""
    if not variants:
        raise ConfigError("nothing to benchmark: no variants given")
    names = [v.name for v in variants]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ConfigError(f"variant names must be unique; repeated: {', '.join(dup)}")
    out, cleanup = [], []
    for v in variants:
        d = v.describe()
        if isinstance(v.model, bytes):
            tmp = Path(tempfile.mkdtemp(prefix="workbench-bench-"))
            cleanup.append(tmp)
            (tmp / "model.onnx").write_bytes(v.model)
            d["model"] = str(tmp / "model.onnx")
        elif v.kind in ("onnx", "openvino"):
            p = Path(v.model)
            if not p.is_file():
                for c in cleanup:
                    shutil.rmtree(c, ignore_errors=True)
                raise BenchmarkError(f"variant {v.name!r}: {p} is not a file")
        out.append(d)
    if any(v.provider == "cuda" for v in variants):
        ok, reason = cuda_status()
        if not ok:
            for c in cleanup:
                shutil.rmtree(c, ignore_errors=True)
            raise RuntimeUnavailableError(f"GPU asked for, but {reason}")
    return out, cleanup


def fastest_fp32(stats) -> float | None:
    """The fastest p50 among variants that run the model's fp32 FLOPs (what a fp32 bound must stay under)."""
    return min((s.p50_ms for s in stats if s.p50_ms and (s.floor_precision or "fp32") == "fp32"), default=None)


@dataclass
class BenchResult:
    """Everything one benchmark measured, with the machine it ran on."""

    variants: list[VariantStats]
    machine: dict
    floor_ms: float | None
    config: dict = field(default_factory=dict)
    stopped: bool = False
    floor: dict = field(default_factory=dict)
    #: How busy the machine was while this ran (:class:`~workbench.measure.harness.load.MachineLoad`), None if unsampled.
    machine_load: "MachineLoad | None" = None

    def __getitem__(self, name: str) -> VariantStats:
        for v in self.variants:
            if v.name == name:
                return v
        raise KeyError(name)

    @property
    def rates(self) -> dict:
        """Measured MatMul rates per precision: ``{"fp32": {"hot", "stream", "unit", ...}, "int8": ...}``."""
        return dict(self.floor.get("rates") or {})

    @property
    def matmul_bound_ms(self) -> float | None:
        """The model's FLOPs at the streaming MatMul rate (weights from memory), or None (also when it
        exceeds the fastest fp32 variant's measured time, which makes it impossible)."""
        v = self.floor.get("matmul_bound_ms")
        return plausible_bound(float(v), fastest_fp32(self.variants)) if v else None

    def ratio(self, slower: str, faster: str) -> float | None:
        """How many times faster ``faster`` is than ``slower`` (ratio of p50s)."""
        a, b = self[slower].p50_ms, self[faster].p50_ms
        return a / b if a and b else None

    def to_dict(self, samples: bool = True) -> dict:
        """JSON-ready: ``{"machine", "floor_ms", "matmul_bound_ms", "config", "stopped", "variants": [...],
        "machine_load"}`` (``machine_load``: :meth:`MachineLoad.to_dict`, or None)."""
        return {"machine": self.machine, "floor_ms": self.floor_ms, "matmul_bound_ms": self.matmul_bound_ms,
                "rates": self.rates, "floor": self.floor, "config": self.config,
                "stopped": self.stopped, "variants": [v.to_dict(samples) for v in self.variants],
                "machine_load": self.machine_load.to_dict() if self.machine_load else None}

    def to_frame(self):
        """One row per variant (pandas DataFrame), samples left out."""
        import pandas as pd

        rows = []
        for v in self.variants:
            d = v.to_dict(samples=False)
            par = d.pop("parity") or {}
            d["max_abs_diff"] = par.get("max_abs_diff")
            d["cosine"] = par.get("cosine")
            d["session_providers"] = ",".join(d["session_providers"])
            rows.append(d)
        return pd.DataFrame(rows)


__all__ = ["Variant", "RunSample", "VariantStats", "BenchResult", "fastest_fp32", "prepare_variants"]
