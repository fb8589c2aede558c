"""What makes toggles fast must not change what the engines produce (bert-tiny, real engines)."""

from __future__ import annotations

import hashlib
import inspect
import re

import onnx
import pytest
from onnx import numpy_helper

from workbench.config import FusionPlan
from workbench.fusion import Timeline, run_fusion
from workbench.fusion.engines import EngineContext, engine_steps, one_shot, ort_anchors
from workbench.fusion.store import WeightStore, is_stub

HEADS, HIDDEN = 2, 128  # bert-tiny


def _nodes(model: onnx.ModelProto) -> list[tuple]:
    return [(n.name, n.op_type, n.domain, tuple(n.input), tuple(n.output)) for n in model.graph.node]


def _weights(model: onnx.ModelProto) -> list[tuple]:
    out = []
    for t in model.graph.initializer:
        a = numpy_helper.to_array(t)
        out.append((t.data_type, tuple(t.dims), hashlib.sha1(a.tobytes()).hexdigest()))
    return sorted(out)


def test_anchors_are_read_from_the_engines_fusion_objects():
    assert ort_anchors("fuse_skip_simplified_layer_norm") == (
        ("FusionSkipSimplifiedLayerNormalization", ("SimplifiedLayerNormalization",)),)
    assert ("FusionBiasGelu", ("Gelu",)) in ort_anchors(("fuse_bias_gelu", True), ("fuse_bias_gelu", False))
    # methods that do more than apply fusions are never skipped
    assert ort_anchors("preprocess") == ()
    assert ort_anchors("utils.remove_identity_nodes") == ()


def test_rotary_add_anchor_needs_neg_in_ort_source():
    """The rotary skip relies on every rotate_half x2 path of ORT's matcher going through Neg."""
    from onnxruntime.transformers.onnx_model_bert import FusionRotaryEmbeddings

    src = inspect.getsource(FusionRotaryEmbeddings.fuse)
    paths = re.findall(r"rotate_half_x2_path_\d_\d = self\.model\.match_parent_path\(\s*node,\s*\[([^\]]*)\]", src)
    assert len(paths) >= 2
    assert all('"Neg"' in p for p in paths), paths
    assert "if rotate_half_x2_path_1 is None or rotate_half_x2_path_2 is None:" in src
    # nothing in the Add branch runs before those matches
    add_branch = src.split("else:", 1)[1]
    first_code = [ln.strip() for ln in add_branch.splitlines() if ln.strip() and not ln.strip().startswith("#")][0]
    assert first_code.startswith("rotate_half_x2_path_1_1 = self.model.match_parent_path(")


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
def test_a_skipped_step_is_exactly_what_the_engine_would_have_done(tiny_export, attention):
    # gelu and skip_layer_norm off: bias_gelu and bias_skip_layer_norm lose their anchors too
    tl = run_fusion(tiny_export("torchscript", attention).path,
                    FusionPlan(engine="ort", disabled={"gelu", "skip_layer_norm"}), num_heads=HEADS,
                    hidden_size=HIDDEN)
    steps = {es.name: es for es in engine_steps("ort")}
    skipped = [(tl.snapshots[i - 1], s) for i, s in enumerate(tl.snapshots)
               if i and s.skipped]
    names = {s.step for _, s in skipped}
    assert {"skip_simplified_layer_norm", "rotary_embedding", "bias_gelu", "bias_skip_layer_norm"} <= names, names
    for prev, snap in skipped:
        assert snap.skeleton is prev.skeleton and snap.elapsed_s == 0.0
        es = steps[snap.step]
        ctx = EngineContext(num_heads=HEADS, hidden_size=HIDDEN, store=tl.store)
        out = es.run(ctx, tl.store.working_copy(prev.skeleton))
        assert _nodes(out.model) == _nodes(prev.skeleton), snap.step
        assert [t.name for t in out.model.graph.initializer] == [t.name for t in prev.skeleton.graph.initializer]
    bg = next(s for s in tl.snapshots if s.step == "bias_gelu")
    assert "Prerequisite step(s) off: gelu" in bg.diagnostic and "no FastGelu / Gelu nodes" in bg.diagnostic
    rot = next(s for s in tl.snapshots if s.step == "rotary_embedding")
    assert rot.diagnostic.startswith("nothing to fuse: no RotaryEmbedding") and "Neg" in rot.diagnostic


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
def test_steps_on_weight_stubs_give_the_engines_weights(tiny_export, attention):
    """ORT steps after ort_basic run on skeletons; the final weights equal the one-shot call's."""
    path = tiny_export("torchscript", attention).path
    tl = run_fusion(path, FusionPlan(engine="ort"), num_heads=HEADS, hidden_size=HIDDEN)
    final = tl.final.model
    assert not any(is_stub(t) for t in final.graph.initializer)
    if attention == "eager":  # ORT alone fuses this cell: compare with its one-shot call, weights included
        ref = one_shot("ort", onnx.load(str(path)), num_heads=HEADS, hidden_size=HIDDEN)
        assert _weights(final) == _weights(ref)
    # a recompute from a cached snapshot (working copy of a skeleton) equals a fresh run of that plan
    tl.toggle("gelu", False)
    fresh = run_fusion(path, FusionPlan(engine="ort", disabled={"gelu"}), num_heads=HEADS, hidden_size=HIDDEN)
    assert _nodes(tl.final.skeleton) == _nodes(fresh.final.skeleton)
    assert _weights(tl.final.model) == _weights(fresh.final.model)


