"""Steps that cannot apply: every step's anchors, read from the engines' own objects; a step whose anchors are absent
is not run and is reported as skipped, and that is exactly what running it would have given."""

from __future__ import annotations

import pytest

from workbench.config import ExportConfig, FusionPlan
from workbench.fusion import Timeline
from workbench.fusion.adapters import adapter
from workbench.fusion.engine_types import EngineContext
from workbench.fusion.engines import engine_steps
from workbench.fusion.snapshot import fingerprint


@pytest.fixture(scope="module")
def modernbert_dynamo(tmp_path_factory):
    """A two-layer ModernBERT's dynamo export."""
    from test_workshop import save_tiny_modernbert
    from workbench.export import export
    from workbench.models import resolve

    src = resolve(save_tiny_modernbert(tmp_path_factory.mktemp("modernbert")))
    return src, export(src, ExportConfig(exporter="dynamo", attention="sdpa"))


def _run(path, engine: str, **kw) -> Timeline:
    tl = Timeline(path, FusionPlan(engine=engine), persist=False, **kw)
    tl.run()
    return tl


def _rerun_exactly(tl: Timeline, engine: str) -> list[str]:
    """Run every skipped step for real on its input; the steps whose graph would have differed.

    Not the workbench's onnxscript-pattern rules: their pass would also propagate constants and drop unused
    nodes (onnxscript's matcher does that around any match), which the chain's next clean-up does anyway;
    their step is simply not run, as before there were anchors for every step.
    """
    from workbench.fusion.registry import rules
    from workbench.fusion.rule import PatternRule

    patterns = {r.name for r in rules() if isinstance(r, PatternRule)}
    steps = {s.name: s for s in engine_steps(engine)}
    eng = adapter(engine)
    differ = []
    for prev, snap in zip(tl.snapshots, tl.snapshots[1:]):
        if not snap.skipped or snap.step in patterns:
            continue
        es = steps[snap.step]
        ctx = EngineContext(num_heads=tl.num_heads, hidden_size=tl.hidden_size, counts=dict(prev.chain["counts"]),
                            store=eng.context_store(tl.store))
        out = es.run(ctx, eng.working(tl.store, prev.skeleton))
        ran = type(snap)(step="", engine="", skeleton=eng.skeleton(tl.store, out.model), nodes=0, histogram={},
                         fused={}, elapsed_s=0.0, diff=snap.diff)
        if fingerprint(ran) != fingerprint(snap) or sum(out.counts.values()):
            differ.append(snap.step)
    return differ


def test_modernbert_skips_what_it_lacks_and_runs_its_rotary_attention_and_norm_steps(modernbert_dynamo):
    src, res = modernbert_dynamo
    tl = _run(res.path, "onnxscript", num_heads=src.num_heads, hidden_size=src.hidden_size,
              num_layers=src.num_layers)
    by = {s.step: s for s in tl.snapshots[1:]}
    lacks = {"sdpa", "bias_gelu", "fast_gelu", "ort_patterns", "group_query_attention", "multi_head_attention",
             "sdpa_to_mha", "rotary_embedding", "tanh_gelu", "encoder_silu", "simplified_layer_norm"}
    for name in lacks:
        assert by[name].skipped.startswith("nothing to fuse: "), (name, by[name].diagnostic)
        assert by[name].diagnostic == by[name].skipped
    for name in ("encoder_rotary", "encoder_attention", "encoder_skip_norm", "skip_layer_norm", "gelu"):
        assert not by[name].skipped, (name, by[name].skipped)
    assert by["encoder_rotary"].counts == {"encoder_rotary": 4} and by["encoder_attention"].fused_here
    # a step that could apply and fused nothing keeps its reason and is not folded away
    assert by["skip_layer_norm"].diagnostic and not by["skip_layer_norm"].skipped
    # the skeleton of a skipped step is exactly what running it gives (its rules, or what the call does around them)
    assert _rerun_exactly(tl, "onnxscript") == []
    # the same on ONNX Runtime's chain, whose anchors are its Fusion objects' search_op_types
    ort = _run(res.path, "ort", num_heads=src.num_heads, hidden_size=src.hidden_size, num_layers=src.num_layers)
    skipped = {s.step for s in ort.snapshots[1:] if s.skipped}
    assert {"skip_simplified_layer_norm", "bias_skip_layer_norm", "standard_attention"} <= skipped
    assert "attention" not in skipped and "layer_norm" not in skipped


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_bert_skips_rotary_and_rms_steps_and_runs_attention(tiny_export, exporter):
    path = tiny_export(exporter, "sdpa").path
    for engine in ("onnxscript", "ort"):
        tl = _run(path, engine, num_heads=2, hidden_size=128)
        by = {s.step: s for s in tl.snapshots[1:]}
        assert by["rotary_embedding"].skipped and by["skip_simplified_layer_norm"].skipped
        fused_attention = [s for s in tl.snapshots[1:] if s.fused_here.get("Attention") or
                           s.fused_here.get("MultiHeadAttention")]
        assert not any(s.skipped for s in fused_attention)
        assert engine == "onnxscript" or not by["attention"].skipped  # ORT's attention starts from the norms
        if engine == "onnxscript" or exporter == "torchscript":  # ORT's optimizer fuses no dynamo attention
            assert fused_attention
        if engine == "onnxscript":
            assert _rerun_exactly(tl, engine) == []
