"""The alternative attention kernels: the packed contrib Attention run as MultiHeadAttention or as ONNX's standard
Attention (opset 23). Opt-in steps that the catalog names as alternatives of `attention`; each fuses a tiny
graph with parity on right-padded batches, refuses what it cannot map and says why, and runs on a real bert-tiny
export through both chains with parity against the unfused export."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

from workbench.config import FusionPlan
from workbench.errors import FusionError
from workbench.fusion import BY_NAME, Timeline
from workbench.fusion.catalog import alternatives, runs_under
from workbench.fusion.registry import chain
from workbench.fusion.rules import AttentionAsMhaRule, AttentionAsStandardRule
from workbench.fusion.rules.opset_raise import op_blocker
from workbench.ort.session import create_session, run_session

H, N = 16, 2  # hidden size and heads of the hand-built graphs
ALTERNATIVES = ("attention_as_mha", "attention_as_standard")
RULES = {"attention_as_mha": AttentionAsMhaRule, "attention_as_standard": AttentionAsStandardRule}
EMITS = {"attention_as_mha": ("com.microsoft", "MultiHeadAttention"), "attention_as_standard": ("", "Attention")}


def _graph(mask="end", *, attrs=None, concat_weights=False, past=False, extra_op=None, opset=17,
           layers=1) -> onnx.ModelProto:
    """``layers`` packed Attention nodes as ONNX Runtime's optimizer writes them, with ``mask``: "end" ([B] key end
    positions), "raw" ([B, S] int32), "3d" ([B, S, S] int32), "bias" (float [B, 1, S, S]), "both" or None."""
    rng = np.random.default_rng(0)
    inputs = [h.make_tensor_value_info("x", T.FLOAT, ["B", "S", H])]
    shapes = {"end": (T.INT32, ["B"]), "raw": (T.INT32, ["B", "S"]), "3d": (T.INT32, ["B", "S", "S"]),
              "bias": (T.FLOAT, ["B", 1, "S", "S"])}
    for name in {"both": ("end", "bias")}.get(mask, (mask,) if mask else ()):
        inputs.append(h.make_tensor_value_info(name, *shapes[name]))
    mask_in = {"end": "end", "raw": "raw", "3d": "3d", "both": "end"}.get(mask, "")
    bias_in = "bias" if mask in ("bias", "both") else ""
    nodes, inits, x = [], [], "x"
    for i in range(layers):
        w = rng.standard_normal((H, 3 * H)).astype(np.float32) * 0.4
        inits.append(numpy_helper.from_array(rng.standard_normal(3 * H).astype(np.float32) * 0.2, f"b{i}"))
        if concat_weights:  # onnxscript's attention step packs the three projections with a Concat
            parts = [f"w{i}_{p}" for p in "qkv"]
            inits += [numpy_helper.from_array(np.ascontiguousarray(w[:, j * H:(j + 1) * H]), parts[j])
                      for j in range(3)]
            nodes.append(h.make_node("Concat", parts, [f"w{i}"], axis=1))
        else:
            inits.append(numpy_helper.from_array(w, f"w{i}"))
        ins = [x, f"w{i}", f"b{i}", mask_in] + (["past", bias_in] if past else ["", bias_in] if bias_in else [])
        a = {"num_heads": N, **(attrs or {})}
        nodes.append(h.make_node("Attention", ins, [f"y{i}"], domain="com.microsoft",
                                 name=f"/encoder/layer.{i}/attention/Attention", **a))
        x = f"y{i}"
    if past:
        inputs.append(h.make_tensor_value_info("past", T.FLOAT, [2, "B", N, "P", H // N]))
    if extra_op == "ReduceMean":  # an op whose definition changed at opset 18
        nodes.append(h.make_node("ReduceMean", [x], ["pooled"], axes=[1], keepdims=0))
    outputs = [h.make_tensor_value_info(x, T.FLOAT, ["B", "S", H])]
    if extra_op:
        outputs.append(h.make_tensor_value_info("pooled", T.FLOAT, None))
    return h.make_model(h.make_graph(nodes, "packed_attention", inputs, outputs, inits),
                        opset_imports=[h.make_opsetid("", opset), h.make_opsetid("com.microsoft", 1)], ir_version=8)


def _feeds(model: onnx.ModelProto, batch=3, seq=7, seed=0) -> dict:
    """Random hidden states and a right-padded batch: sequences of 7, 4 and 1 real tokens."""
    rng = np.random.default_rng(seed)
    ends = np.array([seq, seq - 3, 1][:batch], dtype=np.int32)
    keys = np.arange(seq)[None, :] < ends[:, None]
    feeds = {"x": rng.standard_normal((batch, seq, H)).astype(np.float32), "end": ends,
             "raw": keys.astype(np.int32), "3d": np.repeat(keys[:, None, :], seq, 1).astype(np.int32),
             "bias": np.where(keys, 0.0, -10000.0).astype(np.float32)[:, None, None, :].repeat(seq, 2)}
    names = {i.name for i in model.graph.input}
    return {k: v for k, v in feeds.items() if k in names}


def _run(model: onnx.ModelProto, feeds: dict, level="disable") -> list[np.ndarray]:
    return run_session(create_session(model.SerializeToString(), "cpu", level=level, threads=1), feeds)


def _apply(rule_name: str, proto: onnx.ModelProto):
    model = ir.serde.deserialize_model(proto)
    result = RULES[rule_name]().apply(model)
    return result, ir.serde.serialize_model(model)


def _ops(model) -> dict:
    out: dict = {}
    for n in model.graph.node:
        out[(n.domain or "", n.op_type)] = out.get((n.domain or "", n.op_type), 0) + 1
    return out


def test_the_catalog_names_both_as_alternatives_of_attention_in_each_chain():
    for engine in ("ort", "onnxscript"):
        assert alternatives(engine) == {"attention": ALTERNATIVES}
        names = chain(engine)
        assert all(names.index(a) > names.index("attention") for a in ALTERNATIVES)
    # last in the ort chain's fusions: ORT's later steps rewire an "Attention" node's mask input by op type
    assert chain("ort").index("attention_as_mha") > chain("ort").index("bias_skip_layer_norm")
    for name in ALTERNATIVES:
        row = BY_NAME[name]
        assert row.alternative_to == "attention" and row.to_dict()["alternative_to"] == "attention"
        assert not row.default_on and not runs_under(FusionPlan(), name)  # no default plan changes
        assert runs_under(FusionPlan().with_step(name, True), name)
    assert BY_NAME["attention"].alternative_to == ""
    with pytest.raises(FusionError, match="no chain named 'tensorrt'"):
        alternatives("tensorrt")


@pytest.mark.parametrize("rule", ALTERNATIVES)
@pytest.mark.parametrize("form", ["end", "raw", "3d", "bias", None, "concat", "scale", "two_layers"])
def test_each_form_maps_with_parity_on_a_right_padded_batch(rule, form):
    proto = {"concat": lambda: _graph(concat_weights=True),
             "scale": lambda: _graph(attrs={"scale": 0.3, "mask_filter_value": -5000.0}),
             "two_layers": lambda: _graph(layers=2)}.get(form, lambda: _graph(form))()
    result, mapped = _apply(rule, proto)
    layers = 2 if form == "two_layers" else 1
    ops = _ops(mapped)
    assert result.count == layers and not result.reasons
    assert ops.get(EMITS[rule]) == layers and ("com.microsoft", "Attention") not in ops
    assert ops[("", "MatMul")] == ops[("", "Split")] == layers  # one packed projection per layer, then split
    if rule == "attention_as_standard":
        assert next(o.version for o in mapped.opset_import if o.domain == "") == 23 and mapped.ir_version >= 11
        assert ops.get(("", "Expand"), 0) <= 1  # one mask for every layer
    feeds = _feeds(proto)
    for level in ("disable", "all"):
        np.testing.assert_allclose(_run(mapped, feeds, level)[0], _run(proto, feeds)[0], atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("rule", ALTERNATIVES)
@pytest.mark.parametrize("kwargs,reason", [
    ({"past": True}, "reads or writes a KV cache"),
    ({"attrs": {"unidirectional": 1}}, "is causal (unidirectional=1) attention"),
    ({"attrs": {"qkv_hidden_sizes": [16, 16, 8]}}, "Q, K and V sizes are not known to be equal"),
    ({"mask": "both"}, "both a mask index and an attention bias"),
])
def test_refuses_what_it_cannot_map_and_says_why(rule, kwargs, reason):
    result, mapped = _apply(rule, _graph(**kwargs))
    assert result.count == 0 and _ops(mapped)[("com.microsoft", "Attention")] == 1
    assert any(reason in r and "(layer 0)" in r for r in result.reasons), result.reasons


def test_a_mask_index_not_known_to_hold_end_positions_is_refused():
    proto = _graph("end")
    proto.graph.input[1].type.tensor_type.shape.dim[0].dim_param = "M"  # [M]: perhaps [2 x batch], starts too
    result, _ = _apply("attention_as_mha", proto)
    assert result.count == 0 and "not known to be [batch] key end positions" in result.reasons[0]


def test_opset_raise_accepts_type_only_changes_and_names_real_ones():
    assert op_blocker("Cast", 17, 23) == "" and op_blocker("Reshape", 17, 23) == ""  # types (and saturate) only
    assert op_blocker("ReduceMean", 17, 23) == "ReduceMean changed at opset 18 (its inputs changed)"
    assert op_blocker("ReduceMean", 18, 23) == ""
    assert op_blocker("Split", 17, 23) == "Split changed at opset 18 (it gained the attribute 'num_outputs')"
    assert op_blocker("Softmax", 11, 23) == "Softmax changed at opset 13 (the default of its attribute 'axis' changed)"


def test_the_standard_op_is_refused_where_the_opset_cannot_be_raised_and_the_step_says_why():
    proto = _graph(extra_op="ReduceMean")
    result, mapped = _apply("attention_as_standard", proto)
    assert result.count == 0 and next(o.version for o in mapped.opset_import if o.domain == "") == 17
    assert "ReduceMean changed at opset 18" in result.reasons[0] and "(layer 0)" in result.reasons[0]
    # the step's "why not fused" in a timeline; the MultiHeadAttention alternative has no such limit
    plan = FusionPlan(engine="ort").with_step("attention_as_standard", True)
    tl = Timeline(proto, plan, num_heads=N, hidden_size=H, num_layers=1, persist=False)
    snap = next(s for s in tl.run() if s.step == "attention_as_standard")
    assert "ReduceMean changed at opset 18 (its inputs changed)" in snap.diagnostic
    assert _ops(tl.final.model)[("com.microsoft", "Attention")] == 1
    result, _ = _apply("attention_as_mha", proto)
    assert result.count == 1


def _real_feeds(batch=3, seq=12, seed=7) -> dict:
    """Token ids with right padding (12, 8 and 3 real tokens), as a tokenizer gives a batch."""
    rng = np.random.default_rng(seed)
    mask = (np.arange(seq)[None, :] < np.array([seq, 8, 3])[:, None]).astype(np.int64)
    ids = np.where(mask == 1, rng.integers(5, 1000, (batch, seq)), 0).astype(np.int64)
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}


@pytest.mark.parametrize("rule", ALTERNATIVES)
@pytest.mark.parametrize("exporter,engine", [("torchscript", "ort"), ("dynamo", "onnxscript")])
def test_real_bert_tiny_export_runs_each_kernel_with_parity(tiny_export, exporter, engine, rule):
    res = tiny_export(exporter, "eager")
    plan = FusionPlan(engine=engine).with_step(rule, True)
    tl = Timeline(res.path, plan, num_heads=2, hidden_size=128, num_layers=2, persist=False)
    tl.run()
    ours = next(s for s in tl.snapshots if s.step == rule)
    assert ours.counts == {rule: 2} and ours.diagnostic is None
    final = _ops(tl.final.model)
    assert final.get(EMITS[rule]) == 2 and ("com.microsoft", "Attention") not in final
    assert tl.check_parity(len(tl.snapshots) - 1).ok
    # a real ONNX Runtime session (level "all", as the benchmarks open it) against the unfused export
    feeds = _real_feeds()
    want = run_session(create_session(str(res.path), "cpu", level="disable", threads=1), feeds)[0]
    got = _run(tl.final.model, feeds, level="all")[0]
    real = feeds["attention_mask"].astype(bool)
    np.testing.assert_allclose(got[real], want[real], atol=1e-4, rtol=1e-4)
    # switched back off, the packed kernel is back
    tl.toggle(rule, False)
    assert _ops(tl.final.model).get(("com.microsoft", "Attention")) == 2


def test_with_both_alternatives_on_the_first_in_the_chain_takes_every_layer():
    plan = FusionPlan(engine="onnxscript").with_step("attention_as_mha", True).with_step("attention_as_standard", True)
    tl = Timeline(_graph(layers=2), plan, num_heads=N, hidden_size=H, num_layers=2, persist=False)
    tl.run()
    std = next(s for s in tl.snapshots if s.step == "attention_as_standard")
    assert std.skipped.startswith("nothing to run as the standard Attention")
    assert _ops(tl.final.model)[("com.microsoft", "MultiHeadAttention")] == 2
