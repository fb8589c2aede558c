"""Every bad input is refused at once, through every CLI command, and the process goes on working.

Classes: special files (named pipe, socket, a device behind a ``.onnx`` name), size bombs (a config
asking for a million layers), impossible config values, damaged safetensors (truncated, a header
that lies about sizes, wrong dtypes, missing tensors). For each: exit status 2, at most three lines
on stderr, no traceback, nothing written; then the same process exports, fuses and benchmarks bert-tiny.
How long each refusal takes is measured by ``benchmarks/bad_input_speed.py``, not asserted here (a shared
machine's load would make such a limit fail for reasons of its own).
"""
from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import badmodels as bm
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from workbench.checks import check_config, check_safetensors
from workbench.errors import ModelSourceError
from workbench.models import resolve

COMMANDS = {
    "export": ["export", "{m}", "-o", "{out}/exported"],
    "fuse": ["fuse", "{m}", "-o", "{out}/fused.onnx"],
    "matrix": ["matrix", "{m}"],
    "bench": ["bench", "{m}", "--runs", "1", "--warmup", "1", "--seq", "8"],
    "ablate": ["ablate", "{m}", "--runs", "1", "--seq", "8"],
    "report": ["report", "{m}", "-o", "{out}/report"],
}
TINY = {"model_type": "bert", "architectures": ["BertModel"], "hidden_size": 32, "num_hidden_layers": 2,
        "num_attention_heads": 2, "intermediate_size": 64, "vocab_size": 100, "max_position_embeddings": 64,
        "type_vocab_size": 2}


def _safetensors(path: Path, tensors: dict, *, data_len: int | None = None, raw_header: bytes | None = None) -> Path:
    """Write a safetensors file from ``{name: (dtype, shape, nbytes)}`` (zero data), optionally lying."""
    header, off = {}, 0
    for name, (dtype, shape, nbytes) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + nbytes]}
        off += nbytes
    blob = raw_header if raw_header is not None else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + bytes(off if data_len is None else data_len))
    return path


def _folder(root: Path, name: str, config: dict, weights=None) -> Path:
    d = root / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(config))
    if weights is not None:
        weights(d / "model.safetensors")
    else:
        _safetensors(d / "model.safetensors", {"embeddings.word_embeddings.weight": ("F32", (100, 32), 12800)})
    return d


def _bad_inputs(root: Path) -> dict[str, Path]:
    cases = {}
    fifo = root / "pipe.onnx"
    os.mkfifo(fifo)
    cases["named pipe .onnx"] = fifo
    dev = root / "zero.onnx"
    dev.symlink_to("/dev/zero")
    cases["/dev/zero behind .onnx"] = dev
    cases["/dev/zero"] = Path("/dev/zero")
    sock_path = root / "sock.onnx"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(sock_path))
    cases["socket"] = sock_path
    pipe_cfg = root / "pipecfg"
    pipe_cfg.mkdir()
    os.mkfifo(pipe_cfg / "config.json")
    cases["config.json is a pipe"] = pipe_cfg
    pipe_w = _folder(root, "pipeweights", TINY, weights=lambda p: os.mkfifo(p))
    cases["safetensors is a pipe"] = pipe_w
    cases["a million layers"] = _folder(root, "bomb", {**TINY, "num_hidden_layers": 1_000_000, "hidden_size": 4096,
                                                      "num_attention_heads": 32, "intermediate_size": 16384})
    cases["zero hidden size"] = _folder(root, "zero", {**TINY, "hidden_size": 0})
    cases["heads do not divide"] = _folder(root, "heads", {**TINY, "num_attention_heads": 3})
    cases["negative layers"] = _folder(root, "neg", {**TINY, "num_hidden_layers": -2})
    cases["truncated safetensors"] = _folder(root, "trunc", TINY, weights=lambda p: _safetensors(
        p, {"embeddings.word_embeddings.weight": ("F32", (100, 32), 12800)}, data_len=100))
    cases["header lies about size"] = _folder(root, "lies", TINY, weights=lambda p: p.write_bytes(
        struct.pack("<Q", 10**9) + b"{}"))
    cases["wrong dtype"] = _folder(root, "dtype", TINY, weights=lambda p: _safetensors(
        p, {"embeddings.word_embeddings.weight": ("I32", (100, 32), 12800)}))
    cases["shape disagrees with bytes"] = _folder(root, "shape", TINY, weights=lambda p: _safetensors(
        p, {"embeddings.word_embeddings.weight": ("F32", (100, 32), 64)}))
    cases["header not JSON"] = _folder(root, "json", TINY, weights=lambda p: _safetensors(p, {}, raw_header=b"\xff" * 16))
    return cases, s


