"""What ``tune`` returns, typed: one row per variant, the recommendation per workload, and the run around them.

Readers (the saved folder and its card, ``workbench tune``, the app, the report) use attributes;
:meth:`TuneResult.to_json` is the one place the result becomes the ``--json`` document
(docs/tune.md, "Interfaces"), key for key as before. The reports of other parts (the machine, the
ablation, the int8 searches, the bench config, the task-parity checks) stay the JSON-ready dicts their
modules write.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

#: The figure that decides each workload.
METRIC = {"latency": "p50_ms", "throughput": "sentences_per_s"}


@dataclass
class VariantRow:
    """One variant: its figures in both modes (``p50_ms``/``sentences_per_s`` name their mode), answers, verdict."""

    name: str
    label: str
    p50_ms: float | None
    p90_ms: float | None
    p50_mode: str | None
    sentences_per_s: float | None
    throughput_mode: str | None
    batch: int | None
    batch_search: dict | None
    size_mb: float | None
    peak_rss_mb: float | None
    task_parity: dict | None
    task_parity_search: dict | None
    task_parity_batched: dict | None
    task_parity_batched_search: dict | None
    parity: dict | None
    holds: bool
    holds_batch1: bool
    holds_batched: bool
    reference: bool
    interleaved: dict
    shipped: dict | None
    session_providers: list = field(default_factory=list)
    kind: str | None = None
    floor_ms: float | None = None
    floor_precision: str | None = None
    #: Workload → the variant whose graph this row's figures of that workload are (``tuned`` when this machine's
    #: plan for it is the full plan, the unfused graph, or lost the final check to one of them).
    same_as: dict = field(default_factory=dict)

    def figure(self, workload: str) -> float | None:
        """The figure that decides ``workload`` (p50 ms or sentences/s)."""
        return getattr(self, METRIC[workload])

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class Recommendation:
    """The fastest variant whose answers hold in one workload, with one sentence why."""

    workload: str
    variant: str
    label: str
    figure: float
    mode: str | None
    batch: int | None
    task_parity: dict | None
    task_parity_batched: dict | None
    parity: dict | None
    why: str = ""

    def to_json(self) -> dict:
        return {"variant": self.variant, "label": self.label, METRIC[self.workload]: self.figure, "mode": self.mode,
                "batch": self.batch, "task_parity": self.task_parity, "task_parity_batched": self.task_parity_batched,
                "parity": self.parity, "why": self.why}


@dataclass
class SessionSpec:
    """How a variant's model was run: its engine kind, session level, optimizers kept off, runner options."""

    kind: str
    level: str | None
    disabled_optimizers: list
    options: dict

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class Skipped:
    """A variant not measured, and why."""

    name: str
    why: str

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class TuneResult:
    """One tune: every variant measured, the recommendation per workload, and what it ran on."""

    model: str
    source: str
    recommended: dict[str, Recommendation]
    workloads: list[str]
    variants: list[VariantRow]
    skipped: list[Skipped]
    machine: dict
    config: dict
    rates: dict
    split: dict
    reference: str
    plan: dict
    ablation: dict | None
    int8_search: dict | None
    openvino_guard: dict | None
    paths: dict[str, str]
    sessions: dict[str, SessionSpec]
    threads: int
    shipped: bool
    #: How busy the machine was while measuring (:meth:`.load.MachineLoad.to_dict`), None if unsampled.
    machine_load: dict | None = None
    #: Whether the model's weights are random (a preset): its answers mean nothing, so no verdict is drawn from them.
    random_weights: bool = False
    #: What :func:`.tune_save.save` wrote, when the result was saved.
    saved: dict | None = None
    #: Workload → this machine's plan for it: the plan, its check after the ablation, what ``tuned`` is there and
    #: the final check (:meth:`.tuned.TunedGraphs.to_json`); None when ``tuned`` was not measured.
    plans: dict | None = None

    def row(self, name: str) -> VariantRow | None:
        return next((r for r in self.variants if r.name == name), None)

    def engine_kind(self, name: str) -> str | None:
        """The engine kind a variant ran on ("onnx", "openvino", "torch"), None when it was not run."""
        s = self.sessions.get(name)
        return s.kind if s else None

    def to_json(self, drop: tuple[str, ...] = ()) -> dict:
        """The ``workbench tune --json`` document (``saved``: null when not saved); ``drop``: top-level keys left
        out (the report leaves out the paths and the ablation, which it shows from its own data)."""
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self) if f.name not in drop}


def _plain(x):
    """Nested typed parts to their JSON form; the rest as it is."""
    if hasattr(x, "to_json"):
        return x.to_json()
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_plain(v) for v in x]
    return x


__all__ = ["TuneResult", "VariantRow", "Recommendation", "SessionSpec", "Skipped", "METRIC"]
