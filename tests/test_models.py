"""Model sources: presets, local folders, hub ids, ONNX files and refusals."""

import json

import pytest

from workbench.errors import ModelSourceError
from workbench.models import PRESETS, resolve


def test_default_is_bert_base_with_random_weights_said_aloud():
    src = resolve()
    assert src.name == "bert-base"
    assert (src.num_layers, src.hidden_size, src.num_heads, src.vocab_size) == (12, 768, 12, 30522)
    assert src.random_weights and "random weights" in src.label
    assert "random weights" in src.describe()["label"]


@pytest.mark.parametrize("name,layers,hidden,heads", [
    ("bert-tiny", 2, 128, 2), ("bert-3layer", 3, 768, 12), ("bert-large", 24, 1024, 16)])
def test_presets_have_the_documented_shapes(name, layers, hidden, heads):
    src = resolve(name)
    assert (src.num_layers, src.hidden_size, src.num_heads) == (layers, hidden, heads)


def test_preset_weights_are_seeded_and_do_not_touch_global_rng():
    import torch

    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    a = resolve("bert-tiny").build()
    after = torch.rand(3)
    b = resolve("bert-tiny").build()
    assert torch.equal(expected, after), "building a preset must not consume the caller's RNG"
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.equal(pa, pb)
    c = resolve("bert-tiny", seed=7).build()
    assert not torch.equal(next(a.parameters()), next(c.parameters()))
    assert resolve("bert-tiny").identity != resolve("bert-tiny", seed=7).identity


def test_attention_implementation_is_applied():
    m = resolve("bert-tiny").build("sdpa")
    assert m.config._attn_implementation == "sdpa"


@pytest.mark.parametrize("kind,model_type,inputs", [
    ("bert", "bert", 3), ("roberta", "roberta", 3), ("distilbert", "distilbert", 2)])
def test_local_folder_loads_with_transformers(hf_folder, kind, model_type, inputs):
    import torch

    folder = hf_folder(kind)
    src = resolve(folder)
    assert src.kind == "folder" and src.model_type == model_type and not src.random_weights
    assert len(src.input_names) == inputs
    model = src.build()
    ids = torch.randint(5, 100, (1, 6))
    out = model(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state
    assert out.shape[:2] == (1, 6)


def test_folder_identity_follows_weight_content(hf_folder, tmp_path):
    import shutil

    src = hf_folder("bert")
    copy = tmp_path / "copy"
    shutil.copytree(src, copy)
    assert resolve(copy).identity == resolve(src).identity
    weights = next(copy.glob("*.safetensors"))
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    assert resolve(copy).identity != resolve(src).identity


def test_folder_with_pickle_weights_only_is_refused(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    (tmp_path / "pytorch_model.bin").write_bytes(b"\x80\x02not really")
    with pytest.raises(ModelSourceError, match="pickle files are refused"):
        resolve(tmp_path)


def test_folder_needing_remote_code_is_refused(hf_folder, tmp_path):
    import shutil

    shutil.copytree(hf_folder("bert"), tmp_path / "m")
    cfg = json.loads((tmp_path / "m" / "config.json").read_text())
    cfg["auto_map"] = {"AutoModel": "modeling_evil.EvilModel"}
    (tmp_path / "m" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelSourceError, match="never runs code"):
        resolve(tmp_path / "m")


def test_unknown_and_generative_types_are_refused_with_the_type_named(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "no-such-family"}))
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(ModelSourceError, match="no-such-family model.*without remote code"):
        resolve(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}))
    with pytest.raises(ModelSourceError, match="gpt2 model, a decoder"):
        resolve(tmp_path)


def test_rotary_presets_resolve_with_their_inputs_and_no_untested_note():
    for name, inputs in (("modernbert-base", 2), ("nomic-embed", 3), ("gte-base", 3), ("eurobert-210m", 2)):
        src = resolve(name)
        assert src.random_weights and src.untested is None
        assert len(src.input_names) == inputs, name
    assert resolve("modernbert-base").model_type == "modernbert"


def test_unknown_hub_id_offline_gives_one_clear_line(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelSourceError) as e:
        resolve("no-such-org/no-such-model-xyz")
    msg = str(e.value)
    assert "\n" not in msg and "hub" in msg and "no-such-org/no-such-model-xyz" in msg


def test_onnx_file_is_a_source(tiny_export):
    src = resolve(tiny_export().path)
    assert src.kind == "onnx"
    with pytest.raises(ModelSourceError, match="no PyTorch model"):
        src.build()


