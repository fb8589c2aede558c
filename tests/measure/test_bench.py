"""The benchmark worker: real sessions, real processes, real crashes."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import pytest

from workbench.config import BenchConfig
from workbench.errors import BenchmarkError, ConfigError, RuntimeUnavailableError, WorkbenchError
from workbench.measure.harness.bench import benchmark, stream_benchmark
from workbench.measure.harness.results import BenchResult, RunSample, Variant

FAST = BenchConfig(seq=16, runs=4, warmup=1, threads=1)


@pytest.fixture(scope="module")
def tiny(tiny_export):
    return tiny_export().path


def test_three_variants_side_by_side(tiny):
    """torch, ORT unoptimized and ORT optimized: stats, parity, floor, machine."""
    vs = [Variant("torch", kind="torch", torch_source={"model": "bert-tiny"}),
          Variant("unfused", tiny, level="disable"),
          Variant("all", tiny, level="all")]
    cfg = BenchConfig(seq=32, runs=6, warmup=2, threads=2)
    res = benchmark(vs, cfg)
    assert isinstance(res, BenchResult)
    assert [v.name for v in res.variants] == ["torch", "unfused", "all"]
    for v in res.variants:
        assert v.runs == 6 and len(v.samples_ms) == 6
        assert 0 < v.p50_ms <= v.p90_ms <= v.p99_ms
        assert v.throughput_per_s == pytest.approx(1000.0 / v.mean_ms)
        assert v.floor_ratio == pytest.approx(v.p50_ms / res.floor_ms)
    assert res["torch"].parity is None  # the reference
    for name in ("unfused", "all"):
        assert res[name].parity["cosine"] > 0.99999
        assert res[name].parity["max_abs_diff"] < 1e-3
        assert res[name].session_providers == ["CPUExecutionProvider"]
    assert res["torch"].session_providers == ["torch-cpu"]
    assert res.floor_ms and 0 < res.floor_ms < res["all"].p50_ms * 10
    assert res.machine["threads"] == 2 and res.machine["cpu"] and res.machine["cores"] >= 1
    assert any(p.startswith("onnxruntime") for p in res.machine["packages"])
    doc = json.loads(json.dumps(res.to_dict()))
    assert {"machine", "floor_ms", "variants"} <= set(doc)
    assert {"name", "provider", "p50_ms", "p90_ms", "p99_ms", "runs", "parity"} <= set(doc["variants"][0])
    frame = res.to_frame()
    assert list(frame["name"]) == ["torch", "unfused", "all"] and "cosine" in frame.columns


def test_samples_stream_round_robin_and_iterate(tiny):
    got, events = [], []
    handle = stream_benchmark([Variant("a", tiny, level="disable"), Variant("b", tiny)],
                              BenchConfig(seq=8, runs=5, warmup=1, threads=1),
                              on_sample=got.append, on_event=events.append, floor=False)
    iterated = list(handle)
    res = handle.result()
    assert iterated == got and all(isinstance(s, RunSample) for s in got)
    # Interleaved: a b a b ..., run indexes 0 0 1 1 ...
    assert [s.variant for s in got] == ["a", "b"] * 5
    assert [s.run_index for s in got] == [i // 2 for i in range(10)]
    assert [s.ms for s in got if s.variant == "a"] == res["a"].samples_ms
    from workbench.measure.worker.protocol import Message

    assert all(isinstance(e, Message) for e in events)  # typed messages, never dicts
    kinds = [e.kind for e in events]
    assert kinds[0] == "status" and kinds[-1] == "done" and "ready" in kinds and "parity" in kinds
    assert not res.stopped


def test_stop_ends_cleanly_with_partial_result(tiny):
    first = threading.Event()
    handle = stream_benchmark([Variant("a", tiny)], BenchConfig(seq=8, runs=100000, warmup=1, threads=1),
                              on_sample=lambda s: first.set(), floor=False)
    assert first.wait(120)
    t0 = time.perf_counter()
    handle.stop()
    res = handle.result(timeout=60)
    assert time.perf_counter() - t0 < 30
    assert res.stopped and 1 <= res["a"].runs < 100000
    assert not handle._proc.is_alive()


def test_killed_worker_is_reported_and_next_benchmark_works(tiny):
    first = threading.Event()
    handle = stream_benchmark([Variant("a", tiny)], BenchConfig(seq=8, runs=100000, warmup=1, threads=1),
                              on_sample=lambda s: first.set(), floor=False)
    assert first.wait(120)
    os.kill(handle.pid, signal.SIGKILL)
    with pytest.raises(BenchmarkError, match=r"worker died \(signal 9"):
        handle.result(timeout=60)
    with pytest.raises(BenchmarkError, match="worker died"):
        list(handle)  # iterating reports the death too
    res = benchmark([Variant("a", tiny)], FAST, floor=False)
    assert res["a"].runs == FAST.runs


def test_segfault_in_worker_is_reported_and_next_benchmark_works(tiny):
    with pytest.raises(BenchmarkError, match=rf"worker died \(signal {int(signal.SIGSEGV)}"):
        benchmark([Variant("a", tiny)], FAST, floor=False, _fault="segfault:sample", timeout=120)
    res = benchmark([Variant("a", tiny)], FAST, floor=False)
    assert res["a"].runs == FAST.runs and res["a"].p50_ms > 0


def test_sequence_zero_and_too_long_are_clear_errors(tiny):
    with pytest.raises(ConfigError, match="seq must be at least 1"):
        BenchConfig(seq=0)
    with pytest.raises(BenchmarkError, match="sequence 513 is longer than a's 512 positions"):
        benchmark([Variant("a", tiny)], BenchConfig(seq=513, runs=1, warmup=1, threads=1), floor=False, timeout=120)
    with pytest.raises(BenchmarkError, match="longer than t's 512 positions"):
        benchmark([Variant("t", kind="torch", torch_source={"model": "bert-tiny"})],
                  BenchConfig(seq=600, runs=1, warmup=1, threads=1), floor=False, timeout=120)


def test_hidden32_folder_max_positions(hf_folder, tiny_export):
    """A model's own position table (160 rows) sets the limit, for torch and its export."""
    from workbench.config import ExportConfig
    from workbench.export import export

    folder = hf_folder("bert")
    path = export(str(folder), ExportConfig()).path
    with pytest.raises(BenchmarkError, match="161 is longer than onnx's 160 positions"):
        benchmark([Variant("onnx", path)], BenchConfig(seq=161, runs=1, warmup=1, threads=1), floor=False)
    res = benchmark([Variant("t", kind="torch", torch_source={"model": str(folder)}), Variant("onnx", path)],
                    BenchConfig(seq=160, runs=2, warmup=1, threads=1), floor=False)
    assert res["onnx"].parity["cosine"] > 0.9999


