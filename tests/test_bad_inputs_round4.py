"""The fourth round of bad input (issue 29), the model side: folders that name files outside themselves,
models whose outputs are broken, decoders and encoder-decoders under any name, impossible rotary bases,
relative-position tables too large to build, weights whose shapes disagree with the config, and
``workbench prepare`` given what it cannot prepare. Each through the CLI as a user types it: exit status 2,
at most three lines on stderr naming the user's file or argument, no traceback, nothing of the user's
changed and nothing written; and valid odd folders (sharded, a hub snapshot of links, six positions) work.
Every folder is made here, in the test, from tiny configs.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import badmodels as bm
import pytest

from workbench.errors import BrokenModelError, ModelSourceError, WorkbenchError
from workbench.models import resolve

DRIVER = textwrap.dedent('''
    import contextlib, io, json, os, sys, time
    from workbench.cli import main
    cases = json.loads(sys.argv[1])
    results = []
    for name, argv in cases.items():
        err, out = io.StringIO(), io.StringIO()
        t = time.perf_counter()  # reported by benchmarks/bad_input_speed.py, never asserted here
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
                rc = main(argv)
        except SystemExit as e:
            rc = e.code
        results.append({"case": name, "rc": rc, "stderr": err.getvalue(), "stdout": out.getvalue(),
                        "seconds": time.perf_counter() - t})
    print(json.dumps(results))
''')
SMALL = dict(num_hidden_layers=1, hidden_size=32, num_attention_heads=2, intermediate_size=64, vocab_size=200,
             max_position_embeddings=64)
ROTARY = dict(num_hidden_layers=1, hidden_size=48, num_attention_heads=3, intermediate_size=80, vocab_size=300,
              pad_token_id=0, bos_token_id=1, eos_token_id=2, max_position_embeddings=64)


def _tree(folder: Path) -> dict:
    return {p.relative_to(folder).as_posix(): (hashlib.sha256(p.read_bytes()).hexdigest()
                                               if p.is_file() and not p.is_symlink() else "other")
            for p in sorted(folder.rglob("*"))}


def _save(model, folder: Path, **config_changes) -> Path:
    """``save_pretrained`` the model, then edit its config.json as a user's odd folder would have it."""
    model.save_pretrained(folder, safe_serialization=True)
    if config_changes:
        cfg = json.loads((folder / "config.json").read_text())
        for key, value in config_changes.items():
            if value is None:
                cfg.pop(key, None)
            else:
                cfg[key] = value
        (folder / "config.json").write_text(json.dumps(cfg))
    return folder


def _bert(folder: Path, *, positions: int = SMALL["max_position_embeddings"], **changes) -> Path:
    import torch
    import transformers

    torch.manual_seed(0)
    cfg = transformers.BertConfig(**{**SMALL, "max_position_embeddings": positions})
    return _save(transformers.BertModel(cfg, add_pooling_layer=False), folder, **changes)


def _family(family: str, folder: Path, **changes) -> Path:
    import torch
    import transformers

    extra = {"modernbert": dict(cls_token_id=1, sep_token_id=2, mask_token_id=3), "gte": dict(type_vocab_size=1),
             "electra": dict(embedding_size=48), "deberta-v2": dict(relative_attention=True, position_buckets=-1,
                                                                     max_relative_positions=16, type_vocab_size=0)}
    torch.manual_seed(0)
    cfg = transformers.AutoConfig.for_model(family, **ROTARY, **extra.get(family, {}))
    return _save(transformers.AutoModel.from_config(cfg), folder, **changes)


def _nan_weights(folder: Path) -> Path:
    """A BERT folder whose weights hold a NaN (a damaged fine-tune): every output is NaN."""
    from safetensors.numpy import load_file, save_file

    _bert(folder)
    tensors = load_file(folder / "model.safetensors")
    name = next(k for k in tensors if k.endswith("output.LayerNorm.weight"))
    tensors[name][0] = float("nan")
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    return folder


def _index(folder: Path, shard: str) -> Path:
    from safetensors.numpy import load_file

    names = load_file(folder / "model.safetensors")
    (folder / "model.safetensors").unlink()
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": {
        n: shard for n in names}}))
    return folder


