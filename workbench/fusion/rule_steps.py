"""The one generic runner that turns any workbench rule (``rule.Rule``) into a step of a chain.

The step hands the rule the working model as an ``onnx_ir.Model`` (the engine adapter converts: the
ort chain works on ``ModelProto``, the onnxscript chain on ``onnx_ir``), runs one pass of it, and
reports what it did as data: the count under the rule's name, its reasons (where matching stopped,
naming the node and its encoder layer) and its notes. The timeline takes the snapshot, the diff
(provenance) and parity as for any step. A graph without the rule's anchors is not visited at all.
"""

from __future__ import annotations

from .adapters import adapter
from .anchors import Ops
from .engine_types import EngineContext, EngineStep, StepOutcome


def rule_anchors(rule) -> Ops:
    """The skip test of ``rule``: its anchor op types (in its anchor domain)."""
    return Ops(*rule.anchors, needs=tuple(rule.needs), domain=rule.anchor_domain, why=rule.absent)


def rule_step(rule, engine: str, *, version: str = "") -> EngineStep:
    """The step that runs ``rule`` in the chain of ``engine``."""

    def run(ctx: EngineContext, model) -> StepOutcome:
        eng = adapter(engine)
        work = eng.to_ir(ctx, model)
        result = rule.apply(work)  # (a rule's own prints stay visible: a participant debugging one sees them)
        out = eng.from_ir(ctx, work, model, changed=bool(result.count))
        if result.count:
            _heads_from(ctx, eng.nodes(out))
        return StepOutcome(out, counts={rule.name: int(result.count)}, messages=list(result.reasons),
                           notes=list(result.notes))

    # A rule's step without its anchors is not run at all: a walk changes nothing where it finds no anchor;
    # a pattern rule's pass would also propagate constants and drop unused nodes, which the next
    # onnxscript step does anyway.
    return EngineStep(rule.name, run, rule_anchors(rule), version=version)


def _heads_from(ctx: EngineContext, nodes) -> None:
    """The head count an attention node the rule emitted says, for later steps (ORT's clean-ups read it)."""
    if ctx.num_heads:
        return
    for n in nodes:
        if n.op_type in ("Attention", "MultiHeadAttention") and n.domain == "com.microsoft":
            heads = _int_attr(n, "num_heads")
            if heads:
                ctx.num_heads = heads
                return


def _int_attr(node, name: str) -> int:
    attrs = node.attributes if hasattr(node, "attributes") else {a.name: a for a in node.attribute}
    a = attrs.get(name)
    if a is None:
        return 0
    return int(a.value if hasattr(a, "value") else a.i)
