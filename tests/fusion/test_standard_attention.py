"""Our rule for ONNX's standard Attention op (opset 23+): maps to MultiHeadAttention, refuses what it cannot
map with a reason the timeline shows, and keeps parity, on hand-built graphs and a real bert-tiny export."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

from workbench.config import FusionPlan
from workbench.fusion import Timeline
from workbench.fusion.engine_logs import trace_rules
from workbench.fusion.engines import engine_steps
from workbench.fusion.rules import fuse_standard_attention, standard_attention_rules
from workbench.graph.summary import attention_kinds
from workbench.ort.session import create_session, run_session

H, N, D = 16, 2, 8  # hidden, heads, head size of the hand-built graphs


def _graph(mask_shape=("B", 1, "S", "S"), mask_type=T.BOOL, attrs=None, past=False, three_d=False,
           qk_output=False) -> onnx.ModelProto:
    """One self-attention block as the dynamo exporter writes it at opset 23 (shapes inferred)."""
    rng = np.random.default_rng(0)
    inits, nodes = [], []
    for name in ("q", "k", "v"):
        inits += [numpy_helper.from_array(rng.standard_normal((H, H)).astype(np.float32) * 0.3, f"W{name}"),
                  numpy_helper.from_array(rng.standard_normal(H).astype(np.float32) * 0.1, f"b{name}")]
    inits += [numpy_helper.from_array(np.array([0, 0, N, D], np.int64), "split"),
              numpy_helper.from_array(np.array([0, 0, H], np.int64), "merge")]
    inputs = [h.make_tensor_value_info("x", T.FLOAT, ["B", "S", H])]
    mask = ""
    if mask_shape is not None:
        inputs.append(h.make_tensor_value_info("mask", mask_type, list(mask_shape)))
        mask = "mask"
    heads_in = []
    for name in ("q", "k", "v"):
        nodes += [h.make_node("MatMul", ["x", f"W{name}"], [f"{name}_mm"], name=f"/layer.0/{name}/MatMul"),
                  h.make_node("Add", [f"{name}_mm", f"b{name}"], [f"{name}_bsh"], name=f"/layer.0/{name}/Add")]
        if three_d:
            heads_in.append(f"{name}_bsh")
        else:
            nodes += [h.make_node("Reshape", [f"{name}_bsh", "split"], [f"{name}_bsnd"],
                                  name=f"/layer.0/{name}/Reshape"),
                      h.make_node("Transpose", [f"{name}_bsnd"], [f"{name}_bnsd"], perm=[0, 2, 1, 3],
                                  name=f"/layer.0/{name}/Transpose")]
            heads_in.append(f"{name}_bnsd")
    att_in, att_out = heads_in + [mask], ["y_att"]
    outputs = [h.make_tensor_value_info("y", T.FLOAT, None)]
    if past:
        att_in += ["past_k", "past_v"]
        att_out += ["present_k", "present_v"]
        inputs += [h.make_tensor_value_info(n, T.FLOAT, ["B", N, "P", D]) for n in ("past_k", "past_v")]
        outputs += [h.make_tensor_value_info(n, T.FLOAT, None) for n in ("present_k", "present_v")]
    if qk_output:
        att_out += ["", "", "qk"]
        outputs.append(h.make_tensor_value_info("qk", T.FLOAT, None))
    a = dict(attrs or {})
    if three_d:
        a.setdefault("q_num_heads", N)
        a.setdefault("kv_num_heads", N)
    nodes.append(h.make_node("Attention", att_in, att_out, name="/layer.0/attention/Attention", **a))
    if three_d:
        nodes.append(h.make_node("Identity", ["y_att"], ["y"], name="/layer.0/out"))
    else:
        nodes += [h.make_node("Transpose", ["y_att"], ["y_bsnd"], perm=[0, 2, 1, 3], name="/layer.0/out/Transpose"),
                  h.make_node("Reshape", ["y_bsnd", "merge"], ["y"], name="/layer.0/out/Reshape")]
    model = h.make_model(h.make_graph(nodes, "standard_attention", inputs, outputs, inits),
                         opset_imports=[h.make_opsetid("", 23)], ir_version=10)
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def _two_layers(second_mask=("S", "S")) -> onnx.ModelProto:
    """Two blocks: the first as the exporter writes it, the second with its own mask of ``second_mask``."""
    from onnx import compose

    second = _graph(mask_shape=second_mask)
    for n in second.graph.node:
        n.name = n.name.replace("/layer.0/", "/layer.1/")
    second = compose.add_prefix(second, "l1_")
    merged = compose.merge_models(_graph(), second, io_map=[("y", "l1_x")])
    del merged.graph.value_info[:]
    return onnx.shape_inference.infer_shapes(merged, strict_mode=True)


def _map(proto: onnx.ModelProto) -> tuple[int, onnx.ModelProto, list[str]]:
    m = ir.serde.deserialize_model(proto)
    n = fuse_standard_attention(m)
    lines = trace_rules(m, standard_attention_rules()) if not n else []
    return n, ir.serde.serialize_model(m), lines


def _feeds(model: onnx.ModelProto, batch=2, seq=7, seed=0) -> dict:
    rng = np.random.default_rng(seed)
    valid = [seq, seq - 3]  # the second sequence is right-padded
    feeds = {"x": rng.standard_normal((batch, seq, H)).astype(np.float32)}
    names = {i.name: i for i in model.graph.input}
    if "mask" in names:
        keys = np.array([[j < valid[b % 2] for j in range(seq)] for b in range(batch)])
        dims = [d.dim_value or d.dim_param for d in names["mask"].type.tensor_type.shape.dim]
        if names["mask"].type.tensor_type.elem_type == T.BOOL:
            feeds["mask"] = np.broadcast_to(keys[:, None, None, :], (batch, 1, seq, seq)).copy()
            if dims[2] == 1:
                feeds["mask"] = feeds["mask"][:, :, :1, :].copy()
        else:
            feeds["mask"] = np.where(keys, 0.0, -1e9).astype(np.float32)[:, None, None, :].repeat(seq, 2)
    return feeds


def _run(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    return run_session(create_session(model.SerializeToString(), "cpu", level="disable", threads=1), feeds)


def _ops(model) -> dict:
    out: dict = {}
    for n in model.graph.node:
        out[(n.domain or "", n.op_type)] = out.get((n.domain or "", n.op_type), 0) + 1
    return out


def test_maps_the_head_split_standard_op_to_multi_head_attention_with_parity():
    proto = _graph()
    n, mapped, _ = _map(proto)
    assert n == 1
    ops = _ops(mapped)
    assert ops.get(("com.microsoft", "MultiHeadAttention")) == 1 and ("", "Attention") not in ops
    assert ("", "Transpose") not in ops and ("", "Reshape") not in ops  # the head split and merge are gone
    mha = next(x for x in mapped.graph.node if x.op_type == "MultiHeadAttention")
    assert {a.name: a.i for a in mha.attribute}["num_heads"] == N
    assert list(mha.input[:3]) == ["q_bsh", "k_bsh", "v_bsh"] and "layer.0" in mha.name
    where = next(x for x in mapped.graph.node if x.output[0] == mha.input[5])
    assert where.op_type == "Where" and where.input[0] == "mask"  # the bool mask as an additive bias
    feeds = _feeds(proto)
    np.testing.assert_allclose(_run(mapped, feeds)[0], _run(proto, feeds)[0], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("case", ["float_mask", "no_mask", "three_d", "scale"])
def test_other_supported_forms_map_with_parity(case):
    proto = {"float_mask": lambda: _graph(mask_type=T.FLOAT), "no_mask": lambda: _graph(mask_shape=None),
             "three_d": lambda: _graph(three_d=True), "scale": lambda: _graph(attrs={"scale": 0.2})}[case]()
    n, mapped, _ = _map(proto)
    assert n == 1 and _ops(mapped).get(("com.microsoft", "MultiHeadAttention")) == 1
    feeds = _feeds(proto, seed=3)
    np.testing.assert_allclose(_run(mapped, feeds)[0], _run(proto, feeds)[0], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("kwargs,reason", [
    ({"mask_shape": ("B", 1, 1, "S")}, "the mask has shape [B, 1, 1, S]"),
    ({"mask_shape": ("S", "S")}, "the mask has shape [S, S]"),
    ({"mask_type": T.INT64}, "the mask is INT64"),
    ({"attrs": {"is_causal": 1}}, "is_causal=1"),
    ({"attrs": {"softcap": 30.0}}, "softcap=30"),
    ({"attrs": {"qk_matmul_output_mode": 1}, "qk_output": True}, "qk_matmul_output_mode=1"),
    ({"past": True}, "KV cache"),
])
def test_refuses_what_it_cannot_map_and_says_why(kwargs, reason):
    proto = _graph(**kwargs)
    n, mapped, lines = _map(proto)
    assert n == 0 and _ops(mapped).get(("", "Attention")) == 1
    assert any(reason in ln and "condition check failed" in ln for ln in lines), lines


@pytest.mark.parametrize("engine", ["ort", "onnxscript"])
def test_an_unsupported_mask_is_named_in_the_timeline_diagnostic(engine):
    tl = Timeline(_graph(mask_shape=("B", 1, 1, "S")), FusionPlan(engine=engine), num_heads=N, hidden_size=H,
                  num_layers=1)
    snap = next(s for s in tl.run() if s.step == "standard_attention")
    assert not snap.fused_here.get("MultiHeadAttention")
    assert "the mask has shape [B, 1, 1, S]" in snap.diagnostic and "workbench rule" in snap.diagnostic
    assert attention_kinds(tl.final.skeleton)["standard"] == 1


def test_a_partly_mapped_graph_says_which_node_stayed_and_why():
    proto = _two_layers()
    n, mapped, _ = _map(proto)
    assert n == 1 and _ops(mapped)[("", "Attention")] == 1
    # a 2-D [S, L] mask: ONNX Runtime runs it (broadcast over batch and heads); MultiHeadAttention cannot take it
    feeds = {**_feeds(proto), "l1_mask": (np.random.default_rng(1).random((7, 7)) < 0.7) | np.eye(7, dtype=bool)}
    np.testing.assert_allclose(_run(mapped, feeds)[0], _run(proto, feeds)[0], atol=1e-5, rtol=1e-4)
    tl = Timeline(proto, FusionPlan(engine="onnxscript"), num_heads=N, hidden_size=H, num_layers=2)
    snap = next(s for s in tl.run() if s.step == "standard_attention")
    assert snap.fused_here.get("MultiHeadAttention") == 1
    assert snap.diagnostic.startswith("mapped 1 of 2 standard Attention nodes to MultiHeadAttention; 1 stay")
    assert "the mask has shape [S, S]" in snap.diagnostic


def test_nothing_to_map_without_the_standard_op(tiny_export):
    tl = Timeline(tiny_export("dynamo", "sdpa", 18).path, FusionPlan(engine="onnxscript"))
    snap = next(s for s in tl.run() if s.step == "standard_attention")
    assert snap.diagnostic.startswith("nothing to map: no standard ONNX Attention") and not snap.diff.added


def test_step_runs_in_both_chains():
    for engine, before in (("ort", "layer_norm"), ("onnxscript", "attention")):
        names = [s.name for s in engine_steps(engine)]
        assert names.index("standard_attention") < names.index(before)


@pytest.mark.parametrize("engine,final_kind", [("onnxscript", "contrib"), ("ort", "multi_head")])
def test_real_bert_tiny_export_at_opset_23(tiny_export, engine, final_kind):
    res = tiny_export("dynamo", "sdpa", 23)
    tl = Timeline(res.path, FusionPlan(engine=engine))
    tl.run()
    ours = next(s for s in tl.snapshots if s.step == "standard_attention")
    assert ours.fused_here.get("MultiHeadAttention") == 2 and ours.counts == {"standard_attention": 2}
    assert ours.diagnostic is None
    # provenance: each MultiHeadAttention replaced its layer's Attention and the head split/merge around it
    std = {n.name for n in tl.input.skeleton.graph.node if n.op_type == "Attention"}
    mha = [a for a in ours.diff.added if a.endswith("_mha_wb")]
    assert len(mha) == 2 and all(len(std & set(ours.diff.provenance[a])) == 1 for a in mha)
    assert sorted(ours.diff.layer_of[a] for a in mha) == [0, 1]
    kinds = attention_kinds(tl.final.skeleton)
    assert kinds[final_kind] == 2 and sum(kinds.values()) == 2 and kinds["standard"] == 0
    assert tl.final.fused.get("SkipLayerNormalization") == 4  # ORT's too: its shape inference knows MHA
    for i in (tl.snapshots.index(ours), len(tl.snapshots) - 1):
        p = tl.check_parity(i)
        assert p.ok and p.max_abs_diff < 1e-4, (tl.snapshots[i].step, p)
    # switched off, the exporter's standard op stays and is fused around
    tl.toggle("standard_attention", False)
    assert attention_kinds(tl.final.skeleton)["standard"] == 2