def test_value_hook_reads_stubs_and_leaves_other_tensors_alone():
    import numpy as np

    store = WeightStore()
    big = numpy_helper.from_array(np.arange(4096, dtype=np.float32).reshape(64, 64), name="w")
    g = onnx.helper.make_graph([onnx.helper.make_node("Identity", ["w"], ["y"], name="id")], "g", [],
                               [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [64, 64])],
                               initializer=[big])
    skel = store.strip(onnx.helper.make_model(g))
    stub = skel.graph.initializer[0]
    assert is_stub(stub) and not stub.raw_data
    work = store.working_copy(skel)
    np.testing.assert_array_equal(numpy_helper.to_array(work.graph.initializer[0]), numpy_helper.to_array(big))
    small = numpy_helper.from_array(np.ones(3, dtype=np.float32))
    np.testing.assert_array_equal(numpy_helper.to_array(small), np.ones(3, dtype=np.float32))


def test_background_warming_precomputes_every_single_toggle(tiny_export):
    path = tiny_export("torchscript", "eager").path
    tl = run_fusion(path, FusionPlan(engine="ort"), num_heads=HEADS, hidden_size=HIDDEN)
    first = [s.step for s in tl.snapshots]
    tl.start_warming()
    assert tl.wait_warm(120) and tl.warm_error is None and tl.warm_s is not None
    tl.stop_warming()
    cached = len(tl._cache)
    for step in first[1:]:
        off = tl.toggle(step, False)
        assert step not in [s.step for s in off]
        tl.toggle(step, True)
    assert len(tl._cache) == cached  # every toggle was a cache lookup
    assert [s.step for s in tl.snapshots] == first


def test_a_toggle_during_warming_cancels_it_and_is_exact(tiny_export):
    path = tiny_export("torchscript", "sdpa").path
    tl = run_fusion(path, FusionPlan(engine="auto"), num_heads=HEADS, hidden_size=HIDDEN)
    tl.start_warming()
    snaps = tl.toggle("skip_layer_norm", False)  # cancels the warm-up, then restarts it for the new plan
    fresh = run_fusion(path, FusionPlan(engine="auto", disabled={"skip_layer_norm"}), num_heads=HEADS,
                       hidden_size=HIDDEN)
    assert [(s.step, s.nodes, s.fused) for s in snaps] == [(s.step, s.nodes, s.fused) for s in fresh.snapshots]
    assert [s.diagnostic for s in snaps] == [s.diagnostic for s in fresh.snapshots]
    assert tl.warming or tl.warm_s is not None, tl.warm_error
    tl.stop_warming()
    assert not tl.warming
    assert tl.warm_error is None


