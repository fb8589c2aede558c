"""Any encoder's softmax attention core → ``com.microsoft.MultiHeadAttention`` (workbench rule).

The encoders of 2025 compute attention as every BERT does, but around a core
that neither engine recognises in their exports: the queries and keys come out
of a rotary embedding, the projections are packed in one 5-D view (ModernBERT)
or split from one MatMul (NomicBERT, GTE), the scale is folded in one or two
places, and the mask is a padding mask combined with a sliding window. What
every form shares is the core, per layer::

    scores = MatMul(Q * s_q, K^T * s_k) [* s]      # Q: [B, N, S, H]; K^T reached through Transpose/Reshape
    p      = Softmax(scores [+ bias])              # bias: [B|1, N|1, S, L], e.g. padding + window
    p      = Where(IsNaN(p), 0, p)                 # optional guard of the TorchScript export
    y      = Reshape(Transpose(MatMul(p, V), 0,2,1,3), [B, S, N*H])

This rule finds each ``Softmax``, reads Q, K, V, the scale and the bias from
the tensors' shapes (no fixed chain of nodes), and writes::

    y = MultiHeadAttention(Reshape(Transpose(Q, 0,2,1,3), [0, 0, -1]), K, V, attention_bias=bias,
                           num_heads=N, scale=s_q * s_k * s)

K and V stay in their ``[B, N, L, H]`` layout, which ONNX Runtime's kernel
reads directly; only Q is merged back to ``[B, S, N*H]``. The bias keeps
whatever the model computed (a local layer's window included), so the
result is exact at every real token. Where the core is not found, the reason
names the node where the reading stopped.
"""

from __future__ import annotations

import numpy as np

from ..graph_utils import (
    SCALE_OPS,
    const,
    dims,
    fold_ints,
    initializer,
    node_label,
    only_consumer,
    readers,
    same_dim,
    scalar,
)
from ..lazy import ir
from ..rule import Match, Rewrite, Rule
from .score_terms import build_bias, eval_scalar, head_size, heads4, scores_and_terms, term_dims_ok


def _strip_scale(value: ir.Value) -> tuple[ir.Value, float]:
    """Walk back through multiplications / divisions by a constant scalar; the value and the factor."""
    factor = 1.0
    for _ in range(4):
        node = value.producer()
        if node is None or node.op_type not in SCALE_OPS:
            break
        a, b = node.inputs[0], node.inputs[1]
        sb = scalar(b)
        if sb is not None:
            factor = factor * sb if node.op_type == "Mul" else factor / sb
            value = a
            continue
        sa = scalar(a)
        if sa is not None and node.op_type == "Mul":
            factor *= sa
            value = b
            continue
        break
    return value, factor


def _find_key(kt: ir.Value, q_dims: list, graph: ir.Graph,
              subs: dict | None = None) -> tuple[ir.Value | None, float, list[ir.Node], str]:
    """K in [B, N, L, H] behind K^T ([B, N, H, L]): the value, its scale, nodes to insert, or why not."""
    value, factor = _strip_scale(kt)
    kt_dims = dims(kt)
    if kt_dims is not None and len(kt_dims) == 3:
        return _find_key3(kt, q_dims[3], subs or {})
    if kt_dims is None or len(kt_dims) != 4:
        return None, 1.0, [], "the key side of the scores is not a 4-D tensor"
    head = q_dims[3]
    for _ in range(6):
        d = dims(value)
        if (value is not kt and d is not None and len(d) == 4 and d[3] == head and same_dim(d[0], q_dims[0])
                and same_dim(d[2], kt_dims[3])):
            return value, factor, [], ""  # [B, N, L, H] behind K^T: that is K
        node = value.producer()
        if node is None:
            break
        if node.op_type == "Transpose":
            perm = tuple(node.attributes.get_ints("perm", ()))
            src = node.inputs[0]
            sd = dims(src)
            if perm == (0, 1, 3, 2) and sd is not None and len(sd) == 4 and sd[3] == head:
                return src, factor, [], ""  # K^T = Transpose(K, 0,1,3,2)
            if perm == (0, 2, 3, 1) and sd is not None and len(sd) == 4 and sd[3] == head:
                # TorchScript: K^T = Transpose(K in [B, L, N, H], 0,2,3,1); K = Transpose(., 0,2,1,3).
                t = ir.node("Transpose", [src], attributes={"perm": [0, 2, 1, 3]})
                return t.outputs[0], factor, [t], ""
            value = src
        elif node.op_type == "Reshape":
            value = node.inputs[0]
        elif node.op_type in SCALE_OPS:
            value, f = _strip_scale(value)
            factor *= f
        else:
            break
    return None, 1.0, [], f"the key side of the scores stops at {node_label(value.producer()) if value.producer() else value.name}"


