"""``workbench tune`` and the new bench variants, end to end on a tiny BERT with a tokenizer built in the test.

No test here assumes which engine wins: whatever the tune recommends must pass the same checks (its
card's lines run and reproduce the timed outputs; its answers hold on sentences the search never saw).
"""

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
FIELDS = {"name", "p50_ms", "sentences_per_s", "batch", "size_mb", "peak_rss_mb", "task_parity",
          "task_parity_batched"}


def _cli(*args, env=None, timeout=900):
    return subprocess.run([sys.executable, "-c", "import sys; from workbench.cli import main; sys.exit(main())", *args],
                          capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})


def _one_error_line(p, *words):
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("workbench: error:")]
    assert p.returncode == 2 and len(lines) == 1 and "Traceback" not in p.stderr, p.stderr[-2000:]
    assert all(w in lines[0] for w in words), lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return save_task_model("embedding", tmp_path_factory.mktemp("tune-tiny") / "model")


@pytest.fixture(scope="module")
def tuned(tiny, tmp_path_factory):
    out = tmp_path_factory.mktemp("tune-out") / "deploy"
    p = _cli("tune", str(tiny), *FAST, "--text", "builtin", "--workload", "both", "-o", str(out), "--json")
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout), out


def test_tune_json_has_the_interface_the_checks_read(tuned):
    doc, _ = tuned
    assert set(doc["recommended"]) == {"latency", "throughput"} and isinstance(doc["skipped"], list)
    for w, key in (("latency", "p50_ms"), ("throughput", "sentences_per_s")):
        rec = doc["recommended"][w]
        assert rec["variant"] and rec[key] > 0 and rec["batch"] >= 1 and rec["why"] and "task_parity" in rec
        # The recommendation is the fastest variant whose answers hold (batch 1 and batched) in that workload.
        ok = [v for v in doc["variants"] if v["holds"] and v[key]]
        best = min(ok, key=lambda v: v[key]) if key == "p50_ms" else max(ok, key=lambda v: v[key])
        assert rec["variant"] == best["name"] and rec["mode"] == "shipped"
    names = [v["name"] for v in doc["variants"]]
    assert [n for n in names if n != "tuned"][:5] == ["torch", "torch-compile", "unfused", "fused", "int8"]
    assert "tuned" in names or "tuned" in {s["name"] for s in doc["skipped"]}  # the same file as fused: once
    assert {"int8-guarded", "int8-static", "openvino-int8", "openvino-int8-guarded"} <= set(names)
    for v in doc["variants"]:
        assert FIELDS <= set(v), v["name"]
        assert v["p50_ms"] > 0 and v["sentences_per_s"] > 0 and 1 <= v["batch"] <= 64 and v["size_mb"] > 0
        assert v["p50_mode"] == v["throughput_mode"] == "shipped" and v["interleaved"]["p50_ms"] > 0
        assert v["peak_rss_mb"] > 0 and (v["name"] == "torch" or v["task_parity_batched"]["kind"] == "embedding")
    by = {v["name"]: v for v in doc["variants"]}
    # Each variant's memory is its own process's: PyTorch's runtime is not in ONNX Runtime's figure.
    assert by["torch"]["peak_rss_mb"] > by["int8"]["peak_rss_mb"]
    assert by["int8"]["size_mb"] < by["fused"]["size_mb"]  # int8 weights on disk
    # The batch-size search tried sizes from 1 to 64 and kept the fastest it tried.
    tried = by["fused"]["batch_search"]
    assert "1" in tried and by["fused"]["batch"] == int(max(tried, key=tried.get))
    # How busy the machine was over every measuring phase, judged by the one rule (issue 38).
    load = doc["machine_load"]
    assert load["seconds"] > 0 and load["threads"] == 1 and isinstance(load["busy"], bool)
    assert bool(load["words"]) == load["busy"] and load["rule"].startswith("busy when")