def test_missing_paths_are_clear(tmp_path):
    with pytest.raises(ModelSourceError, match="no such file"):
        resolve(tmp_path / "nope.onnx")
    with pytest.raises(ModelSourceError, match="no such file or folder"):
        resolve("./definitely/not/here")


def test_all_presets_listed():
    assert set(PRESETS) == {"bert-base", "bert-tiny", "bert-3layer", "bert-large",
                            "modernbert-base", "nomic-embed", "gte-base", "eurobert-210m",
                            "mpnet-base", "deberta-v3-base", "electra-base", "albert-base"}


def test_every_family_is_one_record_and_presets_read_it():
    """Adding a family is adding a record: presets, tested types and lookups all come from families.py."""
    from workbench import families as fam
    from workbench.models import TESTED_TYPES

    types = [t for f in fam.FAMILIES for t in f.model_types]
    assert len(types) == len(set(types)), "a model type belongs to one record"
    assert PRESETS == fam.preset_configs() and set(PRESETS) == set(fam.preset_names())
    assert set(TESTED_TYPES) == {t for f in fam.FAMILIES if f.tested and f.role == fam.ENCODER for t in f.model_types}
    for f in fam.FAMILIES:
        for p in f.presets:
            assert p.config.get("model_type", f.model_type) in f.model_types and p.note, p.name
            src = resolve(p.name)
            assert src.model_type == f.model_type and src.untested is None, p.name
            assert ("token_type_ids" in src.input_names) == (f.type_vocab_default is not None and bool(
                p.config.get("type_vocab_size", f.type_vocab_default))), p.name
    assert fam.ort_optimizes("roberta") and not fam.ort_optimizes("modernbert") and not fam.ort_optimizes(None)
    assert fam.likely_engine("bert") is None and fam.likely_engine("mpnet") == "onnxscript"
    assert fam.likely_engine("some-new-encoder") == "onnxscript" and fam.likely_engine(None) is None


def test_positions_are_read_under_any_name_and_offset_where_the_family_counts_from_the_pad():
    from workbench.models import ModelSource

    def src(model_type, **config):
        return ModelSource("m", "folder", "x", model_type=model_type, config_dict=config)

    assert src("bert", max_position_embeddings=64).max_positions == 64
    assert src("roberta", max_position_embeddings=66, pad_token_id=1).max_positions == 64
    assert src("mpnet", max_position_embeddings=514, pad_token_id=1).max_positions == 512
    assert src("some-encoder", n_positions=24).max_positions == 24
    assert src("some-encoder", max_positions=12).max_positions == 12
    assert src("some-encoder").max_positions == 512


@pytest.mark.parametrize("model_type, config, says", [
    ("llama", {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2}, "a decoder"),  # no architectures
    ("gptj", {}, "a decoder"),  # no record: transformers' tables say it has a causal LM and no masked LM
    ("t5", {"architectures": ["T5Model"]}, "an encoder-decoder"),
    ("bart", {}, "an encoder-decoder"),
    ("bert", {"is_decoder": True, "architectures": ["BertModel"]}, "a decoder"),
    ("roberta", {"architectures": ["RobertaForCausalLM"]}, "a decoder"),
])
def test_decoders_and_encoder_decoders_are_refused_whatever_architectures_says(tmp_path, model_type, config, says):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": model_type, **config}))
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(ModelSourceError, match=f"is a {model_type} model, {says}") as e:
        resolve(tmp_path)
    assert "\n" not in str(e.value)


def test_a_base_gpt2_saved_by_gpt2model_is_refused(tmp_path):
    import transformers

    transformers.GPT2Model(transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, n_positions=16,
                                                   vocab_size=100)).save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["architectures"] == ["GPT2Model"]
    with pytest.raises(ModelSourceError, match="gpt2 model, a decoder"):
        resolve(tmp_path)


def test_a_bert_with_few_positions_exports_with_parity_at_its_longest_sequence(tmp_path):
    """Parity feeds stay within the model's positions: a 6-position model is checked at 6 tokens (before: the
    export's example inputs were longer than the model, and the parity cases were all dropped)."""
    import transformers

    from workbench.export import export

    transformers.BertModel(transformers.BertConfig(num_hidden_layers=1, hidden_size=32, num_attention_heads=2,
                                                   intermediate_size=64, vocab_size=100, max_position_embeddings=6),
                           add_pooling_layer=False).save_pretrained(tmp_path)
    r = export(resolve(tmp_path))
    assert r.parity["ok"] and r.parity["cases"] == 2 and r.parity["finite"]
