"""The fusion timeline on real exports and real engines (bert-tiny, 2 layers)."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto as T, helper as h

from workbench.config import FusionPlan
from workbench.errors import FusionError
from workbench.fusion import BY_NAME, CATALOG, Timeline, run_fusion
from workbench.fusion.engines import engine_steps, one_shot
from workbench.graph import fused_counts

HEADS, HIDDEN = 2, 128  # bert-tiny


def test_catalog_is_one_consistent_table():
    names = [s.name for s in CATALOG]
    assert len(names) == len(set(names))
    for s in CATALOG:
        assert s.kind in ("fusion", "cleanup")
        assert s.title and s.matches and s.effect and s.engines
        assert all(p in BY_NAME for p in s.prerequisites), s.name
        if s.kind == "fusion":
            assert s.emits and s.pattern, s.name
    implemented = {st.name for e in ("ort", "onnxscript") for st in engine_steps(e)}
    assert implemented <= set(names)
    for s in CATALOG:  # every row is run by an engine adapter that claims it
        for eng in s.engines:
            if eng in ("ort", "onnxscript"):
                assert s.name in {st.name for st in engine_steps(eng)}, (s.name, eng)
    for must in ("layer_norm", "gelu", "gelu_approximation", "skip_layer_norm", "bias_skip_layer_norm", "attention",
                 "multi_head_attention", "embed_layer_norm", "bias_gelu", "identity_cast", "reshape", "shape"):
        assert must in BY_NAME


@pytest.mark.parametrize("engine", ["ort", "onnxscript"])
@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_all_steps_on_equals_the_engines_one_shot_call(tiny_export, engine, exporter):
    path = tiny_export(exporter, "eager").path
    # The workbench's late softmax-attention rule fuses the cores an engine leaves (onnxscript leaves
    # TorchScript BERT's): without it, the engine's steps one by one are exactly its one-shot call.
    own = {"softmax_attention"} if engine == "onnxscript" else set()
    tl = run_fusion(path, FusionPlan(engine=engine, disabled=own), num_heads=HEADS, hidden_size=HIDDEN)
    ref = one_shot(engine, onnx.load(str(path)), num_heads=HEADS, hidden_size=HIDDEN)
    assert tl.final.fused == fused_counts(ref)
    assert tl.final.nodes == len(ref.graph.node)
    assert tl.snapshots[0].step == "export"
    assert [s.step for s in tl.snapshots[1:]] == [s.name for s in engine_steps(engine)
                                                  if BY_NAME[s.name].default_on and s.name not in own]


@pytest.mark.parametrize("exporter,winner", [("torchscript", "ort"), ("dynamo", "onnxscript")])
def test_auto_picks_the_engine_that_fuses_attention(tiny_export, exporter, winner):
    tl = run_fusion(tiny_export(exporter, "eager").path, FusionPlan(engine="auto"), num_heads=HEADS, hidden_size=HIDDEN)
    assert tl.engine_used == winner
    assert f"kept {winner}" in tl.engine_note
    f = tl.final.fused
    assert f.get("Attention", 0) == 2 and f.get("SkipLayerNormalization", 0) == 4 and f.get("BiasGelu", 0) == 2
    loser = next(e for e in tl.runs if e != winner)
    attn = next(s for s in tl.runs[loser] if s.step == "attention")
    assert attn.diagnostic and f"The {winner} engine fuses 2 Attention" in attn.diagnostic


def test_every_snapshot_keeps_parity(tiny_export):
    tl = run_fusion(tiny_export("torchscript", "eager").path, FusionPlan(engine="ort"), num_heads=HEADS,
                    hidden_size=HIDDEN)
    for i in range(1, len(tl.snapshots)):
        p = tl.check_parity(i)
        assert p.ok, (tl.snapshots[i].step, p)
        assert p.cases == 4
    assert tl.snapshots[-1].to_dict()["parity"]["ok"] is True


def test_a_snapshot_opens_from_its_skeleton_and_stored_weights(tiny_export):
    """Parity opens ONNX Runtime on the small skeleton plus the stored weights as arrays (no whole-model
    serialization, which on bert-base froze the notebook for a second); outputs are the full model's."""
    import numpy as np

    from workbench.fusion.snapshot import open_session, session_source
    from workbench.ort.inputs import make_inputs, spec_from_onnx
    from workbench.ort.session import run_session

    tl = run_fusion(tiny_export("torchscript", "eager").path, FusionPlan(engine="ort"), num_heads=HEADS,
                    hidden_size=HIDDEN)
    snap = tl.final
    full = snap.model
    data, arrays = session_source(snap)
    assert arrays and len(data) < full.ByteSize() / 5
    assert set(arrays) == {t.name for t in snap.skeleton.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL}
    feeds = make_inputs(spec_from_onnx(full), 2, 16, seed=3, padded=True)
    got, want = run_session(open_session(snap), feeds), run_session(open_session(full), feeds)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    assert session_source(full)[1] == {}  # a plain model: serialized, as before