def test_tune_json_keys_are_the_ones_the_typed_result_keeps(tuned):
    """The real ``--json`` (now made by ``TuneResult.to_json``) has the key tree it had before the result was typed."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_tune_result import TREE, key_tree

    doc, out = tuned
    got = key_tree(doc)
    assert {k: v for k, v in got.items() if v} == {k: TREE[k] for k, v in got.items() if v}
    assert doc["saved"]["dir"] == str(out)


def test_answers_decide_on_sentences_the_search_never_saw(tuned, tiny):
    """The int8 recipes tune and calibrate on the search part; the answers that decide are the check part's."""
    doc, _ = tuned
    search, check = set(doc["split"]["search"]), set(doc["split"]["check"])
    assert search and check and not (search & check) and doc["split"]["source"] == "built-in"
    assert doc["int8_search"]["text"]["sentences"] == len(search)
    assert doc["openvino_guard"]["search_sentences"] == len(search)
    by = {v["name"]: v for v in doc["variants"]}
    import importlib.util

    peers = ("ctranslate2",) if importlib.util.find_spec("ctranslate2") else ()  # the peers extra installed
    for name in ("int8-guarded", "openvino-int8", "int8-static") + peers:  # answers checked like every variant's
        assert by[name]["task_parity"]["sentences"] == len(check)
        assert by[name]["task_parity_search"]["sentences"] == len(search)
    # The guarded int8 model's answers on the check part, recomputed here from the file the tune timed.
    import torch

    from workbench.measure.variants.split import one_at_a_time
    from workbench.models import resolve
    from workbench.ort.session import create_session
    from workbench.ort.task_parity import task_parity
    src = resolve(str(tiny))
    text = one_at_a_time(src, doc["split"]["check"])
    model = src.build("eager")
    sess = create_session(doc["paths"]["int8-guarded"], "cpu", threads=1)
    names = {i.name for i in sess.get_inputs()}
    with torch.inference_mode():
        ref = [model(**{k: torch.from_numpy(v) for k, v in b.items()}).last_hidden_state.numpy() for b in text.batches]
    got = [sess.run(None, {k: v for k, v in b.items() if k in names})[0] for b in text.batches]
    tp = task_parity("embedding", ref, got, list(text.batches))
    assert tp["sentences"] == len(check)
    assert tp["spearman"] == pytest.approx(by["int8-guarded"]["task_parity"]["spearman"], abs=1e-3)


def _blocks(card: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", card, re.S)


def test_tune_saves_a_folder_whose_card_lines_reproduce_the_timed_outputs(tuned):
    """Whichever engine won: every code block of the card runs and gives what the tune timed."""
    doc, out = tuned
    saved = doc["saved"]
    files = {p.name for p in out.iterdir()}
    assert {"model.onnx", "README.md", "config.json", "tokenizer_config.json"} <= files
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".deploy.tmp")]  # written atomically
    card = (out / "README.md").read_text()
    blocks = _blocks(card)
    assert len(blocks) == (2 if saved["openvino"] else 1)
    assert saved["saved_max_abs_diff"] == 0
    from workbench.measure.tune.card import CARD_TEXT
    from workbench.ort.session import create_session

    for code in blocks:
        scope: dict = {}
        exec(code, scope)  # the card's lines, as a user runs them
        enc = scope["enc"]
        if "import openvino" in code:
            assert (out / "openvino" / "openvino_model.xml").is_file() and CARD_TEXT in code
            from workbench.measure.worker.peer_runners import OpenVinoRunner

            s = doc["sessions"][saved["openvino"]]
            timed = OpenVinoRunner({"name": "x", "provider": "cpu", "model": str(out / "model.onnx"),
                                    "options": s["options"]}, doc["threads"], out)
            timed.prepare({k: np.asarray(v) for k, v in enc.items()})
            assert np.abs(timed.output() - scope["out"]).max() <= 1e-5
            assert saved["saved_max_abs_diff_openvino"] <= 1e-5
        else:
            s = doc["sessions"][saved["onnxruntime"]]
            timed = create_session(out / "model.onnx", "cpu", level=s["level"], threads=1,
                                   disabled_optimizers=tuple(s["disabled_optimizers"]))
            ref = timed.run(None, {i.name: enc[i.name] for i in timed.get_inputs()})[0]
            assert np.abs(ref - scope["out"]).max() == 0
    for w, rec in doc["recommended"].items():
        assert rec["label"] in card
    assert "| PyTorch eager |" in card and "sentences/s" in card and "batch" in card
    assert "check part" in card and "search part" in card


def test_tune_refuses_a_folder_that_is_not_empty(tiny, tmp_path):
    out = tmp_path / "taken"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    _one_error_line(_cli("tune", str(tiny), *FAST, "-o", str(out)), "not empty")
    assert (out / "keep.txt").read_text() == "mine" and [f.name for f in out.iterdir()] == ["keep.txt"]


@pytest.mark.parametrize("where", ["/proc/workbench-tune", "FILE/sub"])
def test_tune_output_under_proc_or_through_a_file_is_refused_before_any_work(tiny, tmp_path, where):
    f = tmp_path / "a-file"
    f.write_text("mine")
    out = where.replace("FILE", str(f))
    p = _cli("tune", str(tiny), *FAST, "-o", out, env={"WORKBENCH_CACHE": str(tmp_path / "cache")})
    _one_error_line(p, out.split("/sub")[0] if "sub" in out else out)
    assert not (tmp_path / "cache" / "exports").exists()  # refused before the export
    assert f.read_text() == "mine"


