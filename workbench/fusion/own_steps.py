"""Steps that run the workbench's own onnxscript rules (``rules/``) inside the engine chains.

The ``ort`` chain works on ``ModelProto`` and the ``onnxscript`` chain on
``onnx_ir.Model``; each rule gets one step function per chain it runs in.
"""

from __future__ import annotations

import onnx

from .engine_logs import quiet_stdout, trace_rules
from .engine_types import EngineContext, StepOutcome


def ort_sdpa_attention(ctx: EngineContext, model: onnx.ModelProto) -> StepOutcome:
    """Our onnxscript rule for TorchScript-exported SDPA attention (see ``rules/sdpa_attention.py``)."""
    import onnx_ir as ir

    from .rules import fuse_sdpa_attention, sdpa_attention_rules

    ir_model = ctx.store.load_ir(model) if ctx.store is not None else ir.serde.deserialize_model(model)
    with quiet_stdout():
        count = fuse_sdpa_attention(ir_model)
    if not count:
        # Nothing changed (the in-memory model included): keep the protobuf as it is and say
        # where matching stopped.
        lines = trace_rules(ir_model, sdpa_attention_rules())
        return StepOutcome(model, counts={"sdpa_attention": 0}, messages=lines,
                           notes=["This export does not use the TorchScript SDPA attention pattern; "
                                  "ONNX Runtime's own attention step comes next."])
    out = ctx.store.strip_ir(ir_model) if ctx.store is not None else ir.serde.serialize_model(ir_model)
    for n in out.graph.node:
        if n.op_type == "Attention" and n.domain == "com.microsoft" and not ctx.num_heads:
            for a in n.attribute:
                if a.name == "num_heads":
                    ctx.num_heads = int(a.i)
    return StepOutcome(out, counts={"sdpa_attention": int(count)})


_NO_STANDARD = ("nothing to map: no standard ONNX Attention nodes (the dynamo exporter writes them from opset 23 "
                "for sdpa attention); the step was not run.")


def skip_without_standard_attention(hist: dict, skeleton: onnx.ModelProto) -> str:
    """The ``skip`` test of the ``standard_attention`` step: "" when a standard ``Attention`` is present."""
    if hist.get("Attention", 0) and any(n.op_type == "Attention" and n.domain in ("", "ai.onnx")
                                        for n in skeleton.graph.node):
        return ""
    return _NO_STANDARD


def _map_standard_attention(ir_model) -> StepOutcome:
    """Run the standard-Attention rule on an ``onnx_ir.Model`` in place; counts, reasons and notes."""
    from .rules import fuse_standard_attention, standard_attention_rules

    def standard() -> int:
        return sum(1 for n in ir_model.graph if n.op_type == "Attention" and n.domain in ("", "ai.onnx"))

    before = standard()
    with quiet_stdout():
        count = fuse_standard_attention(ir_model)
    left = standard()
    lines = trace_rules(ir_model, standard_attention_rules()) if left else []
    notes = []
    if count and left:
        # Part of the layers mapped: the diagnostic must still say why the rest did not.
        from .diagnostics import summarize_messages

        why = "; ".join(summarize_messages(lines)) or "no reason given"
        notes.append(f"mapped {count} of {before} standard Attention nodes to MultiHeadAttention; {left} stay "
                     f"as they are. onnxscript's matcher (workbench rule) says: {why}")
    return StepOutcome(ir_model, counts={"standard_attention": int(count)}, messages=lines, notes=notes)


def _heads_of(nodes, ctx: EngineContext) -> None:
    for n in nodes:
        if n.op_type == "MultiHeadAttention" and not ctx.num_heads:
            for a in n.attribute:
                if a.name == "num_heads":
                    ctx.num_heads = int(a.i)


def ort_standard_attention(ctx: EngineContext, model: onnx.ModelProto) -> StepOutcome:
    """ONNX's standard ``Attention`` → ``MultiHeadAttention`` in the ort chain (``rules/standard_attention.py``)."""
    import onnx_ir as ir

    ir_model = ctx.store.load_ir(model) if ctx.store is not None else ir.serde.deserialize_model(model)
    out = _map_standard_attention(ir_model)
    if not out.counts["standard_attention"]:
        return StepOutcome(model, counts=out.counts, messages=out.messages, notes=out.notes)
    proto = ctx.store.strip_ir(ir_model) if ctx.store is not None else ir.serde.serialize_model(ir_model)
    _heads_of(proto.graph.node, ctx)
    return StepOutcome(proto, counts=out.counts, messages=out.messages, notes=out.notes)


def os_standard_attention(ctx: EngineContext, model) -> StepOutcome:
    """ONNX's standard ``Attention`` → ``MultiHeadAttention`` in the onnxscript chain, in place.

    onnxscript's ``attention`` step, which comes next, may then fold the
    projection biases in and pack Q, K and V into one contrib ``Attention``.
    """
    return _map_standard_attention(model)


