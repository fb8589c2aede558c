"""The rotary encoders of 2025 (ModernBERT, NomicBERT, GTE, EuroBERT), exported by both exporters and fused
by the workbench's own rules: one attention node per layer, the rotation fused, the norms fused, exact at
every real token of a right-padded batch longer than ModernBERT's local window."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import numpy as np
import onnx
import pytest

from workbench.config import ExportConfig, FusionPlan
from workbench.export import export
from workbench.fusion import Timeline
from workbench.models import resolve

TINY = dict(num_hidden_layers=2, hidden_size=48, num_attention_heads=3, intermediate_size=80, vocab_size=500,
            pad_token_id=0, bos_token_id=1, eos_token_id=2)
FAMILIES = {
    # layer 0 global, layer 1 local with a 16-token window: the parity sequence (128) is far longer
    "modernbert": dict(local_attention=16, global_attn_every_n_layers=2, max_position_embeddings=512,
                       cls_token_id=1, sep_token_id=2, mask_token_id=3),
    "nomic_bert": dict(max_position_embeddings=512, type_vocab_size=2),
    "gte": dict(max_position_embeddings=512, type_vocab_size=1),
    "eurobert": dict(max_position_embeddings=512, mask_token_id=3),
}
NORMS = {"modernbert": "SkipLayerNormalization", "nomic_bert": "SkipLayerNormalization",
         "gte": "SkipLayerNormalization", "eurobert": "SkipSimplifiedLayerNormalization"}


@pytest.fixture(scope="module")
def encoder_folder(tmp_path_factory):
    import torch
    import transformers

    made = {}

    def make(family: str):
        if family not in made:
            folder = tmp_path_factory.mktemp(family)
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(7)
                cfg = transformers.AutoConfig.for_model(family, **TINY, **FAMILIES[family])
                transformers.AutoModel.from_config(cfg).save_pretrained(folder)
            made[family] = folder
        return made[family]

    return make


def _ops(model: onnx.ModelProto) -> Counter:
    return Counter(n.op_type for n in model.graph.node)


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_rotary_encoder_fully_fused_and_exact(encoder_folder, family, exporter):
    src = resolve(encoder_folder(family))
    assert src.untested is None
    result = export(src, ExportConfig(exporter=exporter, attention="sdpa"))
    assert result.parity["ok"], result.parity  # export vs PyTorch at real tokens, padded batch of 128
    tl = Timeline(result.path, FusionPlan(engine="onnxscript"), num_heads=src.num_heads,
                  hidden_size=src.hidden_size, num_layers=src.num_layers)
    snaps = tl.run()
    ops = _ops(tl.final.model)
    layers = TINY["num_hidden_layers"]
    assert ops["MultiHeadAttention"] == layers
    assert ops["RotaryEmbedding"] == 2 * layers
    for gone in ("Softmax", "Neg", "Sin", "Cos"):
        assert ops[gone] == 0, (gone, ops)
    assert ops[NORMS[family]] >= 2 * layers  # post-norm families also fold the embeddings sum
    assert tl.check_parity(len(snaps) - 1).ok
    steps = {s.step: s for s in snaps}
    assert steps["encoder_rotary"].counts == {"encoder_rotary": 2 * layers}
    assert steps["encoder_attention"].counts == {"encoder_attention": layers}


def test_cli_fuses_modernbert_and_the_fused_file_runs_alone(encoder_folder, tmp_path):
    folder = encoder_folder("modernbert")
    out = tmp_path / "fused.onnx"
    proc = subprocess.run([sys.executable, "-m", "workbench.cli", "fuse", str(folder), "--exporter", "dynamo",
                           "--attention", "sdpa", "--parity", "-o", str(out), "--json"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    data = json.loads(proc.stdout)
    assert data["final"]["parity"]["ok"]
    assert data["final"]["attention_nodes"] == TINY["num_hidden_layers"]
    import onnxruntime as ort

    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    assert [i.name for i in sess.get_inputs()] == ["input_ids", "attention_mask"]
    ids = np.random.default_rng(0).integers(4, 500, size=(2, 40), dtype=np.int64)
    mask = np.ones_like(ids)
    mask[1, 25:] = 0
    hidden = sess.run(None, {"input_ids": ids, "attention_mask": mask})[0]
    assert hidden.shape == (2, 40, TINY["hidden_size"]) and np.isfinite(hidden).all()


def test_ort_optimizer_crash_on_bias_free_norm_is_a_step_failure_in_its_words(encoder_folder):
    src = resolve(encoder_folder("modernbert"))
    result = export(src, ExportConfig(exporter="dynamo", attention="sdpa"))
    tl = Timeline(result.path, FusionPlan(engine="ort"), num_heads=src.num_heads, hidden_size=src.hidden_size,
                  num_layers=src.num_layers)
    snaps = tl.run()  # no exception: the crash is the step's result
    step = next(s for s in snaps if s.step == "skip_layer_norm")
    assert "ONNX Runtime's optimizer failed in this step" in (step.diagnostic or ""), step.diagnostic
    assert "IndexError" in step.diagnostic
    assert step.nodes == snaps[snaps.index(step) - 1].nodes  # the graph is left as it was


def test_an_untested_encoder_type_is_opened_with_a_note(tmp_path):
    import transformers

    cfg = transformers.AutoConfig.for_model("camembert", num_hidden_layers=1, hidden_size=32, num_attention_heads=2,
                                            intermediate_size=64, vocab_size=100, type_vocab_size=2)
    transformers.AutoModel.from_config(cfg).save_pretrained(tmp_path)
    src = resolve(tmp_path)
    assert src.model_type == "camembert"
    assert "has not been tested" in src.untested
    assert src.input_names == ("input_ids", "attention_mask", "token_type_ids")


def test_a_rotation_the_rule_cannot_take_is_named_with_its_node():
    """A rotate_half whose slices do not split the head in halves is left as it is, and the reason says where."""
    import onnx_ir as ir
    from onnx import TensorProto, helper

    from workbench.fusion.rules.rotary import RotaryRule

    def c(name, v):
        return helper.make_tensor(name, TensorProto.INT64, [1], [v])

    nodes = [
        helper.make_node("Slice", ["x", "s3", "end", "ax"], ["hi"], name="/layers.2/attn/Slice_hi"),
        helper.make_node("Slice", ["x", "s0", "s3", "ax"], ["lo"], name="/layers.2/attn/Slice_lo"),
        helper.make_node("Neg", ["hi"], ["neg"], name="/layers.2/attn/Neg"),
        helper.make_node("Concat", ["neg", "lo"], ["rot"], axis=-1),
        helper.make_node("Mul", ["rot", "sin"], ["rs"]),
        helper.make_node("Mul", ["x", "cos"], ["xc"]),
        helper.make_node("Add", ["xc", "rs"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 5, 8]),
         helper.make_tensor_value_info("cos", TensorProto.FLOAT, [1, 1, 5, 8]),
         helper.make_tensor_value_info("sin", TensorProto.FLOAT, [1, 1, 5, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 5, 8])],
        [c("s3", 3), c("s0", 0), c("end", 2**62), c("ax", -1)])
    model = ir.serde.deserialize_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    result = RotaryRule().apply(model)
    count, reasons = result.count, result.reasons
    assert count == 0
    assert reasons == ["rotary: Slice /layers.2/attn/Slice_hi (layer 2) does not take the second half of the head"]