DRIVER = textwrap.dedent('''
    import contextlib, io, json, sys, time
    from workbench.cli import main
    cases, commands, out = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
    results = []
    for case, model in cases.items():
        for cmd, argv in commands.items():
            err = io.StringIO()
            t = time.perf_counter()
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                rc = main([a.format(m=model, out=out) for a in argv])
            results.append({"case": case, "cmd": cmd, "rc": rc, "stderr": err.getvalue(),
                            "seconds": time.perf_counter() - t})
    # The same process still does the real work afterwards.
    good = {}
    for argv in (["export", "bert-tiny", "--json"], ["fuse", "bert-tiny", "--json"],
                 ["bench", "bert-tiny", "--runs", "2", "--warmup", "1", "--seq", "8", "--variants", "unfused,fused",
                  "--json"]):
        with contextlib.redirect_stdout(io.StringIO()):
            good[argv[0]] = main(argv)
    print(json.dumps({"results": results, "good": good}))
''')


def test_every_bad_input_class_through_every_command(tmp_path):
    (tmp_path / "in").mkdir()
    cases, sock = _bad_inputs(tmp_path / "in")
    out = tmp_path / "out"
    out.mkdir()
    before = sorted(p.name for p in (tmp_path / "in").rglob("*"))
    try:
        proc = subprocess.run([sys.executable, "-c", DRIVER, json.dumps({k: str(v) for k, v in cases.items()}),
                               json.dumps(COMMANDS), str(out)], capture_output=True, text=True, timeout=900)
    finally:
        sock.close()
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout.strip().splitlines()[-1])
    bad = []
    for r in doc["results"]:
        why = bm.refusal_problems(r, temp_marks=("workbench-worker-", "/models/", "/variants/", "/exports/"))
        if why:
            bad.append(f"{r['case']} / {r['cmd']}: {', '.join(why)}: {r['stderr'][:200]!r}")
    assert not bad, "\n".join(bad)
    assert list(out.iterdir()) == [], "nothing may be written for a refused input"
    assert sorted(p.name for p in (tmp_path / "in").rglob("*")) == before
    assert doc["good"] == {"export": 0, "fuse": 0, "bench": 0}


@pytest.mark.parametrize("case, message", [
    ("named pipe .onnx", "is a named pipe"),
    ("/dev/zero behind .onnx", "is a character device"),
    ("a million layers", "1,000,000 layers"),
    ("zero hidden size", "hidden_size is 0"),
    ("heads do not divide", "not divisible by num_attention_heads 3"),
    ("truncated safetensors", "truncated or the header lies"),
    ("header lies about size", "its header claims"),
    ("wrong dtype", "not a floating-point type"),
    ("shape disagrees with bytes", "needs 12,800 bytes"),
    ("header not JSON", "not valid JSON"),
])
def test_each_class_names_the_users_file_and_the_problem(tmp_path, case, message):
    (tmp_path / "in").mkdir()
    cases, sock = _bad_inputs(tmp_path / "in")
    try:
        with pytest.raises(ModelSourceError) as e:
            resolve(cases[case])
    finally:
        sock.close()
    text = str(e.value)
    assert message in text and "\n" not in text
    assert str(tmp_path / "in") in text  # the user's own path, never a temporary one of the tool


def test_missing_tensors_are_refused_when_the_model_is_built(tmp_path, hf_folder):
    """A checkpoint that lacks a layer's weights would load with random ones, silently: refused instead."""
    from safetensors.numpy import load_file, save_file

    src = hf_folder("bert")
    dst = tmp_path / "partial"
    dst.mkdir()
    for f in src.iterdir():
        if f.name != "model.safetensors":
            (dst / f.name).write_bytes(f.read_bytes())
    tensors = load_file(src / "model.safetensors")
    dropped = next(k for k in tensors if "layer.0.attention" in k)
    save_file({k: v for k, v in tensors.items() if k != dropped}, dst / "model.safetensors")
    with pytest.raises(ModelSourceError, match="lack 1 tensor"):
        resolve(dst).build()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.dictionaries(st.sampled_from(["hidden_size", "num_hidden_layers", "num_attention_heads",
                                        "intermediate_size", "vocab_size", "max_position_embeddings"]),
                       st.one_of(st.integers(-10, 10**9), st.floats(allow_nan=True), st.text(max_size=3),
                                 st.booleans(), st.none()), min_size=1))
def test_any_config_value_is_accepted_or_refused_in_one_line(values):
    try:
        check_config({**TINY, **values}, "config.json")
    except ModelSourceError as e:
        assert "\n" not in str(e) and str(e).startswith("config.json")


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=200))
def test_any_bytes_as_safetensors_give_one_line_or_a_header(tmp_path_factory, blob):
    p = tmp_path_factory.mktemp("st") / "model.safetensors"
    p.write_bytes(blob)
    try:
        check_safetensors(p)
    except ModelSourceError as e:
        assert "\n" not in str(e) and str(p) in str(e)
