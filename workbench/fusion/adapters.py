"""The engine adapters: how the runner hands each engine's steps their working model and takes it back.

Everything that differs between the engines lives here, so the runner (``runner.py``) and the rule
steps (``rule_steps.py``) have no engine branches: the working model (a ``ModelProto`` copy of the
weight-free skeleton for ONNX Runtime's optimizer, an ``onnx_ir.Model`` for onnxscript), how a
step's result becomes a skeleton again, how a rule gets an ``onnx_ir`` view of it, and what an
engine's own crash means (a step result for ONNX Runtime, an error for onnxscript).
"""

from __future__ import annotations

import os
import traceback

import onnx

from ..errors import FusionError
from .engine_types import EngineContext, StepOutcome
from ..graph.summary import ensure_node_names, name_nodes


class OrtAdapter:
    """ONNX Runtime's optimizer: ``ModelProto`` working copies; a crash inside its fusions is the step's result."""

    name = "ort"

    def working(self, store, skeleton: onnx.ModelProto) -> onnx.ModelProto:
        """A copy of ``skeleton`` to edit; weight values are read from the store on demand."""
        return store.working_copy(skeleton)

    def context_store(self, store):
        return store

    def skeleton(self, store, model: onnx.ModelProto) -> onnx.ModelProto:
        ensure_node_names(model)
        return store.strip(model)

    def failure(self, step: str, error: Exception, store, skeleton) -> StepOutcome:
        """The outcome of a step whose ORT code raised: the graph unchanged, the failure in its words.

        ONNX Runtime's optimizer crashes inside some fusions (its SkipLayerNorm fusion reads a bias a
        bias-free LayerNormalization lacks); the later steps go on.
        """
        frames = traceback.extract_tb(error.__traceback__)
        where = next((f for f in reversed(frames) if "onnxruntime" in f.filename), frames[-1] if frames else None)
        at = f" in {os.path.basename(where.filename)}, line {where.lineno}" if where else ""
        msg = str(error).strip().splitlines()[0] if str(error).strip() else ""
        words = f"{type(error).__name__}: {msg}" if msg else type(error).__name__
        note = (f"ONNX Runtime's optimizer failed in this step ({words}{at}); the graph is left as it was and the "
                f"later steps go on. The workbench's own rules in the onnxscript chain cover this pattern.")
        return StepOutcome(self.working(store, skeleton), counts={}, messages=[f"onnxruntime raised {words}{at}"],
                           notes=[note])

    def to_ir(self, ctx: EngineContext, model: onnx.ModelProto):
        import onnx_ir as ir

        return ctx.store.load_ir(model) if ctx.store is not None else ir.serde.deserialize_model(model)

    def from_ir(self, ctx: EngineContext, ir_model, original: onnx.ModelProto, changed: bool) -> onnx.ModelProto:
        """The ModelProto after a rule: the original protobuf itself when nothing changed."""
        import onnx_ir as ir

        if not changed:
            return original
        return ctx.store.strip_ir(ir_model) if ctx.store is not None else ir.serde.serialize_model(ir_model)

    def nodes(self, model: onnx.ModelProto):
        return model.graph.node


class OnnxscriptAdapter:
    """onnxscript's rules: an ``onnx_ir.Model`` edited in place; a crash is an error of the run."""

    name = "onnxscript"

    def working(self, store, skeleton: onnx.ModelProto):
        return store.load_ir(skeleton)

    def context_store(self, store):
        return None

    def skeleton(self, store, model) -> onnx.ModelProto:
        name_nodes(model.graph)
        return store.strip_ir(model)

    def failure(self, step: str, error: Exception, store, skeleton) -> StepOutcome:
        msg = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise FusionError(f"{self.name} step {step} failed: {msg}") from error

    def to_ir(self, ctx: EngineContext, model):
        return model

    def from_ir(self, ctx: EngineContext, ir_model, original, changed: bool):
        return ir_model

    def nodes(self, model):
        return model.graph


ENGINE_NAMES = ("ort", "onnxscript")
_ADAPTERS = {"ort": OrtAdapter(), "onnxscript": OnnxscriptAdapter()}


def adapter(engine: str):
    """The adapter of ``engine`` ("ort" or "onnxscript")."""
    try:
        return _ADAPTERS[engine]
    except KeyError:
        raise FusionError(f"engine must be 'ort' or 'onnxscript', not {engine!r}") from None
