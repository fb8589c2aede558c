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
    with pytest.raises(ModelSourceError, match="gpt2 text-generation"):
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
                            "modernbert-base", "nomic-embed", "gte-base", "eurobert-210m"}
