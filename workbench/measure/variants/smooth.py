"""Graph edits behind answer-guarded int8: each MatMul's role, activation ranges, SmoothQuant scaling.

Plain functions on ``onnx.ModelProto``s of a fused BERT (the transformers optimizer's ops):

* :func:`matmul_roles`: which weight-carrying node does what in its layer: ``qkv`` (the fused
  ``Attention``, or a MatMul feeding it), ``attn_out`` (the projection after attention), ``ffn_up``
  (the MatMul into GELU) and ``ffn_down`` (the MatMul out of GELU, whose input has the large outliers);
* :func:`activation_absmax`: per input channel, the largest magnitude each node's input reaches on
  real sentences (real tokens only);
* :func:`smooth`: SmoothQuant (Xiao et al. 2023): divide a MatMul's input channels by ``s`` and
  multiply the weight's rows by ``s``, with ``s = absmax(X)^a / absmax(W)^(1-a)``, so that the
  activation outliers move into the weight, where per-channel int8 scales absorb them. The division
  is folded into the producer where that is exact (the attention output projection: into the value
  columns of the fused ``Attention``'s weight and bias); elsewhere it is one ``Mul`` by a constant
  vector (GELU is not linear; a LayerNorm's output also feeds the residual, so its gamma cannot take it).

The model computes the same function before quantization (up to float rounding).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from ...ort.session import create_session

ROLES = ("qkv", "attn_out", "ffn_up", "ffn_down")
_GELU = ("BiasGelu", "Gelu", "FastGelu", "QuickGelu")
_NORMS = ("LayerNormalization", "SkipLayerNormalization", "EmbedLayerNormalization",
          "SkipSimplifiedLayerNormalization")


def _producers(graph) -> dict:
    return {o: n for n in graph.node for o in n.output}


def _consumers(graph) -> dict:
    out: dict[str, list] = {}
    for n in graph.node:
        for i in n.input:
            out.setdefault(i, []).append(n)
    return out


def _inits(graph) -> dict:
    return {i.name: i for i in graph.initializer}


def matmul_roles(model) -> dict[str, str]:
    """Node name → role ("qkv", "attn_out", "ffn_up", "ffn_down" or "other") for every node with a weight."""
    g = model.graph
    prod, cons, inits = _producers(g), _consumers(g), _inits(g)
    roles = {}
    for n in g.node:
        if n.op_type == "Attention" and n.domain == "com.microsoft":
            roles[n.name] = "qkv"
            continue
        if n.op_type != "MatMul" or len(n.input) < 2 or n.input[1] not in inits:
            continue
        src = prod.get(n.input[0])
        after = [c.op_type for c in cons.get(n.output[0], [])]
        if src is not None and src.op_type in _GELU:
            roles[n.name] = "ffn_down"
        elif any(a in _GELU for a in after):
            roles[n.name] = "ffn_up"
        elif src is not None and src.op_type in ("Attention", "MultiHeadAttention", "Reshape", "Transpose"):
            roles[n.name] = "attn_out"  # after attention (fused, or its heads merged by Reshape)
        elif any(a in ("Attention", "MultiHeadAttention") for a in after) or (
                src is not None and src.op_type in _NORMS):  # unfused attention: the projections of the norm
            roles[n.name] = "qkv"
        else:
            roles[n.name] = "other"
    return roles


def activation_absmax(model, feeds: list[dict], names: list[str], threads: int = 2) -> dict[str, np.ndarray]:
    """Per channel (last axis), the largest |value| of each named tensor over real tokens of ``feeds``."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    for name in names:
        if name not in have:
            m.graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    sess = create_session(m.SerializeToString(), "cpu", level="disable", threads=threads)
    wanted = {i.name for i in sess.get_inputs()}
    out: dict[str, np.ndarray] = {}
    for f in feeds:
        vals = sess.run(names, {k: v for k, v in f.items() if k in wanted})
        mask = np.asarray(f["attention_mask"]) > 0
        for name, v in zip(names, vals):
            v = np.abs(np.asarray(v, dtype=np.float32))
            v = v[mask] if v.ndim == 3 and v.shape[:2] == mask.shape else v.reshape(-1, v.shape[-1])
            cur = v.max(axis=0)
            out[name] = np.maximum(out[name], cur) if name in out else cur
    return out


def smooth(model, nodes: list[str], absmax: dict[str, np.ndarray], alpha: float = 0.5):
    """A copy of ``model`` with SmoothQuant scaling on the inputs of ``nodes`` (names; see module doc).

    ``absmax`` maps each node's input tensor name to its per-channel activation maximum.
    """
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    by_name = {n.name: n for n in g.node}
    prod, inits = _producers(g), _inits(g)
    roles = matmul_roles(m)
    new_nodes = []
    for name in nodes:
        n = by_name[name]
        x = n.input[0]
        w_init = inits[n.input[1]]
        w = numpy_helper.to_array(w_init).astype(np.float32)
        a = np.maximum(absmax[x].astype(np.float64), 1e-5)
        wmax = np.maximum(np.abs(w).max(axis=1).astype(np.float64), 1e-5)
        s = (a ** alpha / wmax ** (1.0 - alpha))
        s = np.clip(s, 1e-2, 1e3).astype(np.float32)
        w_init.CopyFrom(numpy_helper.from_array((w * s[:, None]).astype(np.float32), w_init.name))
        src = prod.get(x)
        if roles.get(name) == "attn_out" and src is not None and src.op_type == "Attention" and _fold_into_v(
                src, s, inits):
            continue
        inv = numpy_helper.from_array((1.0 / s).astype(np.float32), f"{name}_smooth_inv")
        g.initializer.append(inv)
        out = f"{x}_smoothed_for_{len(new_nodes)}"
        new_nodes.append((n, onnx.helper.make_node("Mul", [x, inv.name], [out], name=f"{name}_smooth")))
        n.input[0] = out
    for consumer, mul in new_nodes:  # each Mul right before its consumer keeps the graph sorted
        idx = list(g.node).index(consumer)
        g.node.insert(idx, mul)
    return m


def _fold_into_v(att, s: np.ndarray, inits: dict) -> bool:
    """Divide the value columns of a fused Attention's weight and bias by ``s`` (its output is softmax·V)."""
    if len(att.input) < 3 or att.input[1] not in inits or att.input[2] not in inits:
        return False
    w_init, b_init = inits[att.input[1]], inits[att.input[2]]
    w = numpy_helper.to_array(w_init).astype(np.float32)
    b = numpy_helper.to_array(b_init).astype(np.float32)
    h = len(s)
    if w.shape[-1] != 3 * h or b.shape[-1] != 3 * h:
        return False
    w, b = w.copy(), b.copy()
    w[:, 2 * h:] /= s[None, :]
    b[2 * h:] /= s
    w_init.CopyFrom(numpy_helper.from_array(w, w_init.name))
    b_init.CopyFrom(numpy_helper.from_array(b, b_init.name))
    return True


__all__ = ["ROLES", "matmul_roles", "activation_absmax", "smooth"]