def _escapes(inp: Path) -> dict[str, Path]:
    """Folders that name files outside themselves, and the outside files they reach for."""
    outside = inp / "outside"
    _bert(outside)
    (outside / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nsecret\n")
    cases = {
        "index shard ../": _index(_bert(inp / "dotdot"), "../outside/model.safetensors"),
        "index shard absolute": _index(_bert(inp / "absolute"), str(outside / "model.safetensors")),
    }
    linked = _index(_bert(inp / "linkdir"), "sub/model.safetensors")
    (linked / "sub").symlink_to(outside)
    cases["index shard through a symlinked folder"] = linked
    weights = _bert(inp / "linkweights")
    (weights / "model.safetensors").unlink()
    (weights / "model.safetensors").symlink_to(outside / "model.safetensors")
    cases["weights a symlink out"] = weights
    vocab = _bert(inp / "linkvocab")
    (vocab / "vocab.txt").symlink_to(outside / "vocab.txt")
    cases["vocab.txt a symlink out"] = vocab
    return cases


def _decoders(inp: Path) -> dict[str, Path]:
    import transformers

    gpt2 = _save(transformers.GPT2Model(transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, n_positions=16,
                                                                vocab_size=100)), inp / "gpt2-base")
    llama = _save(transformers.LlamaModel(transformers.LlamaConfig(
        num_hidden_layers=1, hidden_size=32, num_attention_heads=2, num_key_value_heads=2, intermediate_size=64,
        vocab_size=100)), inp / "llama", architectures=None)
    t5 = _save(transformers.T5Model(transformers.T5Config(num_layers=1, d_model=32, num_heads=2, d_ff=64, d_kv=16,
                                                          vocab_size=100)), inp / "t5-base")
    bart = _save(transformers.BartModel(transformers.BartConfig(
        encoder_layers=1, decoder_layers=1, d_model=32, encoder_attention_heads=2, decoder_attention_heads=2,
        encoder_ffn_dim=64, decoder_ffn_dim=64, vocab_size=100, max_position_embeddings=64)), inp / "bart-base")
    return {"gpt2 base model": gpt2, "llama without architectures": llama, "t5 base": t5, "bart base": bart}


def _cases(inp: Path, out: Path) -> tuple[dict, dict]:
    esc, dec = _escapes(inp), _decoders(inp)
    gte0 = _family("gte", inp / "gte-theta0")
    cfg = json.loads((gte0 / "config.json").read_text())
    cfg["rope_parameters"]["rope_theta"] = 0.0
    (gte0 / "config.json").write_text(json.dumps(cfg))
    modern = _family("modernbert", inp / "modern-negative", rope_parameters=None, global_rope_theta=-10000.0,
                     local_rope_theta=10000.0)
    nan = _nan_weights(inp / "nan-weights")
    deberta = _family("deberta-v2", inp / "deberta-huge", max_relative_positions=1_000_000_000)
    electra = _family("electra", inp / "electra-shapes", intermediate_size=96)
    (inp / "list-manifest").mkdir()
    (inp / "list-manifest" / "workshop.json").write_text("[1, 2]")
    (inp / "null-versions").mkdir()
    (inp / "null-versions" / "workshop.json").write_text('{"versions": null}')
    o = str(out)
    cases = {
        "index shard ../ / export": ["export", str(esc["index shard ../"]), "-o", o + "/e"],
        "index shard absolute / fuse": ["fuse", str(esc["index shard absolute"])],
        "index shard through a symlinked folder / bench": ["bench", str(esc["index shard through a symlinked folder"]),
                                                            "--runs", "1", "--seq", "8"],
        "weights a symlink out / fuse": ["fuse", str(esc["weights a symlink out"])],
        "vocab.txt a symlink out / fuse --text": ["fuse", str(esc["vocab.txt a symlink out"]), "--text", "builtin"],
        "gte rope_theta 0 / fuse": ["fuse", str(gte0)],
        "modernbert negative global_rope_theta / bench": ["bench", str(modern), "--runs", "1", "--seq", "8"],
        "NaN weights / fuse": ["fuse", str(nan), "-o", o + "/fused.onnx"],
        "NaN weights / bench": ["bench", str(nan), "--runs", "1", "--seq", "8"],
        "NaN weights / report": ["report", str(nan), "-o", o + "/report"],
        "NaN weights / tune": ["tune", str(nan), "--runs", "1", "--seq", "8"],
        "gpt2 base model / fuse": ["fuse", str(dec["gpt2 base model"])],
        "llama without architectures / bench": ["bench", str(dec["llama without architectures"]), "--runs", "1"],
        "t5 base / export": ["export", str(dec["t5 base"]), "-o", o + "/e"],
        "bart base / fuse": ["fuse", str(dec["bart base"])],
        "deberta max_relative_positions 1e9 / fuse": ["fuse", str(deberta)],
        "electra shapes disagree / fuse": ["fuse", str(electra)],
        "prepare --check a list manifest": ["prepare", "--check", str(inp / "list-manifest")],
        "prepare --check null versions": ["prepare", "--check", str(inp / "null-versions")],
        "prepare --check a missing folder": ["prepare", "--check", str(inp / "no-such-room")],
        "prepare --models an unknown name": ["prepare", "--cache", o + "/room", "--models", "not-a-model-xyz",
                                             "--real", "none"],
        "prepare --real an unknown value": ["prepare", "--cache", o + "/room", "--models", "bert-tiny",
                                            "--real", "bogus-real"],
    }
    messages = {
        "index shard ../ / export": "names the shard '../outside/model.safetensors', outside the model's folder",
        "index shard absolute / fuse": "outside the model's folder; refused",
        "index shard through a symlinked folder / bench": "names the shard 'sub/model.safetensors', which leads to",
        "weights a symlink out / fuse": "linkweights/model.safetensors leads to",
        "vocab.txt a symlink out / fuse --text": "linkvocab/vocab.txt leads to",
        "gte rope_theta 0 / fuse": "gte-theta0/config.json: rope_parameters.rope_theta is 0.0; a rotary base must be",
        "modernbert negative global_rope_theta / bench": "global_rope_theta is -10000.0",
        "NaN weights / fuse": "nan-weights gives outputs that are not finite",
        "NaN weights / bench": "nan-weights gives outputs that are not finite",
        "NaN weights / report": "nan-weights gives outputs that are not finite",
        "NaN weights / tune": "nan-weights gives outputs that are not finite",
        "gpt2 base model / fuse": "is a gpt2 model, a decoder",
        "llama without architectures / bench": "is a llama model, a decoder",
        "t5 base / export": "is a t5 model, an encoder-decoder",
        "bart base / fuse": "is a bart model, an encoder-decoder",
        "deberta max_relative_positions 1e9 / fuse": "relative-position table: max_relative_positions 1,000,000,000",
        "electra shapes disagree / fuse": ("tensor 'encoder.layer.0.intermediate.dense.weight' has shape [80, 48] in "
                                           "the weights but [96, 48] by config.json"),
        "prepare --check a list manifest": "list-manifest/workshop.json is not a manifest",
        "prepare --check null versions": "null-versions/workshop.json is not a manifest",
        "prepare --check a missing folder": "no-such-room does not exist",
        "prepare --models an unknown name": "'not-a-model-xyz' is not a preset",
        "prepare --real an unknown value": "--real 'bogus-real' is not a real model",
    }
    return cases, messages