def test_warm_up_computes_the_selected_steps_toggle_first(tiny_export):
    """The app puts the step the user is looking at first: its checkbox is the likely first click."""
    path = tiny_export("torchscript", "eager").path
    tl = run_fusion(path, FusionPlan(engine="ort"), num_heads=HEADS, hidden_size=HIDDEN)
    steps = [s.step for s in tl.snapshots[1:]]
    late = steps[-2]
    flipped_order: list[str] = []
    real = tl._run_engine

    def spy(engine, enabled, budget=None):
        flipped = [s for s in steps if enabled(s) != (s not in tl.plan.disabled)]
        if flipped and (not flipped_order or flipped_order[-1] != flipped[0]):
            flipped_order.append(flipped[0])
        return real(engine, enabled, budget=budget)

    tl._run_engine = spy
    tl.warm_first = (late,)
    tl.start_warming()
    assert tl.wait_warm(120) and tl.warm_error is None
    tl.stop_warming()
    assert flipped_order[0] == late and flipped_order[1] == steps[0], flipped_order


def test_background_work_steps_aside_while_a_toggle_waits(tiny_export):
    """Warm-up and auto's engine comparison start no engine step while a toggle waits for the lock, so a
    click waits for the one step in flight at most (not for every background thread's next step)."""
    import threading
    import time

    path = tiny_export("torchscript", "eager").path
    tl = run_fusion(path, FusionPlan(engine="ort"), num_heads=HEADS, hidden_size=HIDDEN)
    calls: list[str] = []
    real = tl._run_engine
    tl._run_engine = lambda engine, enabled=None, budget=None: calls.append(engine) or real(engine, enabled, budget)
    tl._foreground = 1  # as while a toggle waits for the lock
    done: dict = {}
    compare = threading.Thread(target=lambda: done.setdefault("runs", tl.compare_engines()))
    tl.start_warming()
    compare.start()
    time.sleep(0.5)
    assert calls == []  # neither the warm-up nor the comparison took a step
    tl._foreground = 0
    compare.join(120)
    assert tl.wait_warm(120) and tl.warm_error is None
    tl.stop_warming()
    assert set(done["runs"]) == {"ort", "onnxscript"} and "onnxscript" in calls and calls.count("ort") > 1


def test_a_warmed_toggle_needs_no_engine_lock(tiny_export):
    """A toggle whose every step is in memory returns while a background engine step holds the lock
    (on bert-base such a step takes seconds: the click would wait for it)."""
    import threading

    path = tiny_export("torchscript", "eager").path
    tl = run_fusion(path, FusionPlan(engine="ort"), num_heads=HEADS, hidden_size=HIDDEN)
    tl.start_warming()
    assert tl.wait_warm(120)
    tl.stop_warming()
    step = [s.step for s in tl.snapshots][-2]
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with tl._lock:  # what a background engine step does
            held.set()
            release.wait(120)

    threading.Thread(target=hold, daemon=True).start()
    assert held.wait(30)
    result: dict = {}
    try:
        t = threading.Thread(target=lambda: result.setdefault("snaps", tl.toggle(step, False)), daemon=True)
        t.start()
        t.join(60)
        assert "snaps" in result, "the warmed toggle waited for the engine lock"
        assert step not in [s.step for s in result["snaps"]]
    finally:
        release.set()
    fresh = run_fusion(path, FusionPlan(engine="ort", disabled={step}), num_heads=HEADS, hidden_size=HIDDEN)
    assert [(s.step, s.nodes) for s in result["snaps"]] == [(s.step, s.nodes) for s in fresh.snapshots]


def test_toggle_ready_says_when_a_click_is_a_lookup(tiny_export):
    """What the app's background parity waits for: the selected step's toggle in memory."""
    path = tiny_export("torchscript", "eager").path
    tl = run_fusion(path, FusionPlan(engine="ort"), num_heads=HEADS, hidden_size=HIDDEN)
    step = [s.step for s in tl.snapshots][-2]
    assert not tl.toggle_ready(step)
    assert tl.toggle_ready("export")  # the export is no step: nothing to wait for
    tl.warm_first = (step,)
    tl.start_warming()
    assert tl.wait_warm(120) and tl.warm_error is None
    tl.stop_warming()
    assert tl.toggle_ready(step)
    before = tl.steps_run
    tl.toggle(step, False)
    assert tl.steps_run == before  # the lookup it promised
    assert tl.toggle_ready(step)  # switching back is the plan shown before
    assert tl.toggle_ready("gelu_approximation") is False  # an opt-in step was never warmed
