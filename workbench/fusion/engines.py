"""The fusion engines, each a list of steps run in the engine's order.

* ``ort`` (``ort_engine.py``): ONNX Runtime's transformers optimizer, the
  ``BertOnnxModel.fuse_*`` calls of ``optimize()`` one step at a time.
* ``onnxscript`` (``onnxscript_engine.py``): onnxscript's ORT fusion rules,
  rule group by rule group, in the order of ``optimize_for_ort``.
* The workbench's own onnxscript rules (``rules/``) run as steps inside
  those chains (``own_steps.py``): ``sdpa_attention`` (TorchScript + SDPA,
  just before ORT's attention step) and ``standard_attention`` (ONNX's
  standard ``Attention`` op of opset 23+ to ``MultiHeadAttention``, in both
  chains).

A step function takes an :class:`EngineContext` and the working model
(ModelProto for ort, ``onnx_ir.Model`` for onnxscript), edits it or returns
a new one, and reports what it did as data (:class:`StepOutcome`). The log
capture and matcher traces behind the diagnostics live in ``engine_logs.py``.
This module keeps every public name importable from one place.
"""

from __future__ import annotations

import os
import tempfile

import onnx

from ..errors import FusionError
from .engine_logs import capture_ort_logs, quiet_stdout, rules_of, trace_rules
from .engine_types import EngineContext, EngineStep, StepOutcome
from .onnxscript_engine import onnxscript_steps
from .ort_engine import ORT_STEPS, ort_anchors, shape_view

_STEPS_CACHE: dict[str, tuple[EngineStep, ...]] = {}


def engine_steps(engine: str) -> tuple[EngineStep, ...]:
    """The ordered steps of ``engine`` ("ort" or "onnxscript")."""
    if engine == "ort":
        return ORT_STEPS
    if engine == "onnxscript":
        if "onnxscript" not in _STEPS_CACHE:
            _STEPS_CACHE["onnxscript"] = onnxscript_steps()
        return _STEPS_CACHE["onnxscript"]
    raise FusionError(f"engine must be 'ort' or 'onnxscript', not {engine!r}")


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


__all__ = ["EngineContext", "EngineStep", "StepOutcome", "ORT_STEPS", "engine_steps", "one_shot", "ort_anchors",
           "shape_view", "capture_ort_logs", "quiet_stdout", "rules_of", "trace_rules", "onnxscript_steps"]
