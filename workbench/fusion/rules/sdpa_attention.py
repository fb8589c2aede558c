"""Attention from the TorchScript export of transformers' SDPA attention.

With ``attn_implementation="sdpa"`` (transformers' default) the TorchScript
exporter decomposes ``scaled_dot_product_attention`` into a pattern neither
engine knows: the scale is split as ``sqrt(1/sqrt(d))`` and multiplied into
Q and into the transposed K (perm 0,2,3,1), the mask is a boolean tensor
turned into ``Where(mask, 0, -inf)``, and the softmax is guarded by
``Where(IsNaN(p), 0, p)``. Per encoder layer::

    q = Transpose(Reshape(Add(MatMul(x, Wq), bq), [B,S,N,D]), perm=0,2,1,3)
    k = Transpose(Reshape(Add(MatMul(x, Wk), bk), [B,S,N,D]), perm=0,2,3,1)
    v = Transpose(Reshape(Add(MatMul(x, Wv), bv), [B,S,N,D]), perm=0,2,1,3)
    p = Softmax(MatMul(Mul(q, s), Mul(k, s)) + Where(mask, 0, -inf))
    p = Where(IsNaN(p), 0, p)                          # optional
    y = MatMul(p, v) -> Reshape([B,N,S,D])?  -> Transpose(0,2,1,3) -> Reshape([B,S,H])

becomes one ``com.microsoft.Attention(x, [Wq|Wk|Wv], [bq|bk|bv], mask_int32)``
with ``num_heads = N``. The Q/K/V projections are packed into one weight.

What the check insists on (each failure is a ``MatchResult`` reason the
timeline shows):

* Wq, Wk, Wv are constant ``[H, H]`` and the biases constant ``[H]``;
* the head split has a constant head size D with N * D = H, and every
  reshape keeps batch and sequence where they were;
* ``s_q * s_k == 1/sqrt(D)`` (the scale Attention uses);
* the additive mask is ``Where(cond, 0, -inf or a large negative)`` and
  ``cond`` is computed from exactly one 2-D integer or boolean graph input
  (the padding mask) without comparing two computed indices (which a causal
  mask would do). The fused node reads that input as a raw 2-D mask
  (1 = attend), so left and right padding both stay exact.

The Softmax NaN guard only changes rows whose every key is masked (an
all-zero mask row); there the original gives 0 and Attention gives the mean
of V. Such rows carry no token, so no model output a user reads changes.
"""

from __future__ import annotations

import math

import numpy as np

from ..graph_utils import const, ir_utils, readers, unique_name
from ..lazy import ir
from ..rule import PatternRule, pattern

#: Ops that, comparing two computed index tensors, build a causal or sliding-window mask.
_ORDER_OPS = frozenset({"Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Trilu", "CumSum"})
#: Ops whose inputs are only read for their shape, not their values.
_SHAPE_ONLY = frozenset({"Shape", "Size"})
#: The element types of a padding mask input (``ir.DataType`` names).
_INT_TYPES = ("INT64", "INT32", "BOOL", "INT8", "UINT8", "INT16")


def _dim_ref(value: ir.Value, depth: int = 0):
    """Where one entry of a shape comes from: an int, or (tensor, axis) read with Shape, or None."""
    if depth > 8:
        return None
    c = const(value)
    if c is not None:
        return int(c.reshape(-1)[0]) if c.size == 1 else None
    node = value.producer()
    if node is None:
        return None
    if node.op_type in ("Unsqueeze", "Squeeze", "Cast", "Identity") and node.inputs:
        return _dim_ref(node.inputs[0], depth + 1)
    if node.op_type == "Gather" and len(node.inputs) == 2:
        idx = const(node.inputs[1])
        if idx is None or idx.size != 1:
            return None
        axis = _shape_axis(node.inputs[0], int(idx.reshape(-1)[0]), depth + 1)
        return axis
    return None


