"""The one generic runner that turns any workbench rule (``rule.Rule``) into a step of a chain.

The step hands the rule the working model as an ``onnx_ir.Model`` (the engine adapter converts: the
ort chain works on ``ModelProto``, the onnxscript chain on ``onnx_ir``), runs one pass of it, and
reports what it did as data: the count under the rule's name, its reasons (where matching stopped,
naming the node and its encoder layer) and its notes. The timeline takes the snapshot, the diff
(provenance) and parity as for any step. A graph without the rule's anchors is not visited at all.
"""

from __future__ import annotations

import traceback

from .adapters import adapter
from .anchors import Ops
from .engine_types import EngineContext, EngineStep, StepFailed, StepOutcome
from .scheduler import rule_time_limit, run_limited


def rule_anchors(rule) -> Ops:
    """The skip test of ``rule``: its anchor op types (in its anchor domain)."""
    return Ops(*rule.anchors, needs=tuple(rule.needs), domain=rule.anchor_domain, why=rule.absent)


def rule_step(rule, engine: str, *, version: str = "") -> EngineStep:
    """The step that runs ``rule`` in the chain of ``engine``.

    A rule added at run time (one with a ``version``: a participant's code) runs under the rule time
    limit (``scheduler.run_limited``), and an error in it fails its step, not the chain; the package's
    own rules run as they are. Once a pass ran out of time, this step fails at once on later runs (a
    toggle of another step does not wait for it again) until the limit is raised above the one it ran
    out of, or the rule is added again.
    """
    timed_out: dict[str, float] = {}

    def run(ctx: EngineContext, model) -> StepOutcome:
        eng = adapter(engine)
        if not version:
            work = eng.to_ir(ctx, model)
            return _outcome(rule, eng, ctx, work, model, rule.apply(work))
        limit = rule_time_limit()
        if timed_out and limit <= timed_out["limit"]:
            raise StepFailed(f"rule {rule.name} did not finish within {timed_out['limit']:g} s before and is not "
                             f"run again; fix it and add it again, or raise app.rule_time_limit_s")
        work = eng.to_ir(ctx, model)
        try:
            # (in a copy of this thread's context: it reads this timeline's weights; a rule's own prints stay
            # visible: a participant debugging one sees them)
            result = run_limited(lambda: rule.apply(work), f"rule {rule.name}", limit)
        except StepFailed:
            timed_out["limit"] = limit
            raise
        except Exception as e:  # a participant's bug fails this step, not the chain
            raise StepFailed(f"rule {rule.name} raised {_where(e)}; the graph is left as it was") from e
        return _outcome(rule, eng, ctx, work, model, result)

    # A rule's step without its anchors is not run at all: a walk changes nothing where it finds no anchor;
    # a pattern rule's pass would also propagate constants and drop unused nodes, which the next
    # onnxscript step does anyway.
    return EngineStep(rule.name, run, rule_anchors(rule), version=version)


def _outcome(rule, eng, ctx: EngineContext, work, model, result) -> StepOutcome:
    """The step's outcome from a pass's ``RuleResult``: the engine's model back from ``work``, the counts."""
    out = eng.from_ir(ctx, work, model, changed=bool(result.count))
    if result.count:
        _heads_from(ctx, eng.nodes(out))
    return StepOutcome(out, counts={rule.name: int(result.count)}, messages=list(result.reasons),
                       notes=list(result.notes))


def _where(e: Exception) -> str:
    """``Error: message (file, line)`` of the innermost frame an exception went through."""
    frames = traceback.extract_tb(e.__traceback__)
    at = f" ({frames[-1].filename.rsplit('/', 1)[-1]}, line {frames[-1].lineno})" if frames else ""
    msg = " ".join(str(e).split())[:200]
    return f"{type(e).__name__}{': ' + msg if msg else ''}{at}"


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