@pytest.mark.parametrize("lines", [["Just one sentence."], ["Same words.", "Same words."]])
def test_tune_on_too_little_text_says_so_and_how_many_it_needs(tiny, tmp_path, lines):
    text = tmp_path / "few.txt"
    text.write_text("\n".join(lines) + "\n")
    line = _one_error_line(_cli("tune", str(tiny), *FAST, "--text", str(text)), "too small to check answers",
                           "at least 3 distinct sentences")
    assert "Spearman" not in line


def test_bench_on_too_little_text_reports_no_answers(tiny, tmp_path):
    text = tmp_path / "two.txt"
    text.write_text("Same words.\nSame words.\n")
    p = _cli("bench", str(tiny), *FAST, "--variants", "torch,fused", "--text", str(text))
    assert p.returncode == 0, p.stderr[-2000:]
    row = next(ln for ln in p.stdout.splitlines() if ln.startswith("fused"))
    assert "too small to check answers: 1 distinct sentence" in row and "spearman" not in row.lower()


def test_fuse_on_too_little_text_reports_no_answers(tiny, tmp_path):
    text = tmp_path / "one.txt"
    text.write_text("Only this sentence.\n")
    p = _cli("fuse", str(tiny), "--text", str(text))
    assert p.returncode == 0, p.stderr[-2000:]
    assert "too small to check answers: 1 distinct sentence" in p.stdout and "spearman 1.0000" not in p.stdout.lower()


def test_bench_takes_the_new_variant_names_and_checks_int8_on_the_built_in_sentences(tiny, tuned):
    p = _cli("bench", str(tiny), *FAST, "--json",
             "--variants", "torch,int8,int8-static,openvino-f32,openvino-int8,openvino-int8-guarded")
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads(p.stdout)
    names = [v["name"] for v in doc["variants"]]
    assert names == ["torch", "int8", "int8-static", "openvino-f32", "openvino-int8", "openvino-int8-guarded"]
    by = {v["name"]: v for v in doc["variants"]}
    assert by["openvino-f32"]["session_providers"] == ["OpenVINO CPU (f32)"]
    # No --text, yet int8's answers are checked on the built-in sentences (the timing keeps its one shape).
    assert doc["answers_text"] == "built-in sentences" and isinstance(doc["int8_flags"], list)
    for n in names[1:]:
        assert by[n]["p50_ms"] > 0 and by[n]["task_parity"]["kind"] == "embedding"
        assert by[n]["task_parity"]["sentences"] == 39 and by[n]["parity"]["cosine"] > 0.98


def test_an_int8_whose_answers_break_is_flagged_with_the_way_out():
    from workbench.measure.variants.answers import int8_flags

    broken = {"kind": "embedding", "top1_agreement": 0.85, "spearman": 0.83}
    fine = {"kind": "embedding", "top1_agreement": 1.0, "spearman": 0.999}
    flags = int8_flags([{"name": "int8", "task_parity": broken}, {"name": "int8-guarded", "task_parity": fine},
                        {"name": "fused", "task_parity": broken}])
    assert len(flags) == 1 and flags[0].startswith("int8: its answers change (top-1 85%, Spearman 0.8300)")
    assert "int8-guarded" in flags[0] and "workbench tune" in flags[0]


def test_bench_skips_openvino_when_it_is_absent(tiny):
    p = _cli("bench", str(tiny), *FAST, "--variants", "fused,openvino", "--json",
             env={"WORKBENCH_DISABLE_OPENVINO": "1"})
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads(p.stdout)
    assert [v["name"] for v in doc["variants"]] == ["fused"]
    assert doc["skipped"][0]["name"] == "openvino" and "OpenVINO" in doc["skipped"][0]["why"]
    assert len([ln for ln in p.stderr.splitlines() if ln.startswith("openvino skipped:")]) == 1


def test_bench_asking_only_for_openvino_without_it_says_how_to_install_it(monkeypatch):
    import argparse

    from workbench.cli.bench import _names
    from workbench.errors import RuntimeUnavailableError
    from workbench.measure.worker import peers

    monkeypatch.delenv(peers.DISABLE_ENV, raising=False)
    monkeypatch.setitem(sys.modules, "openvino", None)  # import openvino → ImportError, as when not installed
    args = argparse.Namespace(variants="openvino", model="bert-tiny", provider="cpu", text=None)
    with pytest.raises(RuntimeUnavailableError, match=r'pip install "bert-fusion-workbench\[peers\]"') as e:
        _names(args)
    assert "unknown variant" not in str(e.value) and "\n" not in str(e.value)