def _run(cases: dict, env: dict | None = None) -> list[dict]:
    proc = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(cases)], capture_output=True, text=True,
                          timeout=900, env={**os.environ, **(env or {})})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_every_round4_model_case_is_one_line_exit_2_and_changes_nothing(tmp_path):
    inp, out = tmp_path / "in", tmp_path / "out"
    inp.mkdir()
    out.mkdir()
    cases, messages = _cases(inp, out)
    before = _tree(inp)
    # No network: a name that is not local must be refused before the hub is asked (HF_HUB_OFFLINE would only
    # turn a hub attempt into a quick failure, so the hub is made unreachable instead).
    # `prepare --cache` points its process's cache elsewhere: each runs in a process of its own, as a user's does.
    prep = [k for k in cases if k.startswith("prepare")]
    env = {"HF_HUB_OFFLINE": "0", "HF_ENDPOINT": "http://127.0.0.1:9"}
    results = _run({k: v for k, v in cases.items() if k not in prep}, env)
    for k in prep:
        results += _run({k: cases[k]}, env)
    bad = []
    for r in results:
        why = bm.refusal_problems(r, messages[r["case"]], temp_marks=("/models/", "/exports/", ".tmp-"))
        if why:
            bad.append(f"{r['case']}: {', '.join(why)}: {r['stderr'][-400:]!r}")
    assert not bad, "\n".join(bad)
    assert _tree(inp) == before, "the user's files changed"
    assert list(out.iterdir()) == [], "nothing may be written for a refused input"
    cache = Path(os.environ["WORKBENCH_CACHE"])
    assert not [p for p in cache.rglob(".*tmp*")], "a refused export leaves no temporary file or folder"