def _find_key3(kt: ir.Value, head: int, subs: dict) -> tuple[ir.Value | None, float, list[ir.Node], str]:
    """DeBERTa's K^T on [B*N, H, L] = Transpose(K on [B*N, L, H]) / scale: K as [B, N, L, H] behind its Reshape.

    The TorchScript export computes the scale at run time (``sqrt(q.size(-1) * 3)``) from a head size it
    left symbolic; with that size known (``subs``) the scale is evaluated once here.
    """
    value, factor, computed = kt, 1.0, []
    for _ in range(3):
        node = value.producer()
        if node is None or node.op_type not in SCALE_OPS:
            break
        stripped, f = _strip_scale(value)
        if stripped is not value:
            value, factor = stripped, factor * f
            continue
        computed.append(node)
        value = node.inputs[0]
    node = value.producer()
    if node is None or node.op_type != "Transpose" or tuple(node.attributes.get_ints("perm", ())) != (0, 2, 1):
        return None, 1.0, [], (f"the key side of the scores stops at "
                               f"{node_label(node) if node is not None else value.name}: not K transposed")
    k = heads4(node.inputs[0])
    if k is None:
        return None, 1.0, [], f"the key before {node_label(node)} is not split from a [batch, heads, keys, size] tensor"
    kd = dims(k)
    if isinstance(kd[3], str):
        subs = {**subs, kd[3]: head}
    for sn in computed:
        c = eval_scalar(sn.inputs[1], subs)
        if not c:
            return None, 1.0, [], (f"the key side of the scores is scaled at {node_label(sn)} by a tensor computed "
                                   f"at run time, not a constant scale the kernel can take")
        factor = factor * c if sn.op_type == "Mul" else factor / c
    return k, factor, [], ""


def _reader(value: ir.Value) -> ir.Node | None:
    """The one node reading ``value`` besides ``Shape`` nodes (which only build the old reshape targets)."""
    others = [r for r in readers(value) if r.op_type != "Shape"]
    return others[0] if len(others) == 1 and not value.is_graph_output() else None


def _output(ctx: ir.Node) -> tuple[ir.Node | None, str]:
    """The Reshape that merges the heads of ``ctx``'s result into [B, S, N*H]; or why not."""
    t = _reader(ctx.outputs[0])
    for _ in range(2):  # the TorchScript export reshapes [B, N, S, H] to itself first
        out4 = dims(t.outputs[0]) if t is not None and t.op_type == "Reshape" else None
        if out4 is None or len(out4) != 4:
            break
        t = _reader(t.outputs[0])
    if t is None or t.op_type != "Transpose" or tuple(t.attributes.get_ints("perm", ())) != (0, 2, 1, 3):
        return None, f"the context {node_label(ctx)} is not transposed back to [batch, sequence, heads, size]"
    r = _reader(t.outputs[0])
    if r is None or r.op_type != "Reshape":
        return None, f"the heads after {node_label(t)} are not merged by a Reshape"
    out = dims(r.outputs[0])
    target = fold_ints(r.inputs[1])
    if (out is None or len(out) != 3) and (target is None or target.size != 3):
        return None, f"{node_label(r)} does not give a 3-D [batch, sequence, hidden] tensor"
    return r, ""


def _last_entry(target: ir.Value) -> int | None:
    """The last entry of a Reshape target, when it is a constant (even if the others are computed)."""
    whole = fold_ints(target)
    if whole is not None:
        return int(whole.reshape(-1)[-1]) if whole.size and whole.reshape(-1)[-1] > 0 else None
    node = target.producer()
    if node is None or node.op_type != "Concat" or not node.inputs:
        return None
    last = fold_ints(node.inputs[-1])
    return int(last.reshape(-1)[-1]) if last is not None and last.size and last.reshape(-1)[-1] > 0 else None


