"""MPNet, DeBERTa-v2/v3, ELECTRA and ALBERT: opened, exported by both exporters and fused by the onnxscript
chain with the workbench's late softmax-attention rule: one attention node per layer, no Softmax left, exact at
every real token of a right-padded batch (DeBERTa's content-to-position and position-to-content scores as the
kernel's bias); a core the rule cannot take is named; ALBERT's shared weights stay shared."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import onnx
import pytest

from workbench.config import ExportConfig, FusionPlan
from workbench.errors import ModelSourceError
from workbench.export import export
from workbench.fusion import Timeline
from workbench.models import PRESETS, TESTED_TYPES, resolve

LAYERS = 2
TINY = dict(num_hidden_layers=LAYERS, hidden_size=64, num_attention_heads=4, intermediate_size=96, vocab_size=300,
            max_position_embeddings=160, pad_token_id=0)
FAMILIES = {
    "electra": dict(embedding_size=24, type_vocab_size=2),  # a projection from a smaller embedding, as ELECTRA-small
    "albert": dict(embedding_size=24, hidden_act="gelu_new", type_vocab_size=2),  # albert-base-v2's tanh GELU
    "mpnet": dict(relative_attention_num_buckets=32),  # transformers buckets into 32 whatever the config says
    "deberta-v2": dict(type_vocab_size=0, relative_attention=True, position_buckets=32, norm_rel_ebd="layer_norm",
                       share_att_key=True, pos_att_type=["p2c", "c2p"], max_relative_positions=-1,
                       position_biased_input=False),
}
ATTENTION = {"electra": "sdpa", "albert": "sdpa", "mpnet": "eager", "deberta-v2": "eager"}  # sdpa where offered


def _save(folder, family: str, *, head=None, **extra):
    import torch
    import transformers

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(11)
        cfg = transformers.AutoConfig.for_model(family, **{**TINY, **FAMILIES[family], **extra})
        (head or transformers.AutoModel).from_config(cfg).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    made = {}

    def make(family: str):
        if family not in made:
            made[family] = _save(tmp_path_factory.mktemp(family), family)
        return made[family]

    return make


def _fused(folder, exporter: str):
    src = resolve(folder)
    assert src.untested is None and src.model_type in TESTED_TYPES
    result = export(src, ExportConfig(exporter=exporter, attention=ATTENTION[src.model_type]))
    assert result.parity["ok"], result.parity  # export vs PyTorch at real tokens, right-padded batch of 128
    tl = Timeline(result.path, FusionPlan(engine="onnxscript"), num_heads=src.num_heads,
                  hidden_size=src.hidden_size, num_layers=src.num_layers)
    snaps = tl.run()
    assert tl.check_parity(len(snaps) - 1).ok
    return src, result, tl, {s.step: s for s in snaps}


def _ops(model: onnx.ModelProto) -> Counter:
    return Counter(n.op_type for n in model.graph.node)


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
@pytest.mark.parametrize("family", ["electra", "albert", "mpnet"])
def test_one_attention_node_per_layer_no_softmax_and_exact(folder, family, exporter):
    src, _, tl, steps = _fused(folder(family), exporter)
    ops = _ops(tl.final.model)
    assert ops["Attention"] + ops["MultiHeadAttention"] == LAYERS, ops
    assert ops["Softmax"] == 0, ops
    assert ops["SkipLayerNormalization"] >= 2 * LAYERS - 1, ops
    assert ops["BiasGelu"] + ops["Gelu"] + ops["FastGelu"] == LAYERS, ops
    if family == "mpnet":
        # The relative-position bias is computed once and every layer's kernel reads the same bias.
        biases = {n.input[5] for n in tl.final.model.graph.node if n.op_type == "MultiHeadAttention"}
        assert len(biases) == 1 and "" not in biases, biases
        assert src.input_names == ("input_ids", "attention_mask")


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_albert_of_a_held_out_shape_fuses_on_both_exporters(tmp_path_factory, exporter):
    """Embeddings narrower than the hidden size, 6 heads of 16, a width no other test uses (issue 29): the dynamo
    export's constant folding leaves a transposed weight as a strided array, which onnx-ir's deduplication
    refused ("ndarray is not C-contiguous")."""
    folder = tmp_path_factory.getbasetemp() / "albert-held-out"
    if not folder.exists():
        _save(folder, "albert", hidden_size=96, num_attention_heads=6, intermediate_size=192, embedding_size=48)
    src, _, tl, _ = _fused(folder, exporter)
    assert (src.hidden_size, src.num_heads) == (96, 6)
    ops = _ops(tl.final.model)
    assert ops["Attention"] + ops["MultiHeadAttention"] == LAYERS and ops["Softmax"] == 0, ops


def test_deberta_disentangled_scores_become_the_attention_bias(folder):
    src, _, tl, steps = _fused(folder("deberta-v2"), "dynamo")
    assert src.input_names == ("input_ids", "attention_mask")  # DeBERTa-v3: type_vocab_size 0
    ops = _ops(tl.final.model)
    assert ops["MultiHeadAttention"] == LAYERS and ops["Softmax"] == 0, ops
    assert ops["GatherElements"] >= 2 * LAYERS  # c2p and p2c stay outside the kernel, in its bias
    assert steps["softmax_attention"].counts == {"softmax_attention": LAYERS}


def test_a_score_scaled_by_a_tensor_known_only_at_run_time_is_named_as_the_reason():
    import onnx_ir as ir
    from onnx import TensorProto as T, helper as h

    from workbench.fusion.rules.encoder_attention import SoftmaxAttentionRule

    B, N, S, H = "batch", 2, "sequence", 8
    nodes = [h.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             h.make_node("MatMul", ["q", "kt"], ["qk"]),
             h.make_node("Div", ["qk", "temperature"], ["scaled"], name="the_temperature"),
             h.make_node("Softmax", ["scaled"], ["p"], axis=-1),
             h.make_node("MatMul", ["p", "v"], ["ctx"]),
             h.make_node("Transpose", ["ctx"], ["ctx_t"], perm=[0, 2, 1, 3]),
             h.make_node("Reshape", ["ctx_t", "merge"], ["y"])]
    qkv = [h.make_tensor_value_info(n, T.FLOAT, [B, N, S, H]) for n in ("q", "k", "v")]
    graph = h.make_graph(nodes, "core", [*qkv, h.make_tensor_value_info("temperature", T.FLOAT, [])],
                         [h.make_tensor_value_info("y", T.FLOAT, [B, S, N * H])],
                         [h.make_tensor("merge", T.INT64, [3], [0, 0, N * H])])
    model = ir.serde.deserialize_model(onnx.shape_inference.infer_shapes(h.make_model(graph)))
    result = SoftmaxAttentionRule().apply(model)
    count, reasons = result.count, result.reasons
    assert count == 0
    assert any("Div the_temperature" in r and "computed tensor, not a constant" in r for r in reasons), reasons


def test_albert_shared_layer_weights_stay_shared(tmp_path):
    # Layer weights dominate (small vocabulary, few positions): a copy per layer would show at once.
    src_folder = _save(tmp_path / "albert", "albert", num_hidden_layers=4, vocab_size=60, max_position_embeddings=64,
                       embedding_size=16)
    for exporter in ("torchscript", "dynamo"):
        src = resolve(src_folder)
        result = export(src, ExportConfig(exporter=exporter, attention="sdpa"))
        tl = Timeline(result.path, FusionPlan(engine="onnxscript"), num_heads=src.num_heads,
                      hidden_size=src.hidden_size, num_layers=src.num_layers)
        tl.run()
        ops = _ops(tl.final.model)
        assert ops["Attention"] + ops["MultiHeadAttention"] == 4, (exporter, ops)
        exported = onnx.load(str(result.path)).ByteSize()
        assert tl.final.model.ByteSize() <= 1.05 * exported, (exporter, tl.final.model.ByteSize(), exported)


def test_sentence_embedding_folder_naming_a_head_it_lacks_opens_the_encoder(tmp_path):
    import transformers

    base_only = _save(tmp_path / "st", "mpnet")  # the bare encoder's tensors: embeddings..., encoder...
    cfg = json.loads((base_only / "config.json").read_text())
    cfg["architectures"] = ["MPNetForMaskedLM"]  # as all-mpnet-base-v2's config.json says
    (base_only / "config.json").write_text(json.dumps(cfg))
    src = resolve(base_only)
    assert src.task == "embedding" and src.output_name == "last_hidden_state"
    assert len(src.notes) == 1 and "MPNetForMaskedLM" in src.notes[0] and "bare encoder" in src.notes[0]
    assert src.build("eager").__class__.__name__ == "MPNetModel"
    headed = _save(tmp_path / "mlm", "mpnet", head=transformers.AutoModelForMaskedLM)
    src = resolve(headed)
    assert src.task == "masked_lm" and src.notes == []


def test_a_family_without_sdpa_says_which_attention_to_ask_for(folder):
    with pytest.raises(ModelSourceError, match="has no sdpa attention.*--attention eager"):
        resolve(folder("mpnet")).build("sdpa")


def test_presets_open_with_their_families_inputs():
    for name, types in (("mpnet-base", 2), ("deberta-v3-base", 2), ("electra-base", 3), ("albert-base", 3)):
        src = resolve(name)
        assert src.model_type == PRESETS[name]["model_type"] and src.untested is None and src.random_weights
        assert len(src.input_names) == types, (name, src.input_names)


def test_cli_fuses_deberta_torchscript_whose_scale_is_computed_from_a_shape(folder, tmp_path):
    # TorchScript divides K^T by sqrt(q.size(-1) * 3) read from a shape at run time, with the head size left
    # symbolic: the rule evaluates it from the hidden size over the heads.
    out = tmp_path / "deberta-fused.onnx"
    proc = subprocess.run([sys.executable, "-m", "workbench.cli", "fuse", str(folder("deberta-v2")), "--exporter",
                           "torchscript", "--engine", "onnxscript", "--parity", "-o", str(out), "--json"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(proc.stdout)
    assert data["final"]["parity"]["ok"] and data["final"]["attention_nodes"] == LAYERS
    step = next(s for s in data["steps"] if s["step"] == "softmax_attention")
    assert step["fused_here"].get("MultiHeadAttention") == LAYERS, step["fused_here"]
    assert _ops(onnx.load(str(out)))["Softmax"] == 0


def _mpnet_with_tokenizer(folder):
    """A tiny MPNet folder with its own WordPiece tokenizer (<s> ... </s>, <pad> = 1, <mask>), as all-mpnet has."""
    import transformers
    from textmodels import write_vocab

    words = write_vocab(folder / ".vocab").read_text().split()[5:]  # without BERT's [PAD] [UNK] [CLS] [SEP] [MASK]
    vocab = ["<s>", "<pad>", "</s>", "<unk>", *words, "<mask>"]
    tok = transformers.MPNetTokenizer(vocab={w: i for i, w in enumerate(vocab)}, unk_token="<unk>")
    _save(folder, "mpnet", vocab_size=len(vocab) + 8, pad_token_id=1)
    tok.save_pretrained(folder)
    return folder


def test_mpnet_answers_on_real_text_with_its_own_tokenizer_survive_fusion(tmp_path):
    folder = _mpnet_with_tokenizer(tmp_path / "mpnet-st")
    text = tmp_path / "sentences.txt"
    text.write_text("The cat sat on the mat.\nA cat was sitting on a rug.\nHow do I reset my password?\n"
                    "I forgot my password.\nStocks fell 3.2% on Tuesday.\nThe market dropped sharply.\n")
    proc = subprocess.run([sys.executable, "-m", "workbench.cli", "fuse", str(folder), "--engine", "onnxscript",
                           "--parity", "--text", str(text), "--json"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    final = json.loads(proc.stdout)["final"]
    assert final["attention_nodes"] == LAYERS and final["parity"]["ok"]
    tp = final["task_parity"]
    assert tp["kind"] == "embedding" and tp["sentences"] == 6
    assert tp["top1_agreement"] == 1.0 and tp["spearman"] >= 0.999