def test_parity_catches_a_numerically_different_step(tiny_export):
    tl = Timeline(tiny_export("torchscript", "eager").path, FusionPlan(engine="ort"), num_heads=HEADS,
                  hidden_size=HIDDEN)
    tl.toggle("gelu_approximation", True)  # tanh approximation of GELU: not the same function
    assert "gelu_approximation" in [s.step for s in tl.snapshots]
    assert tl.final.fused.get("FastGelu", 0) == 2
    p = tl.check_parity(len(tl.snapshots) - 1)
    assert p.max_abs_diff > 1e-6


def test_toggle_recomputes_from_the_changed_step_and_caches(tiny_export):
    tl = Timeline(tiny_export("torchscript", "eager").path, FusionPlan(engine="ort"), num_heads=HEADS,
                  hidden_size=HIDDEN)
    first = list(tl.run())
    off = list(tl.toggle("bias_gelu", False))
    assert "bias_gelu" not in [s.step for s in off]
    assert off[-1].fused.get("BiasGelu", 0) == 0 and off[-1].fused.get("Gelu", 0) == 2
    k = [s.step for s in first].index("bias_gelu")
    assert all(a is b for a, b in zip(first[:k], off[:k]))  # prefix reused, not recomputed
    assert off[k] is not first[k + 1]
    back = tl.toggle("bias_gelu", True)
    assert all(a is b for a, b in zip(first, back))  # switching back is a cache lookup
    assert len(back) == len(first)


def test_disabled_prerequisite_is_named_in_the_diagnostic(tiny_export):
    tl = run_fusion(tiny_export("torchscript", "eager").path, FusionPlan(engine="ort", disabled={"gelu"}),
                    num_heads=HEADS, hidden_size=HIDDEN)
    bg = next(s for s in tl.snapshots if s.step == "bias_gelu")
    assert tl.final.fused.get("BiasGelu", 0) == 0
    assert "Prerequisite step(s) off: gelu" in bg.diagnostic


def test_engine_reasons_are_captured(tiny_export):
    # onnxscript does not fuse attention on a TorchScript export: its matcher says where it stopped
    tl = run_fusion(tiny_export("torchscript", "eager").path, FusionPlan(engine="onnxscript"), num_heads=HEADS,
                    hidden_size=HIDDEN)
    sdpa = next(s for s in tl.snapshots if s.step == "sdpa")
    assert sdpa.fused.get("Attention", 0) == 0
    assert "onnxscript's matcher says: rule" in sdpa.diagnostic
    # ORT does not fuse attention on a dynamo export: its own debug log lines are quoted
    tl = run_fusion(tiny_export("dynamo", "eager").path, FusionPlan(engine="ort"), num_heads=HEADS, hidden_size=HIDDEN)
    attn = next(s for s in tl.snapshots if s.step == "attention")
    assert "fused nothing" in attn.diagnostic and "fusion log says" in attn.diagnostic
    assert any("fusion_attention" in m or "onnx_model" in m for m in attn.messages)


