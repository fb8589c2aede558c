"""Sweeps over batch x sequence x threads, and the standard variants."""

from __future__ import annotations

import json

import pytest

from workbench.config import BenchConfig
from workbench.errors import BenchmarkError, ConfigError


def test_sweep_grid_table_and_json(tiny_export, tmp_path):
    from workbench.measure.fleet.sweep import COLUMNS, sweep
    from workbench.measure.harness.results import Variant

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
    from workbench.measure.variants import standard_variants

    path = tiny_export().path
    vs = standard_variants(str(path), ["unfused", "fused"])
    assert [(v.name, v.level) for v in vs] == [("unfused", "disable"), ("fused", "all")]
    with pytest.raises(BenchmarkError, match="no PyTorch model"):
        standard_variants(str(path), ["torch"])
    with pytest.raises(ConfigError, match="unknown variant"):
        standard_variants("bert-tiny", ["fast"])


def _session_ops(model, disabled=()) -> dict:
    """Op types after ONNX Runtime's own session-level fusions (level "all")."""
    import collections
    import tempfile
    from pathlib import Path

    import onnx
    import onnxruntime as ort

    from workbench.ort.session import session_options

    with tempfile.TemporaryDirectory() as d:
        so = session_options("all", 1, optimized_model_path=Path(d) / "opt.onnx")
        ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"],
                             disabled_optimizers=list(disabled))
        return collections.Counter(n.op_type for n in onnx.load(str(Path(d) / "opt.onnx")).graph.node)


@pytest.mark.parametrize("step, fused_op, unfused_op", [
    ("skip_layer_norm", "SkipLayerNormalization", "LayerNormalization"),
    ("bias_gelu", "BiasGelu", "Gelu"),
])
def test_a_step_switched_off_stays_off_in_the_session(tiny_export, step, fused_op, unfused_op):
    """ONNX Runtime's session would fuse the pattern again; the plan's session options keep it off."""
    from workbench.config import FusionPlan
    from workbench.fusion.catalog import session_optimizers_off
    from workbench.measure.variants.models import fuse_bert

    exp = tiny_export()
    plan = FusionPlan(disabled={step})
    fused = fuse_bert(exp.path, num_heads=2, hidden_size=128, plan=plan)
    plain = _session_ops(fused)
    assert plain[fused_op] > 0  # without the guard the session quietly redoes the step
    off = session_optimizers_off(plan.disabled)
    kept = _session_ops(fused, off)
    assert kept[fused_op] == 0 and kept[unfused_op] > 0
    full = _session_ops(fuse_bert(exp.path, num_heads=2, hidden_size=128))
    assert full[fused_op] == plain[fused_op]


def test_bench_variants_follow_the_plan(tiny_export):
    """The fused variant of a plan without skip_layer_norm runs LayerNormalization, and says so in its profile."""
    from workbench.config import FusionPlan
    from workbench.measure.harness.profile import profile_ops
    from workbench.measure.variants import standard_variants

    plan = FusionPlan(disabled={"skip_layer_norm"})
    v = {x.name: x for x in standard_variants("bert-tiny", ("unfused", "fused"), plan=plan)}
    assert "SkipLayerNormFusion" in v["fused"].disabled_optimizers
    assert v["unfused"].disabled_optimizers == ()
    prof = profile_ops(v["fused"].model, BenchConfig(seq=16, runs=2, warmup=1, threads=1),
                       disabled_optimizers=v["fused"].disabled_optimizers)
    ops = prof.op_type_totals()
    assert "SkipLayerNormalization" not in ops and "LayerNormalization" in ops and "Attention" in ops
    default = {x.name: x for x in standard_variants("bert-tiny", ("fused",))}
    assert default["fused"].disabled_optimizers == () and default["fused"].model != v["fused"].model
