"""What every engine step takes and gives back: the context, the outcome, the step itself.

Kept apart from the engine adapters so that ``ort_engine``, ``onnxscript_engine``
and ``rule_steps`` share these types without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import onnx

from ..errors import FusionError
from .anchors import graph_ops


class StepFailed(FusionError):
    """Raised by a step that could not finish (a participant's rule past its time limit): the runner keeps
    the graph as it was, marks the step failed with this sentence and goes on with the next step."""


@dataclass
class EngineContext:
    """What every step of a run may need."""

    num_heads: int = 0
    hidden_size: int = 0
    counts: dict[str, dict[str, int]] = field(default_factory=dict)  # step → engine counts in this chain
    #: ORT symbolic shape inference results by graph fingerprint, shared by the steps of one timeline.
    shape_cache: dict = field(default_factory=dict)
    #: The timeline's WeightStore when the working model holds weight stubs (see ``snapshot_weights.py``).
    store: Any = None
    #: The exported file, when the step's input is that export unchanged: ONNX Runtime reads it
    #: itself instead of a 440 MB serialization of the same bytes.
    source_path: str | None = None


@dataclass
class StepOutcome:
    """What one engine step did: the model after it, the engine's counts and messages."""

    model: Any
    counts: dict[str, int] = field(default_factory=dict)
    messages: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: Why the step was not run at all (its anchor ops are absent), or "".
    skipped: str = ""
    #: Why the step failed (:class:`StepFailed`: the graph is left as it was), or "".
    failed: str = ""


@dataclass(frozen=True)
class EngineStep:
    """One step of a chain: an engine's own step or a workbench rule (``rule_steps.py``).

    Attributes:
        name: the catalog step it runs.
        run: ``run(ctx, model) -> StepOutcome``.
        anchors: what must be in the input graph for the step to change it (``anchors.py``); where it
            is absent the runner does not run the step and reports it as not applicable.
        reads: earlier steps whose counts it looks at.
        rest: what the engine's call does besides matching (shape inference, removing unused nodes),
            run instead of ``run`` when the anchors are absent, so a skip is exactly what the engine
            would have done; None when that is nothing.
        version: a hash of a rule's code for a rule added at run time ("" for the package's own steps,
            whose code the timeline store's key covers): snapshots after it are keyed by it too.
        skip: ``skip(histogram, skeleton) -> reason`` ("" when the step may apply), from ``anchors``.
    """

    name: str
    run: Callable[[EngineContext, Any], StepOutcome]
    anchors: Any
    reads: tuple[str, ...] = ()
    rest: Callable[[EngineContext, Any], StepOutcome] | None = None
    version: str = ""
    skip: Callable[[dict, onnx.ModelProto], str] | None = None

    def __post_init__(self):
        if self.skip is None and self.anchors is not None:
            object.__setattr__(self, "skip", _skip_test(self.anchors))

    def key(self, on: bool) -> tuple:
        """This step in a plan prefix key: ``(name, on)``, with the rule's version when it has one."""
        return (self.name, on) + ((self.version,) if self.version else ())


def _skip_test(anchors) -> Callable[[dict, onnx.ModelProto], str]:

    def skip(hist: dict, skeleton: onnx.ModelProto) -> str:
        return anchors.missing(graph_ops(skeleton))

    return skip