def test_out_of_memory_is_a_clear_error(tiny):
    # 4096 x 2 heads x 512 x 512 fp32 attention scores alone are 8 GiB; the worker is capped at 3 GiB.
    t0 = time.perf_counter()
    with pytest.raises(BenchmarkError, match="out of memory .* batch 4096, sequence 512"):
        benchmark([Variant("a", tiny)], BenchConfig(batch=4096, seq=512, runs=1, warmup=1, threads=1),
                  floor=False, memory_limit_mb=3000, timeout=300)
    assert time.perf_counter() - t0 < 120


def test_cuda_variant_without_gpu_names_what_is_missing(tiny):
    from workbench.ort.session import cuda_status

    ok, reason = cuda_status()
    if ok:
        pytest.skip("a GPU is present here")
    with pytest.raises(RuntimeUnavailableError, match="GPU asked for, but") as err:
        stream_benchmark([Variant("gpu", tiny, provider="cuda", fp16=True)], FAST)
    assert reason in str(err.value) and "\n" not in str(err.value)


def test_bytes_model_and_bad_inputs(tiny, tmp_path):
    import onnx

    data = onnx.load(str(tiny)).SerializeToString()  # the whole model, weights included
    res = benchmark([Variant("bytes", data)], FAST, floor=False)
    assert res["bytes"].runs == FAST.runs
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model at all")
    with pytest.raises(BenchmarkError, match="bad"):
        benchmark([Variant("bad", bad)], FAST, floor=False, timeout=120)
    with pytest.raises(BenchmarkError, match="is not a file"):
        stream_benchmark([Variant("x", tmp_path / "missing.onnx")], FAST)
    with pytest.raises(ConfigError, match="unique"):
        stream_benchmark([Variant("x", tiny), Variant("x", tiny)], FAST)
    with pytest.raises(ConfigError, match="needs torch_source"):
        Variant("t", kind="torch")
    with pytest.raises(ConfigError, match="level"):
        Variant("t", tiny, level="max")
    assert issubclass(BenchmarkError, WorkbenchError)


def test_worker_environment_has_spinning_off(tiny):
    """The worker's torch reads OMP_WAIT_POLICY=PASSIVE; the caller's environment is untouched."""
    before = dict(os.environ)
    events = []
    benchmark([Variant("a", tiny), Variant("t", kind="torch", torch_source={"model": "bert-tiny"})],
              BenchConfig(seq=8, runs=2, warmup=1, threads=1), floor=False, on_event=events.append)
    assert dict(os.environ) == before
    ready = next(e for e in events if e.kind == "ready")
    assert ready.worker["env"]["OMP_WAIT_POLICY"] == "PASSIVE"
    assert ready.worker["torch_threads"] == 1 and ready.worker["pid"] != os.getpid()
