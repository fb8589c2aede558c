"""Random inputs sized from the graph itself, fused or not."""

from textmodels import save_task_model
from workbench.export import export
from workbench.fusion import run_fusion
from workbench.models import resolve
from workbench.ort.inputs import spec_from_onnx


def test_spec_of_a_fused_graph_reads_the_embedding_tables(tmp_path):
    """A fused graph has no Gather on input_ids: EmbedLayerNormalization's tables give the vocabulary.

    Without this a model whose vocabulary is smaller than bert-base's got token ids past its table
    in the fused benchmark variant ("EmbedLayerNormalization: input index out of range").
    """
    src = resolve(save_task_model("embedding", tmp_path / "tiny"))  # vocabulary 1000, 160 positions
    res = export(src)
    tl = run_fusion(res.path, num_layers=src.num_layers, num_heads=src.num_heads, hidden_size=src.hidden_size)
    assert tl.final.fused.get("EmbedLayerNormalization") == 1
    unfused, fused = spec_from_onnx(tl.input.model), spec_from_onnx(tl.final.model)
    assert (unfused.vocab_size, unfused.type_vocab_size, unfused.max_positions) == (1000, 2, 160)
    assert fused == unfused
    # The int8 variant's QEmbedLayerNormalization keeps the tables in the same places.
    from workbench.measure.worker.precision import quantize_int8

    qm = quantize_int8(tl.final.model, per_channel=True)
    assert any(n.op_type == "QEmbedLayerNormalization" for n in qm.graph.node)
    assert spec_from_onnx(qm) == unfused
