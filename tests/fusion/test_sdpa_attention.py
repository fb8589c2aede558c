"""Our onnxscript rule for TorchScript-exported SDPA attention: fuses, refuses, keeps parity."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import numpy_helper

from workbench.config import FusionPlan
from workbench.fusion import Timeline, run_fusion
from workbench.fusion.engine_logs import trace_rules
from workbench.fusion.rules import fuse_sdpa_attention, sdpa_attention_rules
from workbench.fusion.rules.sdpa_attention import SdpaAttentionFusion
from workbench.fusion.timeline import ParityReference
from workbench.graph import fused_counts

HEADS, HIDDEN = 2, 128  # bert-tiny


def _fuse(proto: onnx.ModelProto) -> tuple[int, onnx.ModelProto]:
    m = ir.serde.deserialize_model(proto)
    n = fuse_sdpa_attention(m)
    return n, ir.serde.serialize_model(m)


def _attention_nodes(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    return [n for n in model.graph.node if n.op_type == "Attention" and n.domain == "com.microsoft"]


def test_fuses_torchscript_sdpa_export(tiny_export):
    proto = onnx.load(str(tiny_export("torchscript", "sdpa").path))
    assert not _attention_nodes(proto)
    n, fused = _fuse(proto)
    assert n == 2
    attn = _attention_nodes(fused)
    assert len(attn) == 2
    inits = {t.name: t for t in fused.graph.initializer}
    for node in attn:
        assert {a.name: a.i for a in node.attribute}["num_heads"] == HEADS
        assert list(inits[node.input[1]].dims) == [HIDDEN, 3 * HIDDEN]  # Q|K|V packed
        assert list(inits[node.input[2]].dims) == [3 * HIDDEN]
        assert "layer." in node.name  # named after its encoder layer, so views group it
    # one shared int32 mask from the graph input, read as a raw 2-D mask
    assert len({node.input[3] for node in attn}) == 1
    cast = next(x for x in fused.graph.node if x.output[0] == attn[0].input[3])
    assert cast.op_type == "Cast" and cast.input[0] == "attention_mask"
    # the pattern is gone: no Softmax, IsNaN or -inf mask left
    ops = {x.op_type for x in fused.graph.node}
    assert not ops & {"Softmax", "IsNaN", "Where"}
    assert len(fused.graph.node) < len(proto.graph.node) // 3
    assert any(o.domain == "com.microsoft" for o in fused.opset_import)


def test_fused_model_keeps_parity_including_padding(tiny_export):
    proto = onnx.load(str(tiny_export("torchscript", "sdpa").path))
    _, fused = _fuse(proto)
    ref = ParityReference(proto)
    p = ref.compare(fused)
    assert p.cases == 4 and p.ok, p  # includes right-padded masks at sequence 8 and 128
    # The raw 2-D mask keeps left padding exact too (a 1-D mask index would not).
    from workbench.ort.session import create_session, run_session

    feeds = {k: v.copy() for k, v in ref.feeds[1].items()}
    feeds["attention_mask"][1] = feeds["attention_mask"][1][::-1]
    a = run_session(create_session(proto.SerializeToString(), "cpu", level="disable", threads=1), feeds)
    b = run_session(create_session(fused.SerializeToString(), "cpu", level="disable", threads=1), feeds)
    assert feeds["attention_mask"][1, 0] == 0
    for x, y in zip(a, b):
        np.testing.assert_allclose(y, x, atol=1e-4, rtol=1e-3)


def test_does_not_fire_on_eager_attention(tiny_export):
    proto = onnx.load(str(tiny_export("torchscript", "eager").path))
    n, fused = _fuse(proto)
    assert n == 0 and not _attention_nodes(fused)
    lines = trace_rules(ir.serde.deserialize_model(proto), sdpa_attention_rules())
    assert lines and "workbench_sdpa_attention" in lines[0]


def _layer0(proto: onnx.ModelProto, suffix: str) -> onnx.NodeProto:
    return next(n for n in proto.graph.node if n.name == f"/inner/encoder/layer.0/attention/self/{suffix}")


def _set_const(proto: onnx.ModelProto, name: str, value: np.ndarray) -> None:
    node = next(n for n in proto.graph.node if n.op_type == "Constant" and n.output[0] == name)
    node.attribute[0].t.CopyFrom(numpy_helper.from_array(value.astype(np.float32), name=""))


def test_wrong_scale_is_refused_with_a_reason(tiny_export):
    proto = onnx.load(str(tiny_export("torchscript", "sdpa").path))
    mul = _layer0(proto, "Mul")  # query scale of layer 0
    _set_const(proto, mul.input[1], np.array(0.5))
    n, fused = _fuse(proto)
    assert n == 1  # layer 1 still fuses
    assert all("layer.1" in a.name for a in _attention_nodes(fused))
    # onnxscript's MatchResult says why layer 0 was refused
    probe = onnx.load(str(tiny_export("torchscript", "sdpa").path))
    for layer in (0, 1):
        m = next(x for x in probe.graph.node if x.name == f"/inner/encoder/layer.{layer}/attention/self/Mul")
        _set_const(probe, m.input[1], np.array(0.5))
    lines = trace_rules(ir.serde.deserialize_model(probe), sdpa_attention_rules())
    assert any("scale" in ln and "1/sqrt(head size 64)" in ln for ln in lines), lines


def test_non_matching_key_perm_is_refused(tiny_export):
    proto = onnx.load(str(tiny_export("torchscript", "sdpa").path))
    t = _layer0(proto, "Transpose_2")  # key: perm 0,2,3,1
    perm = next(a for a in t.attribute if a.name == "perm")
    assert list(perm.ints) == [0, 2, 3, 1]
    perm.ints[:] = [0, 2, 1, 3]
    n, fused = _fuse(proto)
    assert n == 1 and all("layer.1" in a.name for a in _attention_nodes(fused))


def test_causal_mask_is_refused():
    # cond = Less(kv_idx, q_idx) & mask: compares two computed indices, so it is not a padding mask
    mask = ir.Value(name="attention_mask", type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape(["B", "S"]))
    shp = ir.node("Shape", [mask])
    rng = ir.node("Range", [ir.Value(name="zero", const_value=ir.tensor(np.array(0))),
                            ir.Value(name="s", const_value=ir.tensor(np.array(8))),
                            ir.Value(name="one", const_value=ir.tensor(np.array(1)))])
    q_idx = ir.node("Unsqueeze", [rng.outputs[0], ir.Value(name="ax", const_value=ir.tensor(np.array([1])))])
    less = ir.node("LessOrEqual", [rng.outputs[0], q_idx.outputs[0]])
    pad = ir.node("Cast", [mask], attributes={"to": ir.DataType.BOOL})
    both = ir.node("And", [less.outputs[0], pad.outputs[0]])
    both.outputs[0].dtype = ir.DataType.BOOL
    src, why = SdpaAttentionFusion._walk_mask(both.outputs[0])
    assert src is None and "causal" in why
    graph = ir.Graph([mask], [both.outputs[0]], nodes=[shp, rng, q_idx, less, pad, both], name="g")
    assert graph is not None
    # the padding part alone is accepted and traced to the graph input
    src, why = SdpaAttentionFusion._walk_mask(pad.outputs[0])
    assert src is mask and why is None


def test_timeline_step_runs_before_orts_attention(tiny_export):
    tl = run_fusion(tiny_export("torchscript", "sdpa").path, FusionPlan(engine="ort"), num_heads=HEADS,
                    hidden_size=HIDDEN)
    steps = [s.step for s in tl.snapshots]
    assert steps.index("sdpa_attention") == steps.index("attention") - 1
    ours = next(s for s in tl.snapshots if s.step == "sdpa_attention")
    theirs = next(s for s in tl.snapshots if s.step == "attention")
    assert ours.fused_here.get("Attention") == 2 and ours.counts == {"sdpa_attention": 2}
    assert ours.diagnostic is None
    assert "already has 2 Attention" in theirs.diagnostic
    # provenance: each Attention replaced its own layer's nodes, Softmax among them
    for name, removed in ours.diff.provenance.items():
        if "Attention" in name:
            layer = ours.diff.layer_of[name]
            assert layer in (0, 1)
            assert any("Softmax" in r and f"layer.{layer}/" in r for r in removed)
    f = tl.final.fused
    assert (f.get("Attention"), f.get("SkipLayerNormalization"), f.get("BiasGelu"),
            f.get("EmbedLayerNormalization")) == (2, 4, 2, 1)
    # off: ORT's own attention step is back to fusing nothing, and says so
    tl.toggle("sdpa_attention", False)
    assert tl.final.fused.get("Attention", 0) == 0
    attn = next(s for s in tl.snapshots if s.step == "attention")
    assert "fused nothing" in attn.diagnostic


def test_eager_export_step_explains_and_leaves_the_graph(tiny_export):
    tl = Timeline(tiny_export("torchscript", "eager").path, FusionPlan(engine="ort"), num_heads=HEADS,
                  hidden_size=HIDDEN)
    tl.run()
    ours = next(s for s in tl.snapshots if s.step == "sdpa_attention")
    assert ours.diff.empty and ours.fused_here == {}
    assert "does not use the TorchScript SDPA attention pattern" in ours.diagnostic
    assert "The workbench rule says: rule workbench_sdpa_attention" in ours.diagnostic  # onnxscript's trace
    assert tl.final.fused.get("Attention") == 2  # from ORT's own step


@pytest.mark.parametrize("kind", ["roberta", "distilbert"])
def test_fuses_roberta_and_distilbert(hf_folder, kind):
    from workbench.config import ExportConfig
    from workbench.export import export
    from workbench.models import resolve

    src = resolve(hf_folder(kind))
    res = export(src, ExportConfig(exporter="torchscript", attention="sdpa"))
    proto = onnx.load(str(res.path))
    n, fused = _fuse(proto)
    assert n == src.num_layers == 2
    assert fused_counts(fused)["Attention"] == 2
    assert ParityReference(proto).compare(fused).ok


def test_either_operand_order_of_the_adds(tiny_export):
    proto = onnx.load(str(tiny_export("torchscript", "sdpa").path))
    for suffix in ("query/Add", "key/Add", "Add"):  # two bias Adds and the mask Add of layer 0
        node = _layer0(proto, suffix)
        a, b = node.input
        node.input[:] = [b, a]
    n, fused = _fuse(proto)
    assert n == 2
    assert ParityReference(onnx.load(str(tiny_export("torchscript", "sdpa").path))).compare(fused).ok
