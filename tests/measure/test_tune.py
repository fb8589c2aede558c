"""``workbench tune`` and the new bench variants, end to end on a tiny BERT with a tokenizer built in the test."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from textmodels import save_task_model  # noqa: E402

FAST = ("--seq", "16", "--runs", "3", "--warmup", "1", "--threads", "1")


def _cli(*args, env=None, timeout=900):
    return subprocess.run([sys.executable, "-c", "import sys; from workbench.cli import main; sys.exit(main())", *args],
                          capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return save_task_model("embedding", tmp_path_factory.mktemp("tune-tiny") / "model")


@pytest.fixture(scope="module")
def tuned(tiny, tmp_path_factory):
    out = tmp_path_factory.mktemp("tune-out") / "deploy"
    p = _cli("tune", str(tiny), *FAST, "--text", "builtin", "-o", str(out), "--json")
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout), out


def test_tune_json_has_the_interface_the_checks_read(tuned):
    doc, out = tuned
    rec = doc["recommended"]
    assert rec["variant"] and rec["p50_ms"] > 0 and ("task_parity" in rec or "parity" in rec) and rec["why"]
    names = [v["name"] for v in doc["variants"]]
    assert names[:6] == ["torch", "torch-compile", "unfused", "fused", "tuned", "int8"] and "int8-guarded" in names
    for v in doc["variants"]:
        assert v["p50_ms"] > 0
        assert v["task_parity"] is not None or v["name"] == "torch"  # with --text: answers against PyTorch
    assert isinstance(doc["skipped"], list)
    # The recommendation is the fastest variant whose answers hold.
    ok = [v for v in doc["variants"] if v["holds"]]
    assert rec["variant"] == min(ok, key=lambda v: v["p50_ms"])["name"]
    s = doc["int8_search"]
    assert len(s["candidates"]) >= 4 and {"label", "kept_fp32", "task_parity", "holds"} <= set(s["candidates"][0])


def test_tune_saves_a_folder_whose_card_code_reproduces_the_timed_session(tuned):
    doc, out = tuned
    files = {p.name for p in out.iterdir()}
    assert {"model.onnx", "README.md", "config.json", "tokenizer_config.json"} <= files
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".deploy.tmp")]  # written atomically
    card = (out / "README.md").read_text()
    code = re.search(r"```python\n(.*?)```", card, re.S).group(1)
    assert len(code.strip().splitlines()) == 5 and "import onnxruntime" in code
    scope: dict = {}
    exec(code, scope)  # the card's five lines, as a user runs them
    out_card = scope["out"]
    # The session the tune timed: same file, same settings as the benchmark worker.
    from workbench.ort.session import create_session

    saved = doc["saved"]
    sess_cfg = doc["sessions"][saved["variant"]]
    timed = create_session(out / "model.onnx", "cpu", level=sess_cfg["level"], threads=1,
                           disabled_optimizers=tuple(sess_cfg["disabled_optimizers"]))
    enc = scope["enc"]
    ref = timed.run(None, {i.name: enc[i.name] for i in timed.get_inputs()})[0]
    assert np.abs(ref - out_card).max() == 0
    assert saved["saved_max_abs_diff"] == 0
    assert doc["recommended"]["label"] in card and "| PyTorch eager |" in card


def test_tune_refuses_a_folder_that_is_not_empty(tiny, tmp_path):
    out = tmp_path / "taken"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    p = _cli("tune", str(tiny), *FAST, "-o", str(out))
    assert p.returncode == 2
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("workbench: error:")]
    assert len(lines) == 1 and "not empty" in lines[0] and "Traceback" not in p.stderr
    assert (out / "keep.txt").read_text() == "mine" and [f.name for f in out.iterdir()] == ["keep.txt"]


def test_bench_takes_the_new_variant_names(tiny, tuned):
    p = _cli("bench", str(tiny), *FAST, "--text", "builtin", "--json",
             "--variants", "torch,torch-compile,tuned,int8-guarded,openvino-f32,openvino")
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads(p.stdout)
    names = [v["name"] for v in doc["variants"]]
    assert names == ["torch", "torch-compile", "tuned", "int8-guarded", "openvino-f32", "openvino"]
    by = {v["name"]: v for v in doc["variants"]}
    assert by["openvino-f32"]["session_providers"] == ["OpenVINO CPU (f32)"]
    assert by["torch-compile"]["session_providers"] == ["torch-cpu-inductor"]
    for n in names[1:]:
        assert by[n]["p50_ms"] > 0 and by[n]["task_parity"]["kind"] == "embedding"
        assert by[n]["parity"]["cosine"] > 0.99


def test_bench_skips_openvino_when_it_is_absent(tiny):
    p = _cli("bench", str(tiny), *FAST, "--variants", "fused,openvino", "--json",
             env={"WORKBENCH_DISABLE_OPENVINO": "1"})
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads(p.stdout)
    assert [v["name"] for v in doc["variants"]] == ["fused"]
    assert doc["skipped"][0]["name"] == "openvino" and "OpenVINO" in doc["skipped"][0]["why"]
    assert len([ln for ln in p.stderr.splitlines() if ln.startswith("openvino skipped:")]) == 1


def test_missing_openvino_says_how_to_add_it(monkeypatch):
    from workbench.measure import peers
    from workbench.measure.recipes_extra import available

    monkeypatch.delenv(peers.DISABLE_ENV, raising=False)
    monkeypatch.setitem(sys.modules, "openvino", None)  # import openvino → ImportError, as when not installed
    ok, why = peers.openvino_status()
    assert not ok and 'pip install "bert-fusion-workbench[peers]"' in why
    names, skipped = available(["fused", "openvino-f32", "openvino"])
    assert names == ["fused"] and [s["name"] for s in skipped] == ["openvino-f32", "openvino"]


def test_torch_compile_without_a_compiler_is_skipped_with_the_reason(monkeypatch, tmp_path):
    from workbench.measure.recipes_extra import available

    monkeypatch.setenv("PATH", str(tmp_path))  # no g++, c++ or clang++ there
    monkeypatch.delenv("CXX", raising=False)
    names, skipped = available(["torch", "torch-compile"])
    assert names == ["torch"] and "C++ compiler" in skipped[0]["why"]