def test_missing_openvino_says_how_to_add_it(monkeypatch):
    from workbench.measure.variants import available
    from workbench.measure.worker import peers

    monkeypatch.delenv(peers.DISABLE_ENV, raising=False)
    monkeypatch.setitem(sys.modules, "openvino", None)
    ok, why = peers.openvino_status()
    assert not ok and 'pip install "bert-fusion-workbench[peers]"' in why
    names, skipped = available(["fused", "openvino-f32", "openvino", "openvino-int8"])
    assert names == ["fused"] and [s["name"] for s in skipped] == ["openvino-f32", "openvino", "openvino-int8"]


def test_torch_compile_without_a_compiler_is_skipped_with_the_reason(monkeypatch, tmp_path):
    from workbench.measure.variants import available

    monkeypatch.setenv("PATH", str(tmp_path))  # no g++, c++ or clang++ there
    monkeypatch.delenv("CXX", raising=False)
    names, skipped = available(["torch", "torch-compile"])
    assert names == ["torch"] and "C++ compiler" in skipped[0]["why"]


def test_the_split_keeps_parts_apart_and_refuses_too_little_text():
    from workbench.errors import ConfigError
    from workbench.measure.variants.split import split
    from workbench.text import BUILTIN_SENTENCES

    b = split(None)
    assert len(b.check) == 13 and len(b.search) == len(BUILTIN_SENTENCES) - 13 and not set(b.check) & set(b.search)
    mine = [f"sentence number {i}" for i in range(12)]
    s = split(mine)
    assert s.source == "text" and len(s.check) == 4 and not set(s.check) & set(s.search)
    small = split(mine[:4])  # too few to split: all of it checks, the search runs on the built-in sentences
    assert small.check == tuple(mine[:4]) and set(small.search) <= set(BUILTIN_SENTENCES)
    with pytest.raises(ConfigError, match="too small to check answers: 2 distinct sentences"):
        split(["a b", "c d", "a b"])


def test_a_sentence_transformers_folder_stays_one_when_saved(tmp_path):
    """modules.json, the pooling config and the tokenizer travel with the saved model (the packaged MiniLM)."""
    from workbench.measure.tune.save import _write_model_files
    from workbench.models import resolve

    src = resolve("minilm")
    assert _write_model_files(src, tmp_path)
    assert (tmp_path / "modules.json").is_file() and (tmp_path / "1_Pooling" / "config.json").is_file()
    assert (tmp_path / "config_sentence_transformers.json").is_file() and (tmp_path / "tokenizer.json").is_file()
    import json

    assert [m["path"] for m in json.loads((tmp_path / "modules.json").read_text())][:2] == ["", "1_Pooling"]


def test_tune_on_random_weights_says_so_once_and_marks_no_variant_changed(tmp_path):
    """bert-tiny (a preset: random weights) through the real `workbench tune`: the table and the saved card carry
    bench's one sentence that the weights are random, never a "(changed)" or a holds yes/no verdict, and say what
    the recommendation did all the same; --json keeps every key it had and adds ``random_weights``."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_tune_result import TREE

    out = tmp_path / "deploy"
    p = _cli("tune", "bert-tiny", *FAST, "--no-shipped", "-o", str(out))
    assert p.returncode == 0, p.stderr[-3000:]
    notes = [ln for ln in p.stdout.splitlines() if ln.startswith("note: the answers above: ")]
    assert len(notes) == 1, p.stdout
    assert "the weights are random, so the answers mean nothing and this is no verdict on int8" in notes[0]
    assert "the recommendation still counts only the variants whose answers held here" in notes[0]
    assert "(changed)" not in p.stdout and "(its answers changed)" not in p.stdout
    assert "keeps the answers on sentences it was not tuned on" not in p.stdout  # no verdict in the why either
    assert re.search(r"^recommended for latency: \S+ \(", p.stdout, re.M), p.stdout
    card = (out / "README.md").read_text()
    assert card.count("The weights are random, so the answers mean nothing") == 1
    # Every table's last column (the variants' "holds", the guarded search's candidates' when int8-guarded won).
    cells = [ln for ln in card.splitlines() if ln.startswith("| ") and ln.endswith(" |") and "---" not in ln
             and "skipped:" not in ln and not ln.startswith(("| variant |", "| candidate |", "| PyTorch eager |"))]
    assert cells and all(ln.endswith(" | - |") for ln in cells), cells
    doc = _cli("tune", "bert-tiny", *FAST, "--no-shipped", "--json")
    assert doc.returncode == 0, doc.stderr[-3000:]
    got = json.loads(doc.stdout)
    assert got["random_weights"] is True and TREE[""] <= set(got)
