"""The fusion engines: each a chain of steps, and an adapter that hands the runner's models to its steps.

* ``ort`` (``ort_engine.py``): ONNX Runtime's transformers optimizer, the
  ``BertOnnxModel.fuse_*`` calls of ``optimize()`` one step at a time; its steps
  work on ``ModelProto`` copies of the weight-free skeletons (weights read from
  the store on demand).
* ``onnxscript`` (``onnxscript_engine.py``): onnxscript's ORT fusion rules,
  rule group by rule group, in the order of ``optimize_for_ort``; its steps work
  on an ``onnx_ir.Model`` in place.
* The workbench's own rules (``rules/``, ``rule.Rule``) join either chain where
  they say; ``registry.py`` builds each chain as a list of step names and
  ``rule_steps.py`` runs a rule as a step.

A step takes an :class:`EngineContext` and the working model, edits it or
returns a new one, and reports what it did as data (:class:`StepOutcome`).
Everything that differs between the engines (the working model, how a step's
result becomes a skeleton again, what an engine's own crash means) lives in
the adapters (``adapters.py``), so the runner (``runner.py``) has no engine
branches. The log capture and matcher traces behind the diagnostics live in
``engine_logs.py``.
"""

from __future__ import annotations

import os
import tempfile

import onnx

from ..errors import FusionError
from .adapters import adapter
from .engine_logs import capture_ort_logs, quiet_stdout
from .engine_types import EngineStep
from .registry import steps


def engine_steps(engine: str) -> tuple[EngineStep, ...]:
    """The ordered steps of ``engine``'s chain ("ort" or "onnxscript"), the registered rules included."""

    adapter(engine)
    return steps(engine)


# ---------------------------------------------------------------- one-shot calls (for comparison)
def one_shot(engine: str, model: onnx.ModelProto, *, num_heads: int = 0, hidden_size: int = 0) -> onnx.ModelProto:
    """The engine's own single call on a copy of ``model``, for faithfulness checks and timing."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    if engine == "ort":
        from onnxruntime.transformers.optimizer import optimize_model

        if not (num_heads > 0 and hidden_size > 0 and hidden_size % num_heads == 0):
            num_heads, hidden_size = 0, 0
        with tempfile.TemporaryDirectory(prefix="workbench-oneshot-") as tmp:
            path = os.path.join(tmp, "in.onnx")
            with open(path, "wb") as f:
                f.write(copy.SerializeToString())
            with capture_ort_logs():
                opt = optimize_model(path, model_type="bert", num_heads=num_heads, hidden_size=hidden_size)
        return opt.model
    if engine == "onnxscript":
        import onnx_ir as ir
        from onnxscript.rewriter.ort_fusions import optimize_for_ort

        with quiet_stdout():
            m, _ = optimize_for_ort(ir.serde.deserialize_model(copy))
        return ir.serde.serialize_model(m)
    raise FusionError(f"engine must be 'ort' or 'onnxscript', not {engine!r}")


__all__ = ["engine_steps", "one_shot"]