def _shape_axis(shape_value: ir.Value, index: int, depth: int):
    """(tensor, axis) for element ``index`` of ``shape_value`` when it is a (permuted) Shape(tensor)."""
    node = shape_value.producer()
    if node is None or depth > 8:
        return None
    if node.op_type == "Shape":
        start = node.attributes.get_int("start", 0)
        if start < 0 or node.attributes.get("end") is not None:
            return None
        src = node.inputs[0]
        axis = index + start
        # Shape(Transpose(t)) reads t's permuted axis.
        prod = src.producer()
        if prod is not None and prod.op_type == "Transpose":
            perm = prod.attributes.get_ints("perm", None)
            if perm is not None and 0 <= axis < len(perm):
                return (prod.inputs[0], int(perm[axis]))
        return (src, axis)
    if node.op_type == "Gather" and len(node.inputs) == 2:
        # ORT's transpose optimizer writes Shape(Transpose(t)) as Gather(Shape(t), perm).
        perm = const(node.inputs[1])
        if perm is None or perm.ndim != 1 or not 0 <= index < perm.size:
            return None
        return _shape_axis(node.inputs[0], int(perm[index]), depth + 1)
    return None


def _shape_entries(shape: ir.Value) -> list | None:
    """The entries of a Reshape target: constants, or one reference per Concat input."""
    c = const(shape)
    if c is not None:
        return [int(v) for v in c.reshape(-1)]
    node = shape.producer()
    if node is None or node.op_type != "Concat":
        return None
    entries = []
    for inp in node.inputs:
        cv = const(inp)
        if cv is not None:
            entries.extend(int(v) for v in cv.reshape(-1))
        else:
            entries.append(_dim_ref(inp))
    return entries


