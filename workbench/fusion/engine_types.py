"""What every engine step takes and gives back: the context, the outcome, the step itself.

Kept apart from the engine adapters so that ``ort_engine``, ``onnxscript_engine``
and ``own_steps`` share these types without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import onnx


@dataclass
class EngineContext:
    """What every step of a run may need."""

    num_heads: int = 0
    hidden_size: int = 0
    counts: dict[str, dict[str, int]] = field(default_factory=dict)  # step → engine counts in this chain
    #: ORT symbolic shape inference results by graph fingerprint, shared by the steps of one timeline.
    shape_cache: dict = field(default_factory=dict)
    #: The timeline's WeightStore when the working model holds weight stubs (see ``store.py``).
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


@dataclass(frozen=True)
class EngineStep:
    """One step of an engine; ``reads`` names earlier steps whose counts it looks at.

    ``skip``, when given, is asked before the step runs with the input graph's
    op histogram and its skeleton; a non-empty answer says the step cannot
    change this graph (none of the engine's anchor ops is present), so the
    runner keeps the graph as it is instead of running the step.
    """

    name: str
    run: Callable[[EngineContext, Any], StepOutcome]
    reads: tuple[str, ...] = ()
    skip: Callable[[dict, onnx.ModelProto], str] | None = None