def test_non_bert_graph_skips_every_fusion_as_not_applicable():
    g = h.make_graph([h.make_node("Add", ["x", "y"], ["z"], name="add")], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [2]), h.make_tensor_value_info("y", T.FLOAT, [2])],
                     [h.make_tensor_value_info("z", T.FLOAT, [2])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    for engine in ("ort", "onnxscript"):
        tl = run_fusion(m, FusionPlan(engine=engine))
        attn = next(s for s in tl.snapshots if s.step == "attention")
        # nothing any attention matcher starts from: not applicable, not run
        assert attn.skipped.startswith("nothing to fuse: ")
        assert attn.diagnostic == f"no BERT encoder layer found: {attn.skipped}"
        for s in tl.snapshots[1:]:  # a step an Add can start (ORT's LayerNorm fusion) runs and says why not
            if BY_NAME[s.step].kind == "fusion":
                assert s.skipped or "no BERT encoder layer found" in s.diagnostic, (s.step, s.diagnostic)
        assert tl.final.nodes == 1
    assert len(m.graph.node) == 1  # the caller's model is untouched


def test_unknown_step_is_a_user_error(tiny_export):
    with pytest.raises(FusionError, match="unknown fusion step"):
        Timeline(tiny_export("torchscript", "eager").path, FusionPlan(disabled={"atention"}))
    tl = Timeline(tiny_export("torchscript", "eager").path, FusionPlan(engine="ort"))
    with pytest.raises(FusionError):
        tl.toggle("nope", False)


def test_session_layer_shows_what_ort_adds_at_session_time(tiny_export):
    tl = run_fusion(tiny_export("dynamo", "eager").path, FusionPlan(engine="onnxscript"), num_heads=HEADS,
                    hidden_size=HIDDEN)
    raw = tl.session_layer(0, "all")
    assert raw["fused"].get("SkipLayerNormalization", 0) > 0  # ORT's session forms SkipLayerNorm itself
    assert raw["fused"].get("Attention", 0) == 0  # but not Attention
    assert raw["nodes"] < tl.snapshots[0].nodes and raw["diff"].added
    none = tl.session_layer(0, "disable")
    assert none["nodes"] == tl.snapshots[0].nodes and not none["diff"].removed


def test_session_layer_keeps_a_switched_off_step_off(tiny_export):
    """Switch SkipLayerNormalization off: the session must not quietly fuse it back (unless asked to show that)."""
    tl = run_fusion(tiny_export("dynamo", "eager").path, FusionPlan(engine="onnxscript"), num_heads=HEADS,
                    hidden_size=HIDDEN)
    tl.toggle("skip_layer_norm", False)
    kept = tl.session_layer(len(tl.snapshots) - 1, "all")
    assert kept["kept_off"] == ["SkipLayerNormFusion"]
    assert kept["fused"].get("SkipLayerNormalization", 0) == 0 and kept["fused"]["LayerNormalization"] > 0
    plain = tl.session_layer(len(tl.snapshots) - 1, "all", honour_plan=False)
    assert plain["kept_off"] == [] and plain["added_ops"].get("SkipLayerNormalization", 0) > 0


def test_snapshot_json_and_shared_weights(tiny_export):
    import json

    tl = run_fusion(tiny_export("dynamo", "eager").path, FusionPlan(engine="auto"), num_heads=HEADS, hidden_size=HIDDEN)
    d = json.loads(json.dumps(tl.to_dict()))
    assert d["engine"] == "onnxscript"
    assert {"name", "nodes", "fused", "elapsed_s", "parity", "diagnostic"} <= set(d["steps"][0])
    assert d["final"]["fused"]["Attention"] == 2 and d["final"]["nodes"] == tl.final.nodes
    # snapshots hold skeletons; the full model is assembled with the weights
    full = tl.final.model
    assert full.ByteSize() > 10 * tl.final.skeleton.ByteSize()
    prov = tl.final.to_dict()["provenance"]
    attn = next(s for s in tl.snapshots if s.step == "attention")
    assert any(v for k, v in attn.to_dict()["provenance"].items())
    assert isinstance(prov, dict)
