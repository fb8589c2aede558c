"""The third round of bad input (issue 26): output paths that cannot be written, sweep specs that explode,
a sweep of a model that does not exist, ONNX models that are not BERT-shaped and cannot be fed, bad cache
commands, a cache folder that is a file. Each through the CLI as a user types it: exit status 2, at most
three lines on stderr naming the user's file or argument, no traceback, nothing of the user's changed and
nothing written. Every example file is made here, in the test. How long each takes is measured by
``benchmarks/bad_input_speed.py``, not asserted here.
"""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import badmodels as bm
import numpy as np
import onnx
from onnx import TensorProto, helper as h, numpy_helper

DRIVER = textwrap.dedent('''
    import contextlib, io, json, os, sys, time
    from workbench.cli import main
    cases = json.loads(sys.argv[1])
    results = []
    for name, (argv, env) in cases.items():
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        err = io.StringIO()
        t = time.perf_counter()
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                rc = main(argv)
        except SystemExit as e:
            rc = e.code
        finally:
            for k, v in saved.items():
                os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
        results.append({"case": name, "rc": rc, "stderr": err.getvalue(), "seconds": time.perf_counter() - t})
    print(json.dumps(results))
''')


def _tree(folder: Path) -> dict:
    return {p.relative_to(folder).as_posix(): (hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir")
            for p in sorted(folder.rglob("*"))}


def _onnx(path: Path, inputs, body) -> Path:
    g = h.make_graph(body, "g", inputs, [h.make_tensor_value_info("y", inputs[0].type.tensor_type.elem_type, [1])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    path.write_bytes(m.SerializeToString())
    return path


def _cnn(path: Path, shape) -> Path:
    w = numpy_helper.from_array(np.random.default_rng(1).standard_normal((2, 3, 3, 3)).astype(np.float32), "w")
    nodes = [h.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), h.make_node("Relu", ["c"], ["y"])]
    g = h.make_graph(nodes, "cnn", [h.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                     [h.make_tensor_value_info("y", TensorProto.FLOAT, [shape[0], 2, shape[2], shape[3]])], [w])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    path.write_bytes(m.SerializeToString())
    return path


def _cases(inp: Path, out: Path) -> dict:
    notes = inp / "notes.txt"
    notes.write_text("my notes\n")
    taken = inp / "taken.onnx"
    taken.write_bytes(b"the user's own file")
    laughs = "\n".join(["l0: &l0 [x, x, x, x, x, x, x, x, x]"] + [
        f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, 9)] + ["seq: *l8"])
    (inp / "laughs.yaml").write_text(laughs)
    (inp / "points.yaml").write_text("\n".join(f"{axis}: [{', '.join(str(i) for i in range(1, 801))}]"
                                               for axis in ("batch", "seq", "threads")) + "\n")
    (inp / "ghost.yaml").write_text("models: [./no-such-model-folder]\nseq: [8]\nruns: 1\n")
    (inp / "loop.yaml").write_text("plans: &p [default, *p]\n")
    strings = _onnx(inp / "words.onnx", [h.make_tensor_value_info("text", TensorProto.STRING, [1])],
                    [h.make_node("Identity", ["text"], ["y"])])
    image = _cnn(inp / "image.onnx", ["N", 3, "height", "width"])
    return {
        "fuse -o under /proc": (["fuse", "bert-tiny", "-o", "/proc/workbench-test/out.onnx"], {}),
        "fuse -o through a file": (["fuse", "bert-tiny", "-o", str(notes / "out.onnx")], {}),
        "fuse -o onto a file": (["fuse", "bert-tiny", "-o", str(taken)], {}),
        "export -o onto a file": (["export", "bert-tiny", "-o", str(notes)], {}),
        "report -o through a file": (["report", "bert-tiny", "-o", str(notes / "reports")], {}),
        "sweep -o through a file": (["sweep", str(inp / "ghost.yaml"), "-o", str(notes / "s.json")], {}),
        "cache folder is a file": (["fuse", "bert-tiny"], {"WORKBENCH_CACHE": str(notes)}),
        "sweep alias bomb": (["sweep", str(inp / "laughs.yaml"), "-o", str(out / "s.json")], {}),
        "sweep recursive alias": (["sweep", str(inp / "loop.yaml"), "-o", str(out / "s.json")], {}),
        "sweep of 512 million points": (["sweep", str(inp / "points.yaml"), "-o", str(out / "s.json")], {}),
        "sweep of a missing model": (["sweep", str(inp / "ghost.yaml"), "-o", str(out / "s.json")], {}),
        "bench a string input": (["bench", str(strings), "--runs", "1"], {}),
        "bench a symbolic dim": (["bench", str(image), "--runs", "1"], {}),
        "bench a bad --dim": (["bench", str(image), "--dim", "height=zero"], {}),
        "cache prune without a criterion": (["cache", "prune"], {}),
        "cache prune negative size": (["cache", "prune", "--max-gb", "-1"], {}),
    }


MESSAGES = {
    "fuse -o under /proc": "/proc/workbench-test/out.onnx",
    "fuse -o through a file": "notes.txt is a file, not a folder",
    "fuse -o onto a file": "taken.onnx already exists",
    "export -o onto a file": "notes.txt is a file, not a folder",
    "cache folder is a file": "point WORKBENCH_CACHE at a writable folder",
    "sweep alias bomb": "laughs.yaml expands",
    "sweep recursive alias": "loop.yaml expands",
    "sweep of 512 million points": "512,000,000 points",
    "sweep of a missing model": "no-such-model-folder",
    "bench a string input": "words.onnx: input 'text' is a string tensor",
    "bench a symbolic dim": "image.onnx: input 'x': its dimension 2 ('height') has no value: give one with --dim",
    "bench a bad --dim": "height=zero",
}


def test_every_round3_case_is_one_line_exit_2_and_changes_nothing(tmp_path):
    inp, out = tmp_path / "in", tmp_path / "out"
    inp.mkdir()
    out.mkdir()
    cases = _cases(inp, out)
    before = _tree(inp)
    proc = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(cases)], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    bad = []
    for r in json.loads(proc.stdout.strip().splitlines()[-1]):
        why = bm.refusal_problems(r, MESSAGES.get(r["case"]))
        if why:
            bad.append(f"{r['case']}: {', '.join(why)}: {r['stderr'][:300]!r}")
    assert not bad, "\n".join(bad)
    assert _tree(inp) == before, "the user's files changed"
    assert list(out.iterdir()) == [], "nothing may be written for a refused input"


def test_any_onnx_model_with_numeric_inputs_is_timed_with_generated_inputs(tmp_path):
    """Not BERT-shaped: a float image with symbolic dims is timed with random inputs of its declared type
    once the dims have values (batch-like names take --batch)."""
    from workbench.ort.inputs import declared_inputs, other_inputs, spec_from_onnx

    image = _cnn(tmp_path / "image.onnx", ["N", 3, "height", "width"])
    spec = spec_from_onnx(onnx.load(str(image)))
    assert spec.names == ("x",) and declared_inputs(onnx.load(str(image)))[0][2] == ("N", 3, "height", "width")
    out = subprocess.run([sys.executable, "-m", "workbench.cli", "bench", str(image), "--dim", "height=8",
                          "--dim", "width=8", "--batch", "2", "--variants", "unfused", "--runs", "2",
                          "--warmup", "1", "--json"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    doc = json.loads(out.stdout)
    assert doc["variants"][0]["name"] == "unfused" and doc["variants"][0]["p50_ms"] > 0
    import os

    os.environ["WORKBENCH_DIMS"] = "height=8,width=8"
    try:
        feeds = other_inputs(spec.others, 2, 16)
    finally:
        del os.environ["WORKBENCH_DIMS"]
    assert feeds["x"].shape == (2, 3, 8, 8) and feeds["x"].dtype == np.float32 and feeds["x"].std() > 0.5


def test_a_huge_text_file_is_capped_with_one_note(tmp_path, monkeypatch):
    from workbench.text import MAX_SENTENCES_ENV, read_sentences

    big = tmp_path / "big.txt"
    big.write_text("".join(f"s {i}\n" for i in range(300_000)))
    notes: list[str] = []
    lines = read_sentences(big, notes=notes)
    assert len(lines) == 1000 and lines[0] == "s 0"
    assert notes == [f"{big}: used the first 1,000 of 300,000 sentences (set {MAX_SENTENCES_ENV} to use more; "
                     "every sentence costs a run per step and variant)"]
    monkeypatch.setenv(MAX_SENTENCES_ENV, "50")
    assert len(read_sentences(big)) == 50
