"""``benchmarks/gpu_story.py`` on a machine without a GPU: its plan, its one-line refusal, its judging of
targets, and its measuring path run end to end on the CPU provider with a tiny model."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.ort.cuda_build import cuda_build
from workbench.ort.gpu import gpu_status

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_story.py"


def _story(*args):
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300, env=env)


@pytest.fixture(scope="module")
def gs():
    spec = importlib.util.spec_from_file_location("gpu_story", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gpu_story"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_the_plan_lists_every_row_with_its_target_and_needs_no_gpu():
    p = _story("--plan")
    assert p.returncode == 0, p.stderr
    out = p.stdout
    rows = [ln for ln in out.splitlines() if ln.startswith("  bert-")]
    assert len(rows) == 24
    for model, layers in (("bert-3layer", 3), ("bert-base", 12), ("bert-large", 24)):
        assert f"{model} ({layers} layers" in out
        assert sum(r.split()[0] == model for r in rows) == 8
    assert sum("batch 1 " in r for r in rows) == sum("batch 32 " in r for r in rows) == 12
    assert all("seq 128" in r for r in rows)
    assert "1.7 ms" in out and "4.0 ms" in out and "3x" in out  # the article's figures
    assert "[target ≤ 1 ms (article 1.7 ms on a V100)]" in out and "[target ≤ 2 ms (article 4 ms on a V100)]" in out
    assert out.count("[target ≥ 1.3x over the same without a CUDA graph]") == 3
    assert "[target ≥ 3x PyTorch eager" in out
    assert sum("torch.compile, reduce-overhead" in r for r in rows) == 4
    assert sum("fp16" in r for r in rows) == 16 and sum("fp32" in r for r in rows) == 8


def test_the_plan_follows_the_options():
    p = _story("--plan", "--models", "bert-base", "--batches", "1", "--no-compile", "--runs", "50")
    rows = [ln for ln in p.stdout.splitlines() if ln.startswith("  bert-")]
    assert p.returncode == 0 and len(rows) == 3 and not any("torch.compile" in r for r in rows)
    assert "then 50 runs round robin" in p.stdout
    assert "the machine's load sampled while each model and batch is timed" in p.stdout


@pytest.mark.skipif(gpu_status(torch_too=True)[0], reason="a GPU is present")
def test_without_a_gpu_it_says_why_in_one_line_and_exits_2(tmp_path):
    out = tmp_path / "story"
    p = _story("--out", str(out))
    assert p.returncode == 2 and p.stdout == ""
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu_story: no GPU here, nothing measured: ")
    assert cuda_build().words() in lines[0]
    assert not out.exists()  # no file, so no CPU figure can be read as a GPU one


@pytest.mark.parametrize("args, words", [
    ((), "--out DIR is needed"),
    (("--plan", "--models", "bert-huge"), "--models takes bert-3layer, bert-base, bert-large, not bert-huge"),
    (("--plan", "--batches", "1,x"), "must be positive integers"),
    (("--plan", "--seq", "0"), "must be positive integers"),
])
def test_bad_arguments_are_one_line(args, words):
    p = _story(*args)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.strip().splitlines() == [f"gpu_story: {p.stderr.strip().split('gpu_story: ', 1)[1]}"]
    assert words in p.stderr


def test_an_out_that_is_a_file_is_refused_and_left_alone(tmp_path):
    f = tmp_path / "results.txt"
    f.write_text("mine")
    p = _story("--out", str(f))
    assert p.returncode == 2 and "is a file, not a folder" in p.stderr and f.read_text() == "mine"


def test_each_target_is_judged_reached_or_by_how_much_it_misses(gs):
    C = gs.Case
    base1 = C("bert-base", "fp16", 1, 128, "ort-fused")
    large1 = C("bert-large", "fp16", 1, 128, "ort-fused")
    graph1 = C("bert-base", "fp16", 1, 128, "ort-fused-cudagraph")
    small_f = C("bert-3layer", "fp32", 1, 128, "ort-fused")
    small_e = C("bert-3layer", "fp32", 1, 128, "torch-eager")
    ms = {base1: 0.8, large1: 2.5, graph1: 0.7, small_f: 0.5, small_e: 1.0}
    assert gs.verdict(base1, ms) == "reached: 0.80 ms ≤ 1 ms"
    assert gs.verdict(large1, ms) == "missed by 0.50 ms: 2.50 ms > 2 ms"
    assert gs.verdict(graph1, ms) == "missed by 0.16x: 1.14x without the graph (target 1.3x)"
    assert gs.verdict(small_f, ms) == "missed by 1.00x: 2.00x PyTorch eager (target 3x)"
    assert gs.verdict(small_f, {small_f: 0.3, small_e: 1.2}) == "reached: 4.00x PyTorch eager (≥ 3x)"
    assert gs.verdict(C("bert-base", "fp16", 32, 128, "ort-fused"), ms) is None  # no target at batch 32
    assert gs.verdict(large1, {}).endswith(": not measured")
    assert gs.wall_verdict(212) == "wall time 212 s: within the 5-minute target"
    assert gs.wall_verdict(330) == "wall time 330 s: over the 5-minute target by 30 s"


def test_the_measuring_path_runs_end_to_end_on_the_cpu_provider(gs):
    """The same functions main() runs on the GPU, on bert-tiny and the CPU provider (never written as GPU rows)."""
    cases = [gs.Case("bert-tiny", "fp32", 2, 16, e)
             for e in ("torch-eager", "ort-unfused", "ort-fused", "ort-fused-cudagraph")]
    rows = gs.run_story(cases, runs=3, warmup=1, log=lambda line: None, device="cpu")
    by = {r["engine"]: r for r in rows}
    for e in ("torch-eager", "ort-unfused", "ort-fused"):
        assert by[e]["p50_ms"] > 0 and by[e]["runs"] == 3 and by[e]["parity_holds"], by[e]
        assert by[e]["parity"]["cosine"] > 0.9999
    assert by["torch-eager"]["vs_torch_eager"] == 1.0
    from workbench.measure import variants  # each row names the registry's recipe it times, held to its tolerance
    for e, name in (("ort-fused", "fused"), ("ort-fused-cudagraph", "fused-cudagraph"), ("ort-unfused", "unfused")):
        assert by[e]["variant"] == name and by[e]["tolerance"] == variants.get(name).tolerance.words()
    assert set(gs.VARIANT.values()) <= set(variants.names(tune=True, device="cuda"))
    # A CUDA graph on the CPU provider is refused in words, kept as the row's error, never timed.
    assert by["ort-fused-cudagraph"].get("p50_ms") is None
    assert "CUDA graphs need the CUDA execution provider" in by["ort-fused-cudagraph"]["error"]
    table = "\n".join(gs.table(rows, "test"))
    assert "| bert-tiny | 2 | ONNX Runtime fused, IO binding, fp32 |" in table
    # Every timed row carries the machine's load over its group's timing window, in the JSON and the markdown.
    loads = [by[e]["machine_load"] for e in ("torch-eager", "ort-unfused", "ort-fused")]
    assert all(x == loads[0] for x in loads) and by["ort-fused-cudagraph"]["machine_load"] is None  # not timed
    load = loads[0]
    assert load["seconds"] >= 0.5 and load["threads"] == 1 and load["cores"] >= 1 and isinstance(load["busy"], bool)
    assert bool(load["words"]) == load["busy"] and load["rule"].startswith("busy when")
    assert "| machine while timed |" in table
    cell = gs.load_cell(load)
    assert cell.startswith("busy (load " if load["busy"] else "quiet (load ") and cell.endswith(" cores)")
    body = [ln for ln in table.splitlines() if ln.startswith("| bert-tiny |")]
    assert len(body) == 4 and all(ln.endswith(f"| {cell} |") for ln in body if "CUDA graph" not in ln), body
    assert next(ln for ln in body if "CUDA graph" in ln).endswith("| - |")
    assert (f"warning: bert-tiny batch 2: {load['words']}" in table) == load["busy"]


def test_a_busy_machine_is_named_under_the_table_and_a_quiet_one_never(gs):
    """The table from rows (as main() writes it): each row's load in its last column; one sentence per model and
    batch timed on a busy machine, under the table; nothing for a quiet one or a row without a load (an error)."""
    from workbench.measure.harness.load import MachineLoad

    busy = MachineLoad(cores=16, threads=1, seconds=9, other_cores=15.5, runnable=18.2, cpus=16).to_dict()
    quiet = MachineLoad(cores=16, threads=1, seconds=9, other_cores=0.2, runnable=1.1, cpus=16).to_dict()
    row = {"precision": "fp16", "seq": 128, "engine": "ort-fused", "label": "ONNX Runtime fused, IO binding, fp16",
           "p50_ms": 1.1, "p90_ms": 1.2, "parity": None, "parity_holds": None, "vs_torch_eager": 3.0}
    rows = [dict(row, model="bert-base", batch=1, machine_load=busy),
            dict(row, model="bert-base", batch=1, engine="torch-eager", machine_load=busy),
            dict(row, model="bert-base", batch=32, machine_load=quiet),
            dict(row, model="bert-large", batch=1, p50_ms=None, error="out of memory")]
    out = gs.table(rows, "test")
    body = [ln for ln in out if ln.startswith("| bert-")]
    assert body[0].endswith("| busy (load 18.2 on 16 cores) |") and body[2].endswith("| quiet (load 1.1 on 16 cores) |")
    assert body[3].endswith("| - |")
    warnings = [ln for ln in out if ln.startswith("warning: ")]
    assert warnings == [f"warning: bert-base batch 1: {busy['words']}"]
    assert warnings[0].endswith("these figures may be off by 2x; rerun when it is quiet")
    assert not [ln for ln in gs.table(rows[2:], "test") if "busy" in ln]


def test_a_model_that_fails_leaves_its_rows_with_the_error_and_the_others_measured(gs):
    cases = [gs.Case("bert-nonexistent-preset", "fp32", 1, 16, "ort-fused"),
             gs.Case("bert-tiny", "fp32", 1, 16, "ort-unfused")]
    rows = gs.run_story(cases, runs=2, warmup=1, log=lambda line: None, device="cpu")
    assert rows[0]["error"] and rows[0].get("p50_ms") is None
    assert rows[1]["p50_ms"] > 0 and rows[1]["error"] is None