def test_valid_odd_folders_open_and_fuse(tmp_path):
    """A sharded checkpoint with its index, a Hugging Face hub snapshot made of links into its blobs/, and a
    BERT of six positions: exit 0, fused, parity ok."""
    from safetensors.numpy import load_file, save_file

    sharded = _bert(tmp_path / "sharded")
    tensors = load_file(sharded / "model.safetensors")
    (sharded / "model.safetensors").unlink()
    names = sorted(tensors)
    shard = {n: f"model-0000{1 + (i >= len(names) // 2)}-of-00002.safetensors" for i, n in enumerate(names)}
    for file in set(shard.values()):
        save_file({n: tensors[n] for n in names if shard[n] == file}, sharded / file, metadata={"format": "pt"})
    (sharded / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": shard}))
    repo = tmp_path / "hub" / "models--org--tiny"
    snap = repo / "snapshots" / "0123abcd"
    snap.mkdir(parents=True)
    (repo / "blobs").mkdir()
    source = _bert(tmp_path / "plain")
    for f in ("config.json", "model.safetensors"):
        blob = repo / "blobs" / hashlib.sha256(f.encode()).hexdigest()
        shutil.copy(source / f, blob)
        (snap / f).symlink_to(Path("..") / ".." / "blobs" / blob.name)
    short = _bert(tmp_path / "six-positions", positions=6)
    results = _run({name: ["fuse", str(folder), "--parity", "--json"] for name, folder in (
        ("sharded", sharded), ("hub snapshot", snap), ("six positions", short))})
    for r in results:
        doc = json.loads(r["stdout"]) if r["stdout"].strip().startswith("{") else {}
        bad = [(s["name"], s["parity"]) for s in doc.get("steps", []) if s.get("parity") and not s["parity"]["ok"]]
        assert r["rc"] == 0, (r["case"], r["stderr"][-600:], bad)
        assert doc["final"]["attention_nodes"] == 1 and doc["final"]["parity"]["ok"], r["case"]


def test_the_exports_own_parity_refuses_a_model_broken_after_it_was_opened(tmp_path):
    """Defence in depth: a rotary base of zero that the config check never saw (the folder changed after it
    was opened) gives NaN outputs; the export's own check refuses them and stores nothing."""
    from workbench.export import export

    folder = _family("gte", tmp_path / "gte")
    src = resolve(folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["rope_parameters"]["rope_theta"] = 0.0
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(BrokenModelError, match="not finite .* at real tokens \\(PyTorch's are too\\)") as e:
        export(src)
    assert "\n" not in str(e.value)
    from workbench.export import cache_key
    from workbench.config import ExportConfig
    from workbench.cache.root import cache_root

    assert not (cache_root() / "exports" / cache_key(src, ExportConfig())).exists()


def test_a_stored_export_whose_parity_failed_is_refused_not_reused(tmp_path, tiny_export):
    """An export stored before broken models were refused (its meta.json says parity failed) is refused as a
    fresh one would be, with its difference and cosine, instead of being fused as if fine."""
    from workbench.config import ExportConfig
    from workbench.export import cache_key, export

    src = resolve(_bert(tmp_path / "bert"))
    good = export(src)
    stored = good.path.with_suffix(".json")  # the export's meta beside its graph (workbench.cache.model_store)
    meta = json.loads(stored.read_text())
    assert meta["parity"]["ok"] and meta["parity"]["finite"]
    meta["parity"].update(ok=False, max_abs_diff=0.25, cosine=0.97)
    stored.write_text(json.dumps(meta))
    assert good.path.stem == f"export-{cache_key(src, ExportConfig())}"
    with pytest.raises(BrokenModelError, match=r"differs from PyTorch by 2\.5e-01 \(cosine 0\.970000\) at real "
                                               r"tokens, beyond the tolerance"):
        export(src)
    meta["parity"].update(max_abs_diff=float("inf"), finite=False)
    stored.write_text(json.dumps(meta))
    with pytest.raises(BrokenModelError, match="not finite"):
        export(src)


def test_the_app_says_a_broken_model_is_broken_in_one_line(tmp_path):
    from workbench.ui.controller import Controller
    from workbench.ui.state import AppState

    c = Controller(AppState(source=str(_nan_weights(tmp_path / "nan"))), background=False)
    c.load()
    assert c.state.jobs["load"].state == "error"
    assert "not finite" in c.state.error and "\n" not in c.state.error
    assert not c.state.snapshots


@pytest.mark.parametrize("config, message", [
    ({"rope_theta": 0}, "rope_theta is 0"),
    ({"rope_parameters": {"rope_theta": -1.0, "rope_type": "default"}}, "rope_parameters.rope_theta is -1.0"),
    ({"rope_parameters": {"full_attention": {"rope_theta": float("nan")}}}, "full_attention.rope_theta is nan"),
    ({"local_rope_theta": "10000"}, "local_rope_theta is '10000'"),
    ({"rotary_emb_base": 0}, "rotary_emb_base is 0"),
    ({"max_relative_positions": "huge"}, "max_relative_positions is 'huge'"),
    ({"relative_attention": True, "position_buckets": 4_000_000_000}, "position_buckets 4,000,000,000"),
    ({"relative_attention_num_buckets": 10**13}, "relative_attention_num_buckets 10,000,000,000,000"),
    ({"n_positions": 0}, "n_positions is 0"),
    ({"max_position_embeddings": None, "n_positions": 10**11}, "position table: n_positions 100,000,000,000"),
])
def test_impossible_rotary_bases_and_oversized_position_tables_are_named(config, message):
    from workbench.checks import check_config

    with pytest.raises(ModelSourceError) as e:  # None: the key is absent (a GPT-2-style config names n_positions)
        check_config({k: v for k, v in {**SMALL, **config}.items() if v is not None}, "config.json")
    assert message in str(e.value) and "\n" not in str(e.value)


def test_a_shard_index_that_is_not_an_index_is_refused(tmp_path):
    folder = _bert(tmp_path / "m")
    for text, says in (("[1, 2]", "is not a shard index"), ('{"weight_map": {"a": 3}}', "is not a shard index"),
                       ("{nope", "is not readable JSON"),
                       ('{"weight_map": {"a": "gone.safetensors"}}', "'gone.safetensors', which is not in")):
        (folder / "model.safetensors.index.json").write_text(text)
        with pytest.raises(ModelSourceError, match=says):
            resolve(folder)


def test_prepare_refuses_unknown_names_through_the_api_before_building(tmp_path, monkeypatch):
    from workbench.workshop.prepare import prepare

    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path / "room"))
    for kwargs, says in ((dict(models=("no-such-model-abc",)), "'no-such-model-abc' is not a preset"),
                         (dict(models=("bert-tiny",), real=("nope",)), "--real 'nope'"),
                         (dict(models=("bert-tiny",), modern=("gone-encoder",)), "'gone-encoder' is not a preset")):
        with pytest.raises(WorkbenchError, match=says):
            prepare(**kwargs)
    assert not (tmp_path / "room").exists()


