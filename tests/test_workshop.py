"""The workshop's exercises hold on today's exports: each premise is asserted on the real exporters and engines.

Run on the test model (bert-tiny) and on bert-base's own layer shapes (two layers of hidden 768, 12 heads:
the default model's patterns at a sixth of its export time). When an exporter or engine changes so that an
exercise of notebook 03 loses its point (a step that no longer changes the graph, a prerequisite that no
longer matters), a test here fails instead of the notebook silently teaching nothing.
"""

from __future__ import annotations

import onnx
import pytest

from workbench.config import ExportConfig
from workbench.export import export
from workbench.models import resolve
from workbench.workshop import exercises as ex


def save_tiny_modernbert(folder):
    """A two-layer ModernBERT (layer 0 global, layer 1 local with a 16-token window), seeded, as a folder."""
    import torch
    import transformers

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(7)
        cfg = transformers.AutoConfig.for_model(
            "modernbert", num_hidden_layers=2, hidden_size=48, num_attention_heads=3, intermediate_size=80,
            vocab_size=500, pad_token_id=0, bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2,
            mask_token_id=3, local_attention=16, global_attn_every_n_layers=2, max_position_embeddings=512)
        transformers.AutoModel.from_config(cfg).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module", params=["bert-tiny", "bert-base-shaped"])
def source(request, bert_base_two_layers):
    return resolve("bert-tiny" if request.param == "bert-tiny" else str(bert_base_two_layers))


def test_exercise_1_one_attention_per_layer_two_skip_norms(source):
    attention, skip = ex.fused_counts(source)
    L = source.num_layers
    assert attention.holds and attention.answer == L
    assert skip.holds and skip.answer == 2 * L
    # the reason names what the step removed and emitted
    assert f"emitted Attention {L}" in attention.why and "removed" in attention.why
    assert f"SkipLayerNormalization {2 * L}" in skip.why


def test_exercise_2_layer_norm_is_written_out_at_opset_14_and_fused(source):
    f = ex.layer_norm_nodes(source)
    L = source.num_layers
    c = f.facts["layer_norm"]
    assert f.holds
    # one norm after the embeddings and two per layer, each 9 nodes -> 1
    assert c["emitted"] == {"LayerNormalization": 2 * L + 1} and c["removed_n"] == 9 * (2 * L + 1)
    assert f.answer == f.facts["before"] - c["removed_n"] + c["emitted_n"]
    assert "0 nodes replaced" not in f.line() and "ReduceMean" in f.why
    # ... and on the default export the exporter already wrote them, so the exercise needs opset 14
    assert f.facts["default_export_layer_norms"] == 2 * L + 1 and not f.facts["default_step_changed"]


def test_exercise_3_biggest_drop_is_a_fusion_that_emits(source):
    f = ex.biggest_drop(source)
    assert f.holds and f.answer == "attention"
    assert f.facts["drop"] > 0 and "emitted Attention" in f.why
    assert all(isinstance(v, (str, int)) for row in f.table for v in row.values())  # a table, not nested dicts


def test_exercise_4_ort_refuses_dynamo_attention_in_its_own_words(source):
    f, rows = ex.dynamo_attention(source)
    assert f.holds and f.answer is False
    assert "ONNX Runtime's fusion log says" in f.why and "Failed to match" in f.why
    assert f.facts["onnxscript"] == source.num_layers


def test_exercise_5_switching_the_prerequisite_off_changes_the_result(source):
    f = ex.prerequisite_off(source, "layer_norm")
    assert f.holds
    assert f.facts["on"] == source.num_layers and f.facts["off"] == 0 and f.answer == 0
    assert "SkipLayerNormalization 0, LayerNormalization 0" in f.why  # the engine's anchors, counted
    # on the default export the switch would change nothing: why the exercise names opset 14
    assert f.facts["default_export_off"] == source.num_layers


def test_a_false_premise_is_said_in_the_check_line():
    f = ex.Finding("x", 3, "because.", "the step changes the graph", False)
    assert "does not hold" in f.line(None) and "the step changes the graph" in f.line(3)
    assert f.line(3).startswith("x: correct (3).") and "you said 2" in f.line(2)


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_which_opsets_write_layer_norm_and_gelu_as_one_op(exporter):
    """What notebook 01's table says: LayerNormalization from opset 17, Gelu from opset 20, for both exporters,
    and at opset 20 ORT's fusions still build SkipLayerNormalization and BiasGelu on top of them."""
    def ops(opset):
        r = export("bert-tiny", ExportConfig(exporter=exporter, opset=opset))
        return {n.op_type for n in onnx.load(str(r.path), load_external_data=False).graph.node}

    if exporter == "torchscript":
        assert "LayerNormalization" not in ops(ex.ONE_OP_SINCE["LayerNormalization"] - 1)
    assert "LayerNormalization" in ops(ex.ONE_OP_SINCE["LayerNormalization"])
    below, at = ops(ex.ONE_OP_SINCE["Gelu"] - 1), ops(ex.ONE_OP_SINCE["Gelu"])
    assert "Gelu" not in below and "Erf" in below
    assert "Gelu" in at and "Erf" not in at
    if exporter == "torchscript":
        snaps = ex.fusion_run("bert-tiny", opset=ex.ONE_OP_SINCE["Gelu"])
        assert "already has" in ex.step_of(snaps, "gelu").diagnostic
        assert snaps[-1].fused.get("BiasGelu") == 2 and snaps[-1].fused.get("SkipLayerNormalization") == 4


def test_modern_encoder_section_ort_fails_on_bias_free_norms_and_the_workbench_fuses_all(tmp_path):
    """Notebook 04's ModernBERT section (the test model: two layers, one of them local)."""
    src = resolve(str(save_tiny_modernbert(tmp_path / "modernbert")))
    rows, f = ex.modern_encoder(src)
    assert f.holds and f.answer == 0 and "failed in this step" in f.why and "IndexError" in f.why
    by = {(r["export"], r["engine"]): r for r in rows}
    for exporter in ("torchscript", "dynamo"):
        full = by[(exporter, "workbench (onnxscript + own rules)")]
        assert full["attention"] == 2 and full["RotaryEmbedding"] == 4 and full["SkipLayerNorm"] == 4
        assert full["rotary ops left (Neg, Sin, Cos)"] == 0 and full["Softmax left"] == 0 and not full["why not"]
        ort = by[(exporter, "ONNX Runtime optimizer")]
        assert ort["attention"] == 0 and ort["RotaryEmbedding"] == 0 and ort["why not"]
    # onnxscript alone leaves the rotary arithmetic on both exports and says why where it fused less
    assert all(by[(e, "onnxscript rules")]["rotary ops left (Neg, Sin, Cos)"] > 0 for e in ("torchscript", "dynamo"))
