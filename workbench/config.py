"""Frozen settings for every stage, with complete defaults and named presets.

Flags are positive ("enabled"), so a default-constructed object describes
what the tool does when the user says nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field, asdict, replace
from typing import Literal

from .errors import ConfigError

Exporter = Literal["torchscript", "dynamo"]
Attention = Literal["eager", "sdpa"]
Engine = Literal["ort", "onnxscript", "auto"]
Provider = Literal["cpu", "cuda"]

EXPORTERS: tuple[str, ...] = ("torchscript", "dynamo")
ATTENTIONS: tuple[str, ...] = ("eager", "sdpa")
OPSETS: tuple[int, ...] = (14, 17, 18, 23, 24)
ENGINES: tuple[str, ...] = ("ort", "onnxscript", "auto")
DEFAULT_MODEL = "bert-base"


@dataclass(frozen=True)
class ExportConfig:
    """How a PyTorch model becomes ONNX.

    Attributes:
        exporter: "torchscript" (``dynamo=False``) or "dynamo" (``dynamo=True``).
        opset: ai.onnx opset to emit. The dynamo exporter emits
            LayerNormalization, so it cannot go below 17.
        attention: transformers' attention implementation, "eager" or "sdpa".
        dynamic_axes: batch and sequence dimensions left symbolic.
        seed: seed for the example inputs used while tracing.
    """

    exporter: Exporter = "torchscript"
    opset: int | None = None
    attention: Attention = "eager"
    dynamic_axes: bool = True
    seed: int = 0

    def __post_init__(self):
        if self.exporter not in EXPORTERS:
            raise ConfigError(f"exporter must be one of {EXPORTERS}, not {self.exporter!r}")
        if self.attention not in ATTENTIONS:
            raise ConfigError(f"attention must be one of {ATTENTIONS}, not {self.attention!r}")
        if self.opset is not None and not 7 <= int(self.opset) <= 30:
            raise ConfigError(f"opset must be from 7 to 30, not {self.opset}")

    @property
    def resolved_opset(self) -> int:
        """The opset actually asked of torch: 17 for TorchScript, 18 for dynamo."""
        if self.opset is not None:
            return int(self.opset)
        return 17 if self.exporter == "torchscript" else 18

    def to_dict(self) -> dict:
        d = asdict(self)
        d["opset"] = self.resolved_opset
        return d


@dataclass(frozen=True)
class FusionPlan:
    """Which fusion engine runs and which catalog steps are enabled.

    Attributes:
        engine: "ort" (ONNX Runtime transformers optimizer), "onnxscript"
            (onnxscript's ORT fusion rules) or "auto" (both; keep the better).
        disabled: names of catalog steps switched off. Empty means every
            step the engine runs by default is on.
        opted_in: steps that are off by default (e.g. the gelu
            approximation, which changes results) switched on.
    """

    engine: Engine = "auto"
    disabled: frozenset[str] = field(default_factory=frozenset)
    opted_in: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self):
        if self.engine not in ENGINES:
            raise ConfigError(f"engine must be one of {ENGINES}, not {self.engine!r}")
        object.__setattr__(self, "disabled", frozenset(self.disabled))
        object.__setattr__(self, "opted_in", frozenset(self.opted_in))

    def enabled(self, step: str, default_on: bool = True) -> bool:
        """Whether ``step`` runs: off if disabled; steps off by default run only when opted in."""
        if step in self.disabled:
            return False
        return default_on or step in self.opted_in

    def with_step(self, step: str, on: bool) -> "FusionPlan":
        disabled, opted = set(self.disabled), set(self.opted_in)
        if on:
            disabled.discard(step)
            opted.add(step)
        else:
            disabled.add(step)
            opted.discard(step)
        return replace(self, disabled=frozenset(disabled), opted_in=frozenset(opted))


@dataclass(frozen=True)
class BenchConfig:
    """One benchmark: shape, threads, runs and provider, equal for all variants.

    ``dynamic_block_base`` is ONNX Runtime's ``session.dynamic_block_base``
    for every ONNX Runtime variant: 0 keeps ORT's default static split of
    each parallel loop; a positive value hands out work in shrinking blocks,
    which balances two threads on a shared VM better (measured here: 2.5 to
    4.5% faster for unfused and fused bert-base alike; the MatMul rate behind
    the floor does not change).
    """

    provider: Provider = "cpu"
    batch: int = 1
    seq: int = 128
    threads: int = 2
    warmup: int = 5
    runs: int = 30
    seed: int = 0
    dynamic_block_base: int = 0

    def __post_init__(self):
        if self.provider not in ("cpu", "cuda"):
            raise ConfigError(f"provider must be 'cpu' or 'cuda', not {self.provider!r}")
        for name in ("batch", "seq", "threads", "runs"):
            if int(getattr(self, name)) < 1:
                raise ConfigError(f"{name} must be at least 1, not {getattr(self, name)}")
        if self.warmup < 0:
            raise ConfigError("warmup must be 0 or more")
        if int(self.dynamic_block_base) < 0:
            raise ConfigError(f"dynamic_block_base must be 0 or more, not {self.dynamic_block_base}")
