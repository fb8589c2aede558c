"""Sweeps over batch x sequence x threads, and the standard variants."""

from __future__ import annotations

import json

import pytest

from workbench.config import BenchConfig
from workbench.errors import BenchmarkError, ConfigError


def test_sweep_grid_table_and_json(tiny_export, tmp_path):
    from workbench.runtime.bench import Variant
    from workbench.runtime.sweep import COLUMNS, sweep

    path = tiny_export().path
    seen = []
    res = sweep([Variant("unfused", path, level="disable"), Variant("all", path)], batches=(1, 2), seqs=(8, 600),
                threads=(1,), cfg=BenchConfig(runs=3, warmup=1), on_point=seen.append)
    df = res.frame
    assert list(df.columns) == COLUMNS and len(df) == 2 * 2 * 2 and len(seen) == 4
    ok = df[df["error"].isna()]
    bad = df[df["error"].notna()]
    assert set(ok["seq"]) == {8} and (ok["runs"] == 3).all() and (ok["p50_ms"] > 0).all()
    assert set(bad["seq"]) == {600} and bad["error"].str.contains("longer than").all()
    # Batch 2 does twice the work of batch 1.
    f1 = ok[(ok.batch == 1)]["floor_ms"].iloc[0]
    f2 = ok[(ok.batch == 2)]["floor_ms"].iloc[0]
    assert f2 == pytest.approx(2 * f1)
    doc = json.loads(res.to_json(tmp_path / "sweep.json"))
    assert doc["rows"] == json.loads((tmp_path / "sweep.json").read_text())["rows"]
    assert doc["machine"]["cpu"]
    with pytest.raises(BenchmarkError):
        sweep([Variant("a", path)], seqs=(600,), threads=(1,), cfg=BenchConfig(runs=1, warmup=1),
              stop_on_error=True)
    with pytest.raises(ConfigError):
        sweep([Variant("a", path)], threads=(0,))


def test_standard_variants_for_onnx_file_and_errors(tiny_export):
    from workbench.runtime.recipes import standard_variants

    path = tiny_export().path
    vs = standard_variants(str(path), ["unfused", "fused"])
    assert [(v.name, v.level) for v in vs] == [("unfused", "disable"), ("fused", "all")]
    with pytest.raises(BenchmarkError, match="no PyTorch weights"):
        standard_variants(str(path), ["torch"])
    with pytest.raises(ConfigError, match="unknown variant"):
        standard_variants("bert-tiny", ["fast"])