NUMBERS = [("bench", "--runs", "nan"), ("bench", "--batch", "1e400"), ("bench", "--seq", "99999999999"),
           ("bench", "--threads", "-1"), ("bench", "--warmup", "inf"), ("bench", "--dynamic-block-base", "abc"),
           ("report", "--runs", "0"), ("report", "--threads", "nan"), ("tune", "--runs", "inf"),
           ("export", "--opset", "1e400"), ("lab", "--port", "99999999999"), ("sweep", "--retries", "-1")]
SETTINGS = [("WORKBENCH_MAX_SENTENCES", "nan"), ("WORKBENCH_MAX_MODEL_GB", "inf"), ("WORKBENCH_MAX_MODEL_GB", "-5"),
            ("WORKBENCH_MAX_SWEEP_POINTS", "1e400"), ("WORKBENCH_MAX_SPEC_NODES", "abc"),
            ("WORKBENCH_CACHE_MAX_GB", "nan")]


def test_every_number_a_user_types_is_checked_in_one_line_before_any_work(tmp_path):
    """NaN, infinity, 1e400, negatives and huge values on the command line or in the environment: one line that
    names the option or variable, exit 2, in well under a second, and no cache written."""
    cases = {f"{cmd} {opt}={val}": [cmd, *(["bert-tiny"] if cmd not in ("lab", "sweep") else
                                            ["nope.yml"] if cmd == "sweep" else []), f"{opt}={val}"]
             for cmd, opt, val in NUMBERS}
    env = {"WORKBENCH_CACHE": str(tmp_path / "cache")}
    for name, args in cases.items():
        p = subprocess.run([sys.executable, "-m", "workbench.cli", *args], capture_output=True, text=True,
                           env={**os.environ, **env}, cwd=tmp_path, timeout=60)
        opt, val = name.split()[1].split("=")
        assert p.returncode == 2 and p.stderr.count("\n") == 1, (name, p.stderr)
        assert f"argument {opt}: must be a whole number" in p.stderr and repr(val) in p.stderr, (name, p.stderr)
    for var, val in SETTINGS:
        p = subprocess.run([sys.executable, "-m", "workbench.cli", "export", "bert-tiny"], capture_output=True,
                           text=True, env={**os.environ, **env, var: val}, cwd=tmp_path, timeout=60)
        assert p.returncode == 2 and p.stderr.startswith(f"workbench: error: {var} must be a"), (var, p.stderr)
        assert p.stderr.count("\n") == 1 and repr(val) in p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / "cache").exists()
