"""The app's state as one plain dataclass: what the user chose, nothing drawn.

Every widget reads from and writes to a :class:`UIState`; the settings the
compute functions take (:class:`~workbench.config.ExportConfig`,
:class:`~workbench.config.FusionPlan`, :class:`~workbench.config.BenchConfig`)
are derived from it, so a test can drive the app by setting fields.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

from ..config import DEFAULT_MODEL, BenchConfig, ExportConfig, FusionPlan
from ..errors import ConfigError

VIEWS = ("layer", "model")


@dataclass
class UIState:
    """What the user has chosen in the app."""

    source: str = DEFAULT_MODEL
    exporter: str = "torchscript"
    opset: int | None = None
    attention: str = "eager"
    engine: str = "auto"
    disabled: list[str] = field(default_factory=list)
    step: int = -1  # index into the snapshots; -1 = the last
    view: str = "layer"  # "layer": one encoder layer; "model": the whole model
    layer: int = 0
    expanded: list[str] = field(default_factory=list)  # groups opened in the whole-model view
    selected: str | None = None  # node id clicked in the "after" pane
    overlay: bool = False  # colour nodes by profiled latency
    constants: bool = False  # draw Constant / Identity-of-weight nodes (hidden by default: they crowd the view)
    pane_width: int = 520  # pixel width of each graph pane (two side by side)
    provider: str = "cpu"
    batch: int = 1
    seq: int = 128
    threads: int = 2
    runs: int = 30
    warmup: int = 5

    def __post_init__(self):
        if self.view not in VIEWS:
            raise ConfigError(f"view must be one of {VIEWS}, not {self.view!r}")
        if not 240 <= int(self.pane_width) <= 2000:
            raise ConfigError(f"pane_width must be between 240 and 2000 pixels, not {self.pane_width!r}")

    def export_config(self) -> ExportConfig:
        return ExportConfig(exporter=self.exporter, opset=self.opset, attention=self.attention)

    def fusion_plan(self) -> FusionPlan:
        return FusionPlan(engine=self.engine, disabled=frozenset(self.disabled))

    def bench_config(self) -> BenchConfig:
        return BenchConfig(provider=self.provider, batch=self.batch, seq=self.seq, threads=self.threads,
                           runs=self.runs, warmup=self.warmup)

    def set_step_enabled(self, name: str, on: bool) -> None:
        d = [s for s in self.disabled if s != name]
        if not on:
            d.append(name)
        self.disabled = sorted(d)

    def export_key(self) -> tuple:
        """What, when changed, needs a new export (the rest needs only a new fusion run)."""
        return (self.source, self.exporter, self.opset, self.attention)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "UIState":
        names = {f.name for f in fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise ConfigError(f"unknown app setting(s): {', '.join(sorted(unknown))}")
        return cls(**d)