class SdpaAttentionFusion(PatternRule):
    """TorchScript-exported SDPA self-attention → ``com.microsoft.Attention``."""

    name = "sdpa_attention"
    title = "Attention from exported SDPA (workbench rule)"
    matches = ("the self-attention block as the TorchScript exporter writes transformers' SDPA attention: "
               "sqrt-scale multiplied into Q and into K transposed with perm 0,2,3,1, a boolean padding mask turned "
               "into Where(mask, 0, -inf), Softmax guarded by Where(IsNaN)")
    rewrites = ("MatMul+Add (Q,K,V) -> Reshape -> Transpose -> Mul(scale) -> MatMul -> Add(Where(mask, 0, -inf)) -> "
                "Softmax -> Where(IsNaN) -> MatMul(V) -> Transpose -> Reshape")
    emits = "Attention"
    effect = ("the pattern neither engine matches (TorchScript + sdpa): Q, K and V become one packed MatMul and "
              "about 30 nodes become 1 kernel; runs in the ort chain just before ORT's own attention step")
    after = {"ort": "rotary_embedding"}
    anchors = ("Softmax",)
    case_name = "workbench_sdpa_attention"
    # The exporter reads Shape() of several intermediate tensors to build the reshape targets, so
    # matched nodes have uses outside the match. Keeping them (remove_nodes=False) is always
    # correct; the unused-node pass that follows removes them once nothing reads them.
    remove_nodes = False

    def pattern_notes(self, count: int, left: int, reasons: list[str]) -> list[str]:
        return [] if count else ["This export does not use the TorchScript SDPA attention pattern; "
                                 "ONNX Runtime's own attention step comes next."]

    def setup(self):
        self._mask_int32: dict[ir.Value, ir.Value] = {}
        self._mask_source: dict[ir.Value, tuple[ir.Value | None, str | None]] = {}

    def cleanup(self):
        self._mask_int32 = {}
        self._mask_source = {}

    # ------------------------------------------------------------ pattern
    def pattern(self, op, x, wq, bq, wk, bk, wv, bv, shape_q, shape_k, shape_v, q_scale, k_scale,
                cond, mask_zero, mask_neg, nan_zero, shape_mid, shape_out):
        def linear(w, b):
            # The bias Add comes in either order (TorchScript writes the bias first). Alternatives in
            # the pattern instead of RewriteRuleSet(commute=True): that would try 2^6 whole-pattern
            # variants at every node and make this step 40x slower on bert-base.
            mm = op.MatMul(x, w)
            return pattern.OrValue([op.Add(mm, b), op.Add(b, mm)])

        q, k, v = linear(wq, bq), linear(wk, bk), linear(wv, bv)
        q_bsnd = op.Reshape(q, shape_q, _outputs=["q_bsnd"])
        k_bsnd = op.Reshape(k, shape_k, _outputs=["k_bsnd"])
        v_bsnd = op.Reshape(v, shape_v, _outputs=["v_bsnd"])
        q_bnsd = op.Transpose(q_bsnd, perm=[0, 2, 1, 3], _outputs=["q_bnsd"])
        k_bnds = op.Transpose(k_bsnd, perm=[0, 2, 3, 1], _outputs=["k_bnds"])
        v_bnsd = op.Transpose(v_bsnd, perm=[0, 2, 1, 3], _outputs=["v_bnsd"])
        scores = op.MatMul(op.Mul(q_bnsd, q_scale), op.Mul(k_bnds, k_scale))
        bias = op.Where(cond, mask_zero, mask_neg)
        scores = pattern.OrValue([op.Add(scores, bias), op.Add(bias, scores)])
        probs = op.Softmax(scores, _outputs=["probs"])
        guarded = op.Where(op.IsNaN(probs), nan_zero, probs)
        probs = pattern.OrValue([guarded, probs], tag_var="nan_guard", tag_values=[True, False])
        ctx = op.MatMul(probs, v_bnsd, _outputs=["ctx"])
        mid = op.Reshape(ctx, shape_mid, _outputs=["ctx_mid"])
        ctx = pattern.OrValue([mid, ctx], tag_var="mid_reshape", tag_values=[True, False])
        ctx_bsnd = op.Transpose(ctx, perm=[0, 2, 1, 3], _outputs=["ctx_bsnd"])
        return op.Reshape(ctx_bsnd, shape_out)

    # ------------------------------------------------------------ check
    def check(self, context, x, wq, bq, wk, bk, wv, bv, shape_q, shape_k, shape_v, q_scale, k_scale, cond,
              mask_zero, mask_neg, probs, q_bsnd, k_bsnd, v_bsnd, q_bnsd, k_bnds, v_bnsd, ctx, ctx_bsnd,
              shape_out, nan_guard=False, mid_reshape=False, nan_zero=None, shape_mid=None, ctx_mid=None,
              **_):
        r = pattern.MatchResult()
        hidden, failed = _projections((wq, wk, wv), (bq, bk, bv))
        if failed:
            return r.fail(*failed)
        head, failed = self._head_split(x, hidden, (("query", shape_q), ("key", shape_k), ("value", shape_v)))
        if failed:
            return r.fail(*failed)
        failed = _scale_and_softmax(head, q_scale, k_scale, probs, nan_guard, nan_zero)
        if failed:
            return r.fail(*failed)
        # Output merge: [B, N, S, D] (optional no-op reshape) -> [B, S, N, D] -> [B, S, H].
        layouts = {x: "BSH", q_bsnd: "BSND", k_bsnd: "BSND", v_bsnd: "BSND", q_bnsd: "BNSD", k_bnds: "BNDS",
                   v_bnsd: "BNSD", ctx: "BNSD", ctx_bsnd: "BSND"}
        consts = {"N": hidden // head, "D": head, "H": hidden}
        if mid_reshape:
            entries = _shape_entries(shape_mid)
            if entries is None or len(entries) != 4 or not self._keeps(entries, "BNSD", layouts, "BNSD", consts):
                return r.fail("the reshape after the context MatMul is not [B, N, S, D]", shape_mid)
        entries = _shape_entries(shape_out)
        if entries is None or len(entries) != 3 or not self._keeps(entries[:2], "BS", layouts, "BSND") \
                or entries[2] not in (-1, hidden):
            return r.fail("the heads are not merged back to [B, S, H]", shape_out)
        # Mask: Where(cond, 0, -inf) with cond a padding mask from one 2-D graph input.
        if ir_utils.get_singleton_value(mask_zero) != 0:
            return r.fail("the additive mask does not keep attended positions at 0", mask_zero)
        neg = ir_utils.get_singleton_value(mask_neg)
        if neg is None or not float(neg) <= -1e4:
            return r.fail("the additive mask does not push masked positions to -inf", mask_neg)
        source, why = self._padding_source(cond)
        if source is None:
            return r.fail(why, cond)
        self._found = {"num_heads": hidden // head, "mask": source}
        return r

    def _head_split(self, x, hidden: int, splits) -> tuple[int | None, tuple | None]:
        """The head size D of the [B, S, N, D] splits of query, key and value (one constant D), or a failure."""
        head = None
        for name, shape in splits:
            entries = _shape_entries(shape)
            if entries is None or len(entries) != 4:
                return None, (f"the {name} head split is not a Reshape to rank 4", shape)
            d = entries[3]
            if not isinstance(d, int) or d <= 0:
                return None, (f"the {name} head size is not a constant", shape)
            if head is not None and d != head:
                return None, (f"query/key/value head sizes differ ({head} vs {d})", shape)
            head = d
            if hidden % d:
                return None, (f"hidden size {hidden} is not a multiple of head size {d}", shape)
            if entries[2] not in (-1, hidden // d):
                return None, (f"the {name} head split gives {entries[2]} heads, expected {hidden // d}", shape)
            if not self._keeps(entries[:2], "BS", layouts={x: "BSH"}, input_layout="BSH"):
                return None, (f"the {name} head split does not keep batch and sequence in place", shape)
        return head, None

    @staticmethod
    def _keeps(entries, expected: str, layouts: dict, input_layout: str, consts: dict | None = None) -> bool:
        """Whether reshape entries are the expected symbolic dims (B, S, N, D)."""
        consts = consts or {}
        for i, (e, want) in enumerate(zip(entries, expected)):
            if isinstance(e, int):
                if e == 0:  # copy the input's dim at this position
                    if i >= len(input_layout) or input_layout[i] != want:
                        return False
                elif e == -1:
                    continue
                elif consts.get(want) != e:
                    return False
            elif isinstance(e, tuple):
                tensor, axis = e
                lay = layouts.get(tensor)
                if lay is not None:
                    if not (0 <= axis < len(lay)) or lay[axis] != want:
                        return False
                elif not ((want == "B" and axis == 0) or (want == "S" and axis == 1)):
                    # An activation outside the match: its axis 0 is batch, axis 1 sequence.
                    return False
            else:
                return False
        return True

    def _padding_source(self, cond: ir.Value) -> tuple[ir.Value | None, str | None]:
        if cond in self._mask_source:
            return self._mask_source[cond]
        found = self._walk_mask(cond)
        self._mask_source[cond] = found
        return found

    @staticmethod
    def _walk_mask(cond: ir.Value) -> tuple[ir.Value | None, str | None]:
        if cond.dtype not in (None, ir.DataType.BOOL):
            return None, "the mask condition is not boolean"
        inputs: set[ir.Value] = set()
        seen: set[ir.Value] = set()
        stack = [cond]
        while stack:
            v = stack.pop()
            if v in seen:
                continue
            seen.add(v)
            if v.is_graph_input():
                inputs.add(v)
                continue
            node = v.producer()
            if node is None:
                continue
            if node.op_type in _SHAPE_ONLY:
                continue
            if len(seen) > 2000:
                return None, "the mask computation is too large to analyse"
            if node.op_type in _ORDER_OPS:
                data = [i for i in node.inputs if i is not None and const(i) is None]
                if len(data) >= 2 or node.op_type in ("Trilu", "CumSum"):
                    return None, (f"the mask compares two computed indices ({node.op_type}): a causal or "
                                  f"windowed mask, which Attention's padding mask cannot express")
            for i in node.inputs:
                if i is not None:
                    stack.append(i)
        if len(inputs) != 1:
            names = ", ".join(sorted(i.name or "?" for i in inputs)) or "none"
            return None, f"the mask is not computed from exactly one graph input (found: {names})"
        src = next(iter(inputs))
        if src.shape is not None and len(src.shape) != 2:
            return None, f"the mask input {src.name} is not 2-D [batch, sequence]"
        if src.dtype is None or src.dtype.name not in _INT_TYPES:
            return None, f"the mask input {src.name} is not an integer or boolean tensor"
        return src, None

    # ------------------------------------------------------------ rewrite
    def rewrite(self, op, x, wq, bq, wk, bk, wv, bv, **_):
        found = self._found
        weight = np.concatenate([const(wq), const(wk), const(wv)], axis=1)
        bias = np.concatenate([const(bq), const(bk), const(bv)], axis=0)
        q_node = next(iter(readers(wq)), None)
        base = _common_prefix([n.name for w in (wq, wk, wv) for n in readers(w) if n.name]) or "attention"
        base = base.rstrip("/_.") or "attention"
        w_val = op.initializer(ir.tensor(weight), name=unique_name(x.graph, f"{base}/qkv_weight_wb"))
        b_val = op.initializer(ir.tensor(bias), name=unique_name(x.graph, f"{base}/qkv_bias_wb"))
        mask = self._mask(op, found["mask"])
        out = op.Attention(x, w_val, b_val, mask, num_heads=found["num_heads"], _domain="com.microsoft")
        node = out.producer()
        if node is not None:
            node.name = f"{base}/Attention_wb" if q_node is not None else node.name
        return out

    def _mask(self, op, source: ir.Value) -> ir.Value:
        if source.dtype == ir.DataType.INT32:
            return source
        cached = self._mask_int32.get(source)
        if cached is None:
            cached = op.Cast(source, to=ir.DataType.INT32)
            if cached.producer() is not None:
                cached.producer().name = f"{source.name}_int32_wb"
            self._mask_int32[source] = cached
        return cached



def _projections(weights, biases) -> tuple[int, tuple | None]:
    """The hidden size H of constant [H, H] Q/K/V weights and [H] biases of one float type, or a failure."""
    ws = [const(w) for w in weights]
    if any(w is None for w in ws):
        return -1, ("a Q/K/V projection weight is not a constant", [w for w, a in zip(weights, ws) if a is None])
    hidden = ws[0].shape[0] if ws[0].ndim == 2 else -1
    if any(w.ndim != 2 or w.shape != (hidden, hidden) for w in ws):
        return -1, (f"Q/K/V weights are not all [H, H] (shapes {[w.shape for w in ws]})", weights[0])
    bs = [const(b) for b in biases]
    if any(b is None or b.shape != (hidden,) for b in bs):
        return -1, ("a Q/K/V bias is not a constant of shape [H]", biases[0])
    if len({w.dtype for w in ws} | {b.dtype for b in bs}) != 1 or ws[0].dtype not in (np.float32, np.float16):
        return -1, ("Q/K/V weights and biases do not share one float type", weights[0])
    return hidden, None


def _scale_and_softmax(head: int, q_scale, k_scale, probs, nan_guard: bool, nan_zero) -> tuple | None:
    """A failure unless the scales make 1/sqrt(D), the Softmax is over the keys and a NaN guard writes 0."""
    sq, sk = ir_utils.get_singleton_value(q_scale), ir_utils.get_singleton_value(k_scale)
    if sq is None or sk is None:
        return "the query or key scale is not a constant scalar", [q_scale, k_scale]
    if not math.isclose(float(sq) * float(sk), 1.0 / math.sqrt(head), rel_tol=1e-4):
        return (f"scale {float(sq) * float(sk):.6g} is not 1/sqrt(head size {head}) = {1.0 / math.sqrt(head):.6g}",
                [q_scale, k_scale])
    if probs.producer().attributes.get_int("axis", -1) not in (-1, 3):
        return "Softmax is not over the last axis", probs
    if nan_guard:
        z = ir_utils.get_singleton_value(nan_zero)
        if z is None or float(z) != 0.0:
            return "the NaN guard after Softmax does not write 0", nan_zero
    return None


def _common_prefix(names: list[str]) -> str:
    if not names:
        return ""
    prefix = names[0]
    for n in names[1:]:
        while not n.startswith(prefix):
            prefix = prefix[:-1]
    # Cut at the last path separator, so "/layer.0/attention/self/query/MatMul" and
    # ".../key/MatMul" give "/layer.0/attention/self".
    cut = max(prefix.rfind("/"), 0)
    return prefix[:cut] if cut else prefix


def sdpa_attention_rules():
    """The onnxscript ``RewriteRuleSet`` that fuses exported SDPA attention."""
    return SdpaAttentionFusion().rule_set()


def fuse_sdpa_attention(model) -> int:
    """Fuse TorchScript-exported SDPA attention in an ``onnx_ir.Model``, in place; return how many."""
    return SdpaAttentionFusion().apply(model).count
