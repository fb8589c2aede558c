"""A bound above the measured time is impossible: it is shown as unknown, never as a figure, and its rate is
measured again next time (issue 26: "MatMuls alone: 295.66 ms" for a model that ran in 128 ms)."""
from __future__ import annotations

import json

from workbench.measure.harness.results import BenchResult, VariantStats
from workbench.measure.worker.floor import _cache_file, _read, distrust_rate, machine_matmul_info, plausible_bound


def _stats(name: str, p50: float, precision: str | None = None) -> VariantStats:
    s = VariantStats.from_samples({"name": name, "provider": "cpu"}, [p50, p50, p50], 1, None, None, [])
    s.floor_precision = precision
    return s


def test_a_bound_above_the_measured_time_is_unknown():
    assert plausible_bound(295.66, 128.0) is None
    assert plausible_bound(90.0, 128.0) == 90.0
    assert plausible_bound(None, 128.0) is None and plausible_bound(50.0, None) == 50.0
    res = BenchResult([_stats("fused", 128.0), _stats("int8", 45.0, "int8+fp32")], {}, None,
                      floor={"matmul_bound_ms": 295.66})
    assert res.matmul_bound_ms is None  # the int8 variant's own time does not count against the fp32 bound
    assert "295" not in json.dumps(res.to_dict(samples=False)["matmul_bound_ms"])
    ok = BenchResult([_stats("fused", 128.0)], {}, None, floor={"matmul_bound_ms": 99.6})
    assert ok.matmul_bound_ms == 99.6


def test_a_distrusted_rate_is_measured_again(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path))
    path = _cache_file(1, "cpu", "fp32", "stream")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"gflops": 1e6, "quiet": True}))  # an absurd rate, cached as if quiet
    distrust_rate(1, "cpu", "fp32", "stream")
    assert _read(path)["quiet"] is False
    info = machine_matmul_info(1, "cpu", "fp32", kind="stream")  # measured again, a real probe
    assert info["gflops"] < 1e6