def _own_rule(label: str, fuse, note: str):
    """A step of the onnxscript chain running one of the workbench's imperative rules, in place."""

    def run(ctx: EngineContext, model) -> StepOutcome:
        names = [v.name for v in model.graph.outputs]
        count, reasons = fuse(model)
        _keep_output_names(model, names)
        notes = [] if count or not reasons else [note]
        return StepOutcome(model, counts={label: int(count)}, messages=sorted(set(reasons)), notes=notes)

    return run


def _keep_output_names(model, names: list[str]) -> None:
    """Give the graph outputs back the names they had before a rule replaced their producer.

    ``replace_all_uses_with(..., replace_graph_outputs=True)`` makes the new node's value the graph output
    under its own name (``val_19``): the fused file would answer ``last_hidden_state`` under another name.
    """
    outs = list(model.graph.outputs)
    for v, name in zip(outs, names):
        if v.name == name or not name:
            continue
        for node in model.graph:  # the replaced value, when its node is still there, gives its name up
            for o in node.outputs:
                if o.name == name and o is not v:
                    o.name = f"{name}__replaced"
        v.name = name


def os_encoder_rotary(ctx: EngineContext, model) -> StepOutcome:
    """Rotary embeddings (rotate_half) → ``com.microsoft.RotaryEmbedding`` (``rules/rotary.py``)."""
    from .rules.rotary import fuse_rotary

    return _own_rule("encoder_rotary", fuse_rotary,
                     "a rotate_half rotation was found but not fused; the reasons name where it stopped")(ctx, model)


def os_encoder_attention(ctx: EngineContext, model) -> StepOutcome:
    """Rotary encoders' softmax attention → ``MultiHeadAttention`` (``rules/encoder_attention.py``)."""
    from .rules.encoder_attention import fuse_encoder_attention

    def fuse(m):
        return fuse_encoder_attention(m, rotary_only=True)

    return _own_rule("encoder_attention", fuse,
                     "attention cores were found but not fused; the reasons name where reading them stopped")(ctx, model)


def os_softmax_attention(ctx: EngineContext, model) -> StepOutcome:
    """Any softmax attention core the earlier attention steps left → ``MultiHeadAttention`` (late catch-all)."""
    from .rules.encoder_attention import fuse_encoder_attention

    return _own_rule("softmax_attention", fuse_encoder_attention,
                     "attention cores were left unfused; the reasons name where reading them stopped")(ctx, model)


def os_tanh_gelu(ctx: EngineContext, model) -> StepOutcome:
    """GELU's tanh approximation (gelu_new) → ``FastGelu`` (``rules/tanh_gelu.py``)."""
    from .rules.tanh_gelu import fuse_tanh_gelu

    return _own_rule("tanh_gelu", fuse_tanh_gelu,
                     "a tanh was found but not fused as GELU; the reasons name where reading it stopped")(ctx, model)


def skip_without(*ops: str):
    """A ``skip`` test: "" when one of ``ops`` is in the graph, else why the step cannot change it."""

    def skip(hist: dict, skeleton: onnx.ModelProto) -> str:
        if any(hist.get(op, 0) for op in ops):
            return ""
        return f"nothing to fuse: no {' or '.join(ops)} node in the graph; the step was not run."

    return skip


def os_encoder_rms_norm(ctx: EngineContext, model) -> StepOutcome:
    """Written-out RMSNorm → ``SimplifiedLayerNormalization`` (``rules/norms.py``)."""
    from .rules.norms import fuse_rms_norm

    return _own_rule("encoder_rms_norm", fuse_rms_norm,
                     "an RMS norm was found but not fused; the reasons name where it stopped")(ctx, model)


def os_encoder_skip_norm(ctx: EngineContext, model) -> StepOutcome:
    """Residual Add + bias-free LayerNorm / RMSNorm → the Skip kernels (``rules/norms.py``)."""
    from .rules.norms import fuse_skip_norms

    return _own_rule("encoder_skip_norm", fuse_skip_norms,
                     "a residual norm was found but not fused; the reasons name where it stopped")(ctx, model)


def os_encoder_silu(ctx: EngineContext, model) -> StepOutcome:
    """SiLU (``x * Sigmoid(x)``) → ``QuickGelu(alpha=1)`` (``rules/activations.py``)."""
    from .rules.activations import fuse_silu

    out = _own_rule("encoder_silu", fuse_silu, "")(ctx, model)
    if out.counts["encoder_silu"]:
        out.notes.append("the gated MLP's multiply stays a plain Mul: ONNX Runtime has no CPU kernel for a whole "
                         "gated MLP (SwiGLU, GeGLU)")
    return out