def _heads_count(qd: list, vd: list, out: ir.Node, head: int) -> int | None:
    """The number of heads: from the query or value dims, the merged output, or the output projection's weight."""
    heads = qd[1] if isinstance(qd[1], int) else vd[1] if isinstance(vd[1], int) else None
    od = dims(out.outputs[0])
    if heads is None and od is not None and isinstance(od[-1], int):
        heads = od[-1] // head
    if heads is None:
        last = _last_entry(out.inputs[1])
        heads = last // head if last and last % head == 0 else None
    if heads is None:
        # The merged heads feed the output projection, whose constant weight is [N*H, hidden].
        proj = _reader(out.outputs[0])
        w = const(proj.inputs[1]) if proj is not None and proj.op_type == "MatMul" else None
        heads = w.shape[0] // head if w is not None and w.ndim == 2 and w.shape[0] % head == 0 else None
    return heads


def match_attention(sm: ir.Node, graph: ir.Graph) -> tuple[dict | None, str]:
    """Q, K, V, bias terms, scale, heads and the output Reshape of the core around Softmax ``sm``; or why not."""
    if sm.attributes.get_int("axis", -1) not in (-1, 3):
        return None, f"{node_label(sm)} is not over the last axis"
    scores, why = scores_and_terms(sm)
    if scores is None:
        return None, why
    mm, s = scores["mm"], scores["scale"]
    q, s_q = _strip_scale(mm.inputs[0])
    qd, subs = dims(q), {}
    if qd is not None and len(qd) == 3:  # DeBERTa: heads folded into the batch, [B*N, S, H]
        q = heads4(q)
        qd = dims(q) if q is not None else None
        if qd is not None and len(qd) == 4 and not isinstance(qd[3], int):
            subs = {qd[3]: head_size(q)}  # TorchScript leaves H symbolic: the hidden size over the heads
            qd[3] = subs[qd[3]]
    if qd is None or len(qd) != 4 or not isinstance(qd[3], int):
        return None, f"the query of {node_label(mm)} is not a 4-D [batch, heads, sequence, head size] tensor"
    k, s_k, extra, why = _find_key(mm.inputs[1], qd, graph, subs)
    if k is None:
        return None, why
    why = term_dims_ok(scores["terms"], scores["target4"])
    if why:
        return None, f"{why} (before {node_label(sm)})"
    # The context: Softmax (optionally NaN-guarded) times V.
    p_out = sm.outputs[0]
    reader = only_consumer(p_out)
    guard = None
    if reader is not None and reader.op_type == "IsNaN":
        return None, f"{node_label(sm)}'s NaN guard is read in an unexpected way"
    users = readers(p_out)
    if len(users) == 2 and {r.op_type for r in users} == {"IsNaN", "Where"}:
        guard = next(r for r in users if r.op_type == "Where")
        p_out = guard.outputs[0]
        reader = only_consumer(p_out)
    view = reader if reader is not None else _reader(p_out)  # TorchScript also reads the shape of p
    if view is not None and view.op_type == "Reshape" and len(dims(view.outputs[0]) or ()) == 3:
        p_out = view.outputs[0]  # DeBERTa: [B, N, S, L] viewed as [B*N, S, L] for a batched MatMul with V
        reader = only_consumer(p_out)
    if reader is None or reader.op_type != "MatMul" or reader.inputs[0] is not p_out:
        return None, f"the probabilities of {node_label(sm)} do not go into one MatMul with V"
    v = reader.inputs[1]
    if len(dims(v) or ()) == 3:
        v = heads4(v) or v
    vd = dims(v)
    if vd is None or len(vd) != 4:
        return None, f"the value side of {node_label(reader)} is not 4-D [batch, heads, keys, head size]"
    out, why = _output(reader)
    if out is None:
        return None, why
    head = qd[3]
    heads = _heads_count(qd, vd, out, head)
    if not heads:
        return None, f"the number of heads around {node_label(sm)} is not known"
    return {"q": q, "k": k, "v": v, "terms": scores["terms"], "target4": scores["target4"],
            "scale": s * s_q * s_k, "heads": int(heads), "out": out, "extra": extra, "head": head}, ""


