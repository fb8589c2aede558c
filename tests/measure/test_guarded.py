"""Answer-guarded int8's pieces on a fused tiny BERT: layer roles, SmoothQuant keeps the function, the thresholds."""

from __future__ import annotations

import numpy as np
import onnx
import pytest


@pytest.fixture(scope="module")
def fused(tiny_export):
    from workbench.measure.variants.models import fuse_bert

    exp = tiny_export()
    return onnx.load(str(fuse_bert(exp.path, num_heads=2, hidden_size=32)))


def _run(model, feeds):
    from workbench.ort.session import create_session

    sess = create_session(model.SerializeToString(), "cpu", level="disable", threads=1)
    names = {i.name for i in sess.get_inputs()}
    return sess.run(None, {k: v for k, v in feeds.items() if k in names})[0]


def test_every_layer_has_its_four_roles(fused):
    from workbench.measure.variants.smooth import matmul_roles

    roles = matmul_roles(fused)
    counts = {r: sum(1 for v in roles.values() if v == r) for r in ("qkv", "attn_out", "ffn_up", "ffn_down")}
    # bert-tiny: 2 layers; its attention stays unfused at this size, so q/k/v are three MatMuls per layer
    assert counts["attn_out"] == counts["ffn_up"] == counts["ffn_down"] == 2 and counts["qkv"] in (2, 6)
    assert "other" not in roles.values()


def test_smoothquant_scaling_keeps_the_models_function(fused):
    from workbench.measure.variants.smooth import activation_absmax, matmul_roles, smooth
    from workbench.ort.inputs import make_inputs, spec_from_onnx

    feeds = [make_inputs(spec_from_onnx(fused), 2, 16, seed=s, padded=True) for s in (1, 2)]
    roles = matmul_roles(fused)
    nodes = [n for n, r in roles.items() if r in ("attn_out", "ffn_down", "ffn_up")]
    by = {n.name: n for n in fused.graph.node}
    am = activation_absmax(fused, feeds, [by[n].input[0] for n in nodes])
    sm = smooth(fused, nodes, am, alpha=0.5)
    # A fused Attention takes the output projection's scale into its value weights; the others get a Mul.
    muls = [n for n in sm.graph.node if n.op_type == "Mul" and n.name.endswith("_smooth")]
    assert 4 <= len(muls) <= len(nodes)
    ref, got = _run(fused, feeds[0]), _run(sm, feeds[0])
    assert np.abs(ref - got).max() < 1e-4
    assert not any(n.op_type == "Mul" and n.name.endswith("_smooth") for n in fused.graph.node)  # input untouched


def test_the_answers_hold_only_above_every_threshold():
    from workbench.ort.answer_policy import holds

    assert holds({"kind": "embedding", "top1_agreement": 1.0, "spearman": 0.995})
    assert not holds({"kind": "embedding", "top1_agreement": 0.97, "spearman": 0.999})
    assert not holds({"kind": "embedding", "top1_agreement": 1.0, "spearman": 0.989})
    assert holds({"kind": "masked_lm", "top1_agreement": 0.99, "top5_agreement": 0.9})
    assert not holds({"kind": "classification", "label_agreement": 0.98})


def test_a_model_without_a_tokenizer_is_guarded_on_seeded_random_sequences(tiny_export):
    from workbench.measure.variants.extra import guard_text
    from workbench.models import resolve

    text = guard_text(resolve(str(tiny_export().path)))  # an .onnx file: no tokenizer
    assert text.kind == "embedding" and len(text.sentences) == 16 and text.lengths == [32, 64]
    again = guard_text(resolve(str(tiny_export().path)))
    assert all((a["input_ids"] == b["input_ids"]).all() for a, b in zip(text.batches, again.batches))
