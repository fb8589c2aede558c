"""Op histogram, layer grouping, diff and provenance."""

from __future__ import annotations

import onnx
from onnx import TensorProto as T, helper as h

from workbench.graph import (count_layers, diff_models, ensure_node_names, fused_counts, histogram, layer_map,
                             node_layer, provenance_chain)


def _model(nodes, inputs=("x", "y"), outputs=("out",)):
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info(i, T.FLOAT, [2]) for i in inputs],
                     [h.make_tensor_value_info(o, T.FLOAT, [2]) for o in outputs])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


def test_histogram_and_fused_counts():
    m = _model([h.make_node("Add", ["x", "y"], ["a"], name="a1"), h.make_node("Add", ["a", "y"], ["b"], name="a2"),
                h.make_node("Gelu", ["b"], ["out"], name="g", domain="com.microsoft")])
    assert histogram(m) == {"Add": 2, "Gelu": 1}
    assert list(histogram(m))[0] == "Add"
    assert fused_counts(m) == {"Gelu": 1}
    assert fused_counts(m, all_ops=True)["Attention"] == 0


def test_layer_from_torchscript_name_and_dynamo_scope():
    ts = h.make_node("MatMul", ["x", "y"], ["z"], name="/encoder/layer.3/attention/self/query/MatMul")
    dyn = h.make_node("MatMul", ["x", "y"], ["z"], name="node_MatMul_7")
    p = dyn.metadata_props.add()
    p.key, p.value = "pkg.torch.onnx.name_scopes", "['', 'inner.encoder', 'inner.encoder.layer.11', 'linear_3']"
    emb = h.make_node("Gather", ["x", "y"], ["z"], name="/embeddings/word_embeddings/Gather")
    assert node_layer(ts) == 3
    assert node_layer(dyn) == 11
    assert node_layer(emb) is None
    # "layers.2" and DistilBERT's "transformer/layer.0" count too, "player.2" does not
    assert node_layer(h.make_node("Add", [], [], name="/transformer/layer.0/Add")) == 0
    assert node_layer(h.make_node("Add", [], [], name="/player.2/Add")) is None


def test_ensure_node_names_makes_names_unique():
    m = _model([h.make_node("Add", ["x", "y"], ["a"]), h.make_node("Add", ["a", "y"], ["b"], name="n"),
                h.make_node("Relu", ["b"], ["out"], name="n")])
    assert ensure_node_names(m) == 2
    names = [n.name for n in m.graph.node]
    assert len(set(names)) == 3 and all(names)


def test_provenance_through_reused_output_name():
    before = _model([h.make_node("Mul", ["x", "y"], ["m"], name="mul"), h.make_node("Add", ["m", "y"], ["a"], name="add"),
                     h.make_node("Relu", ["a"], ["out"], name="relu")])
    after = _model([h.make_node("FusedMulAdd", ["x", "y"], ["a"], name="fused"),
                    h.make_node("Relu", ["a"], ["out"], name="relu")])
    d = diff_models(before, after)
    assert sorted(d.removed) == ["add", "mul"]
    assert d.added == ["fused"]
    assert sorted(d.provenance["fused"]) == ["add", "mul"]
    assert d.rewired == []


def test_provenance_through_rewired_consumer_and_separate_groups():
    before = _model([h.make_node("Mul", ["x", "y"], ["m1"], name="mul1"), h.make_node("Tanh", ["m1"], ["t1"], name="tanh1"),
                     h.make_node("Mul", ["x", "x"], ["m2"], name="mul2"), h.make_node("Tanh", ["m2"], ["t2"], name="tanh2"),
                     h.make_node("Add", ["t1", "t2"], ["out"], name="sum")])
    after = _model([h.make_node("F", ["x", "y"], ["f1"], name="f1"), h.make_node("F", ["x", "x"], ["f2"], name="f2"),
                    h.make_node("Add", ["f1", "f2"], ["out"], name="sum")])
    d = diff_models(before, after)
    assert d.rewired == ["sum"]
    assert sorted(d.provenance["f1"]) == ["mul1", "tanh1"]
    assert sorted(d.provenance["f2"]) == ["mul2", "tanh2"]
    assert provenance_chain([d], "f1") == d.provenance["f1"]
    assert provenance_chain([d], "sum") == ["sum"]


def test_real_attention_fusion_provenance_groups_by_layer(tiny_export):
    from workbench.config import FusionPlan
    from workbench.fusion import run_fusion

    res = tiny_export("torchscript", "eager")
    tl = run_fusion(res.path, FusionPlan(engine="ort"), num_heads=2, hidden_size=128)
    assert count_layers(onnx.load(str(res.path), load_external_data=False)) == 2
    snap = next(s for s in tl.snapshots if s.step == "attention")
    attn = [n.name for n in snap.skeleton.graph.node if n.op_type == "Attention"]
    assert len(attn) == 2
    layers = sorted(snap.diff.layer_of[a] for a in attn)
    assert layers == [0, 1]
    for a in attn:
        replaced = snap.diff.provenance[a]
        assert len(replaced) > 10  # the whole attention block, not one node
        ops = {n.op_type for n in tl.snapshots[tl.snapshots.index(snap) - 1].skeleton.graph.node if n.name in replaced}
        assert {"MatMul", "Softmax"} <= ops
        # every replaced node that has a layer belongs to the fused node's layer
        lay = {snap.diff.layer_of[r] for r in replaced} - {None}
        assert lay == {snap.diff.layer_of[a]}
    lm = layer_map(snap.skeleton)
    assert set(lm) == {n.name for n in snap.skeleton.graph.node}


def test_fused_nodes_keep_their_layer_when_layers_share_a_weight(tiny_export):
    """Equal weights are one initializer in the export (random weights' zero biases): the bias + SkipLayerNorm
    fusion must still put each fused node in its own layer, not all in layer 0."""
    from workbench.config import FusionPlan
    from workbench.fusion import run_fusion
    from workbench.graph.nodes import group_of_name

    res = tiny_export("torchscript", "eager")
    tl = run_fusion(res.path, FusionPlan(engine="ort"), num_heads=2, hidden_size=128)
    snap = next(s for s in tl.snapshots if s.step == "bias_skip_layer_norm")
    before = tl.snapshots[tl.snapshots.index(snap) - 1].skeleton
    computed = {t for n in before.graph.node for t in n.output}
    biases = [t for n in before.graph.node if n.op_type == "Add" and "dense/Add" in n.name
              for t in n.input if t not in computed]
    assert len(biases) > len(set(biases))  # layers share one bias initializer
    fused = [n for n in snap.skeleton.graph.node if n.name in snap.diff.added and n.op_type == "SkipLayerNormalization"]
    assert len(fused) >= 2
    for n in fused:  # the layer its output tensor names
        named = group_of_name(n.output[0])
        if named and named.startswith("layer "):
            assert snap.diff.layer_of[n.name] == int(named[6:]), (n.name, n.output[0])