def _rotary_fed(parts: dict) -> bool:
    """True when the query or key comes out of a rotary embedding (a rotary encoder's core)."""
    return any((v.producer() is not None and v.producer().op_type == "RotaryEmbedding")
               for v in (parts["q"], parts["k"]))


class SoftmaxAttentionRule(Rule):
    """Every softmax attention core the attention steps before it left → ``MultiHeadAttention``."""

    name = "softmax_attention"
    title = "MultiHeadAttention from any softmax core left (workbench rule)"
    matches = ("every Softmax attention core the attention steps before it left: Q·K^T (scale folded anywhere), plus "
               "a 4-D bias (padding mask, MPNet's relative-position bias, DeBERTa's disentangled scores), Softmax "
               "(NaN guard or not), times V, heads merged back; ELECTRA, ALBERT, MPNet and DeBERTa exports, and BERT "
               "forms onnxscript's rules miss")
    rewrites = ("MatMul(Q*s, K^T*s) -> Add(bias) -> Softmax -> MatMul(V) -> Transpose -> Reshape  =>  "
                "MultiHeadAttention(Q as [B,S,N*H], K, V as [B,N,L,H], attention_bias)")
    emits = "MultiHeadAttention"
    prerequisites = ("attention",)
    effect = ("one kernel per layer for the softmax·V core; whatever the model adds to the scores is computed "
              "outside and passed as the attention bias, so the result stays exact. Runs after the attention "
              "step, on the cores it left")
    after = {"onnxscript": "attention"}
    anchors = ("Softmax",)
    label = "attention"
    unfused_note = "attention cores were left unfused; the reasons name where reading them stopped"
    #: Only cores whose query or key comes out of a RotaryEmbedding (the early, rotary-encoder step).
    rotary_only = False

    def begin(self, model) -> None:
        self._graph, self._merge, self._biases = model.graph, None, {}

    def end(self) -> None:
        self._graph = self._biases = None

    def match(self, sm) -> Match | None:
        parts, why = match_attention(sm, self._graph)
        if parts is None:
            return Match.fail(why)
        if self.rotary_only and not _rotary_fed(parts):
            return None  # left to onnxscript's own rules, which pack Q, K and V into one Attention for BERT
        return Match(sm=sm, **parts)

    def rewrite(self, m: Match) -> Rewrite:
        if self._merge is None:
            self._merge = initializer(self._graph, "mha_merge_heads_shape", np.array([0, 0, -1], dtype=np.int64))
        qt = ir.node("Transpose", [m.q], attributes={"perm": [0, 2, 1, 3]})
        q3 = ir.node("Reshape", [qt.outputs[0], self._merge])
        inputs, new = [q3.outputs[0], m.k, m.v], [*m.extra, qt, q3]
        if m.terms:
            bias, made = build_bias(self._graph, m.terms, m.target4, self._biases)
            new += made
            inputs += [None, None, bias]
        mha = ir.node("MultiHeadAttention", inputs, attributes={"num_heads": m.heads, "scale": float(m.scale)},
                      domain="com.microsoft", name=f"{m.out.name or 'attention'}/MultiHeadAttention")
        return Rewrite([*new, mha], {m.out.outputs[0]: mha.outputs[0]})


class EncoderAttentionRule(SoftmaxAttentionRule):
    """The same reading of the core, early in the chain and only around rotary Q and K (rotary encoders)."""

    name = "encoder_attention"
    title = "MultiHeadAttention around rotary Q and K (workbench rule)"
    matches = ("the softmax attention core of a rotary encoder, read from the tensors' shapes: Q·K^T (scale folded "
               "anywhere), plus the mask or sliding-window bias, Softmax (NaN guard or not), times V, heads merged back")
    prerequisites = ("encoder_rotary",)
    effect = ("one kernel per layer; a local layer's window stays exact as the attention bias. Needs the rotation "
              "fused first (it only takes cores whose Q or K comes out of RotaryEmbedding; BERT's go to "
              "onnxscript's own rules)")
    in_bert = False
    after = {"onnxscript": "partial_rotary_embedding"}
    anchors = ("Softmax",)
    needs = ("RotaryEmbedding",)
    rotary_only = True
    unfused_note = "attention cores were found but not fused; the reasons name where reading them stopped"
