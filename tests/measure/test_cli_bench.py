"""``workbench bench`` through the real CLI entry point."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def _demand_bound(shown, computed, measured):
    """A bound the rates make computable is shown whenever it is possible (at or under the measured time),
    and shown as unknown only when it is not; never None for want of computing it."""
    assert computed is not None and computed > 0, "the rates were measured, so the bound must be computed"
    if computed <= measured:
        assert shown == pytest.approx(computed)
    else:
        assert shown is None


def _cli(*args, timeout=600):
    return subprocess.run([sys.executable, "-c", "import sys; from workbench.cli import main; sys.exit(main())", *args],
                          capture_output=True, text=True, timeout=timeout)


def test_bench_json_has_the_documented_shape():
    p = _cli("bench", "bert-tiny", "--seq", "16", "--runs", "3", "--warmup", "1", "--threads", "1",
             "--variants", "torch,unfused,fused,int8", "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["machine"]["cpu"] and doc["machine"]["threads"] == 1
    # A bound is a figure under the measured time, or unknown (a probe disturbed by other load), never above it.
    fastest = min(v["p50_ms"] for v in doc["variants"] if v["floor_precision"] == "fp32")
    _demand_bound(doc["floor_ms"], doc["floor"]["floor_ms"], fastest)
    assert [v["name"] for v in doc["variants"]] == ["torch", "unfused", "fused", "int8"]
    for v in doc["variants"]:
        assert {"name", "provider", "p50_ms", "p90_ms", "p99_ms", "runs", "parity"} <= set(v)
        assert v["runs"] == 3 and v["provider"] == "cpu" and "samples_ms" not in v
    assert doc["variants"][0]["parity"] is None
    assert doc["variants"][3]["parity"]["cosine"] >= 0.99
    assert doc["variants"][2]["parity"]["max_abs_diff"] < 1e-3
    # Each variant against the floor of its own precision; the rates and the processor behind it.
    assert [v["floor_precision"] for v in doc["variants"]] == ["fp32", "fp32", "fp32", "int8+fp32"]
    for v in doc["variants"]:
        for bound in ("floor_ms", "matmul_bound_ms"):
            _demand_bound(v[bound], doc["floor"]["variants"][v["name"]][bound], v["p50_ms"])
    if doc["variants"][3]["floor_ms"] and doc["variants"][2]["floor_ms"]:
        assert doc["variants"][3]["floor_ms"] < doc["variants"][2]["floor_ms"]  # int8 work at the int8 rate
    assert {"fp32", "int8"} <= set(doc["rates"]) and doc["rates"]["int8"]["unit"] == "GOP/s"
    assert isinstance(doc["machine"]["isa"], list) and doc["machine"]["onnxruntime"]["version"]
    # The keys stay exactly as they were before the worker's messages and the results were typed.
    assert set(doc) == BENCH_KEYS and all(set(v) == VARIANT_KEYS for v in doc["variants"])
    assert FLOOR_KEYS <= set(doc["floor"]) and "type" not in doc["floor"]


#: ``workbench bench --json``: the top level and each variant (``samples_ms`` only with ``--samples``).
BENCH_KEYS = {"machine", "floor_ms", "matmul_bound_ms", "rates", "floor", "config", "stopped", "variants", "skipped",
              "answers_text", "int8_flags", "machine_load", "random_weights"}
VARIANT_KEYS = {"name", "provider", "p50_ms", "p90_ms", "p99_ms", "mean_ms", "std_ms", "throughput_per_s", "runs",
                "parity", "floor_ratio", "session_providers", "kind", "level", "fp16", "disabled_optimizers",
                "task_parity", "floor_ms", "floor_precision", "matmul_bound_ms", "bound_ratio", "task_parity_parts",
                "assignment"}
FLOOR_KEYS = {"floor_ms", "flops", "gflops", "rate_measured", "rate_quiet", "matmul_bound_ms", "stream_gflops", "rates",
              "variants"}


def test_bench_plan_and_exporter_flags():
    """--disable keeps a fusion off through the session; --exporter dynamo fuses the dynamo export."""
    p = _cli("bench", "bert-tiny", "--seq", "8", "--runs", "2", "--warmup", "1", "--threads", "1",
             "--variants", "unfused,fused", "--disable", "skip_layer_norm", "--exporter", "dynamo",
             "--dynamic-block-base", "4", "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    fused = doc["variants"][1]
    assert fused["parity"]["max_abs_diff"] < 1e-3
    assert doc["config"]["dynamic_block_base"] == 4
    assert "SkipLayerNormFusion" in fused["disabled_optimizers"] and doc["variants"][0]["disabled_optimizers"] == []
    # Both bounds are there; how the two measured rates compare is a fact about the machine's load, not the code.
    fastest = min(v["p50_ms"] for v in doc["variants"])
    _demand_bound(doc["floor_ms"], doc["floor"]["floor_ms"], fastest)
    _demand_bound(doc["matmul_bound_ms"], doc["floor"]["matmul_bound_ms"], fastest)


def test_bench_table_output():
    p = _cli("bench", "bert-tiny", "--seq", "8", "--runs", "2", "--warmup", "1", "--threads", "1",
             "--variants", "unfused,fused")
    assert p.returncode == 0, p.stderr
    assert "hardware floor" in p.stdout and "fused" in p.stdout and "vs unfused" in p.stdout


@pytest.mark.parametrize("args, message", [
    (("--seq", "600", "--variants", "fused"), "sequence 600 is longer than fused's 512 positions"),
    (("--variants", "fused,nope"), "unknown variant(s) nope"),
    (("--seq", "0",), "argument --seq: must be a whole number from 1 to 1,048,576, not '0'"),
    (("--runs", "nan",), "argument --runs: must be a whole number from 1 to 1,000,000, not 'nan' (not a finite"),
    (("--batch", "1e400",), "argument --batch: must be a whole number from 1 to 65,536, not '1e400'"),
    (("--disable", "skip_layer_nrom"), "skip_layer_nrom"),
    (("--dynamic-block-base", "-1"), "argument --dynamic-block-base: must be a whole number from 0 to 4,096"),
])
def test_bench_bad_input_exit_2_one_line(args, message):
    p = _cli("bench", "bert-tiny", "--runs", "1", "--warmup", "1", *args)
    assert p.returncode == 2
    lines = [line for line in p.stderr.splitlines() if line.startswith("workbench: error:")]
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in p.stderr


def test_bench_cuda_without_gpu_exit_2():
    from workbench.ort.session import cuda_status

    if cuda_status()[0]:
        pytest.skip("a GPU is present here")
    p = _cli("bench", "bert-tiny", "--provider", "cuda", "--variants", "fused,fp16", "--runs", "1")
    # Refused before the export (issue 45): the command, what it needs, and why there is none here, in one line.
    (line,) = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and line.startswith("workbench: error: workbench bench --provider cuda needs a GPU, but")
    assert "Traceback" not in p.stderr


def test_int8_on_cuda_is_refused():
    p = _cli("bench", "bert-tiny", "--provider", "cuda", "--variants", "int8", "--runs", "1")
    assert p.returncode == 2 and "int8 dynamic quantization runs on the CPU" in p.stderr


def test_bench_onnx_file_runs_every_onnx_variant_and_says_why_torch_is_skipped(tiny_export, tmp_path):
    """An exported .onnx carries no PyTorch model: bench times what it can and says what it skipped."""
    model = tmp_path / "exported.onnx"
    import onnx

    onnx.save(onnx.load(str(tiny_export().path)), str(model))  # one self-contained file, as a user has it
    p = _cli("bench", str(model), "--seq", "8", "--runs", "2", "--warmup", "1", "--threads", "1", "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert [v["name"] for v in doc["variants"]] == ["unfused", "fused", "int8"]
    assert [s["name"] for s in doc["skipped"]] == ["torch"] and "no PyTorch model" in doc["skipped"][0]["why"]
    notices = [line for line in p.stderr.splitlines() if "skipped" in line]
    assert len(notices) == 1 and "torch" in notices[0]
    # Asking for it explicitly is the one case that errors.
    p = _cli("bench", str(model), "--variants", "torch,fused", "--runs", "1")
    assert p.returncode == 2 and "no PyTorch model" in p.stderr and "Traceback" not in p.stderr
    assert sorted(x.name for x in tmp_path.iterdir()) == ["exported.onnx"]  # nothing written beside it


def test_bench_gives_up_after_its_stated_bound_in_one_line(tmp_path):
    """The wait for the worker is bounded; a bound set small through WORKBENCH_BENCH_WAIT_S ends it with
    exit 2 and one line naming what it waited for, the worker ended, no traceback."""
    import os
    import time

    env = {**os.environ, "WORKBENCH_BENCH_WAIT_S": "1", "WORKBENCH_CACHE": str(tmp_path / "cache")}
    t = time.monotonic()
    p = subprocess.run([sys.executable, "-c", "import sys; from workbench.cli import main; sys.exit(main())",
                        "bench", "bert-tiny", "--variants", "unfused", "--runs", "100000", "--warmup", "1"],
                       capture_output=True, text=True, timeout=600, env=env)
    lines = [line for line in p.stderr.splitlines() if line.startswith("workbench: error:")]
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr[-2000:]
    assert len(lines) == 1 and "gave up after 1 s waiting for the benchmark worker" in lines[0], p.stderr[-2000:]
    assert "WORKBENCH_BENCH_WAIT_S" in lines[0] and time.monotonic() - t < 300


def test_the_benchmark_bound_scales_with_what_was_asked_and_spares_a_slow_bert_large_run(monkeypatch):
    from workbench.config import BenchConfig
    from workbench.measure.harness.bench import wait_bound

    monkeypatch.delenv("WORKBENCH_BENCH_WAIT_S", raising=False)
    small = wait_bound(BenchConfig(runs=30, warmup=5), 2)
    assert wait_bound(BenchConfig(runs=60, warmup=5), 2) > small and wait_bound(BenchConfig(runs=30, warmup=5), 4) > small
    large = BenchConfig(batch=32, seq=512, runs=30, warmup=5)  # about 3.5 min a run for bert-large on 2 slow cores
    assert wait_bound(large, 4) >= 4 * 35 * 4 * 60  # room for every run of every variant at 4 min each
    monkeypatch.setenv("WORKBENCH_BENCH_WAIT_S", "7")
    assert wait_bound(large, 4) == 7
