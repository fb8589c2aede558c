"""What makes toggles fast must not change what the engines produce (bert-tiny, real engines)."""

from __future__ import annotations

import hashlib

import onnx
import pytest
from onnx import numpy_helper

from workbench.concurrency import engine_turn, foreground
from workbench.config import FusionPlan
from workbench.fusion import Timeline, run_fusion
from workbench.fusion.engine_types import EngineContext
from workbench.fusion.engines import engine_steps, one_shot
from workbench.fusion.ort_engine import ort_anchors
from workbench.fusion.scheduler import FusionScheduler
from workbench.fusion.snapshot_weights import WeightStore, is_stub, reading_from

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
    with reading_from(store):  # what the runner opens around each engine step
        np.testing.assert_array_equal(numpy_helper.to_array(work.graph.initializer[0]), numpy_helper.to_array(big))
        small = numpy_helper.from_array(np.ones(3, dtype=np.float32))
        np.testing.assert_array_equal(numpy_helper.to_array(small), np.ones(3, dtype=np.float32))
    with pytest.raises(Exception):  # outside a step a stub has no values: onnx's own function, unpatched
        numpy_helper.to_array(work.graph.initializer[0])


def _scheduled(path, plan: FusionPlan) -> FusionScheduler:
    """A scheduler of a timeline that computes every step (nothing read back from an earlier run's disk store)."""
    sch = FusionScheduler(Timeline(path, plan, num_heads=HEADS, hidden_size=HIDDEN, persist=False))
    sch.run()
    return sch


def test_background_warming_precomputes_every_single_toggle(tiny_export):
    path = tiny_export("torchscript", "eager").path
    sch = _scheduled(path, FusionPlan(engine="ort"))
    tl = sch.timeline
    first = [s.step for s in tl.snapshots]
    sch.start_warming()
    assert sch.wait_warm(120) and sch.warm_error is None and sch.warm_s is not None
    sch.stop_warming()
    assert sch.warmed == first[1:]  # one toggle per step, in chain order
    computed = tl.steps_run
    for step in first[1:]:
        off = sch.toggle(step, False)
        assert step not in [s.step for s in off]
        sch.toggle(step, True)
    assert tl.steps_run == computed  # every toggle was a cache lookup
    assert [s.step for s in tl.snapshots] == first


def test_a_toggle_during_warming_cancels_it_and_is_exact(tiny_export):
    path = tiny_export("torchscript", "sdpa").path
    sch = _scheduled(path, FusionPlan(engine="auto"))
    sch.start_warming()
    snaps = sch.toggle("skip_layer_norm", False)  # cancels the warm-up, then starts it again for the new plan
    fresh = run_fusion(path, FusionPlan(engine="auto", disabled={"skip_layer_norm"}), num_heads=HEADS,
                       hidden_size=HIDDEN)
    assert [(s.step, s.nodes, s.fused) for s in snaps] == [(s.step, s.nodes, s.fused) for s in fresh.snapshots]
    assert [s.diagnostic for s in snaps] == [s.diagnostic for s in fresh.snapshots]
    assert sch.warming or sch.warm_s is not None, sch.warm_error
    sch.stop_warming()
    assert not sch.warming
    assert sch.warm_error is None


def test_warm_up_computes_the_selected_steps_toggle_first(tiny_export):
    """The app puts the step the user is looking at first: its checkbox is the likely first click."""
    path = tiny_export("torchscript", "eager").path
    sch = _scheduled(path, FusionPlan(engine="ort"))
    steps = [s.step for s in sch.timeline.snapshots[1:]]
    late = steps[-2]
    sch.warm_first = (late,)
    sch.start_warming()
    assert sch.wait_warm(120) and sch.warm_error is None
    sch.stop_warming()
    assert sch.warmed[:2] == [late, steps[0]], sch.warmed


def test_background_work_steps_aside_while_a_toggle_waits(tiny_export):
    """Warm-up and auto's engine comparison start no engine step while a toggle waits for the turn, so a
    click waits for the one step in flight at most (not for every background thread's next step)."""
    import threading
    import time

    path = tiny_export("torchscript", "eager").path
    sch = _scheduled(path, FusionPlan(engine="ort"))
    tl = sch.timeline
    done: dict = {}
    compare = threading.Thread(target=lambda: done.setdefault("runs", sch.compare_engines()))
    before = tl.steps_run
    with foreground():  # as while a toggle waits for the engine turn
        sch.start_warming()
        compare.start()
        time.sleep(0.5)
        assert tl.steps_run == before and sch.warmed == []  # neither the warm-up nor the comparison took a step
    compare.join(120)
    assert sch.wait_warm(120) and sch.warm_error is None
    sch.stop_warming()
    assert set(done["runs"]) == {"ort", "onnxscript"} and tl.steps_run > before
    assert [s.step for s in done["runs"]["ort"]] == [s.step for s in tl.snapshots[1:]]  # the plan shown, unchanged


def test_a_warmed_toggle_needs_no_engine_turn(tiny_export):
    """A toggle whose every step is in memory returns while a background engine step holds the turn
    (on bert-base such a step takes seconds: the click would wait for it)."""
    import threading

    path = tiny_export("torchscript", "eager").path
    sch = _scheduled(path, FusionPlan(engine="ort"))
    sch.start_warming()
    assert sch.wait_warm(120)
    sch.stop_warming()
    step = [s.step for s in sch.timeline.snapshots][-2]
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with engine_turn():  # what a background engine step does
            held.set()
            release.wait(120)

    threading.Thread(target=hold, daemon=True).start()
    assert held.wait(30)
    result: dict = {}
    try:
        t = threading.Thread(target=lambda: result.setdefault("snaps", sch.toggle(step, False)), daemon=True)
        t.start()
        t.join(60)
        assert "snaps" in result, "the warmed toggle waited for the engine turn"
        assert step not in [s.step for s in result["snaps"]]
    finally:
        release.set()
    fresh = run_fusion(path, FusionPlan(engine="ort", disabled={step}), num_heads=HEADS, hidden_size=HIDDEN)
    assert [(s.step, s.nodes) for s in result["snaps"]] == [(s.step, s.nodes) for s in fresh.snapshots]


def test_toggle_ready_says_when_a_click_is_a_lookup(tiny_export):
    """What the app's background parity waits for: the selected step's toggle in memory."""
    path = tiny_export("torchscript", "eager").path
    sch = _scheduled(path, FusionPlan(engine="ort"))
    tl = sch.timeline
    step = [s.step for s in tl.snapshots][-2]
    assert not sch.toggle_ready(step)
    assert sch.toggle_ready("export")  # the export is no step: nothing to wait for
    sch.warm_first = (step,)
    sch.start_warming()
    assert sch.wait_warm(120) and sch.warm_error is None
    sch.stop_warming()
    assert sch.toggle_ready(step)
    before = tl.steps_run
    sch.toggle(step, False)
    assert tl.steps_run == before  # the lookup it promised
    assert sch.toggle_ready(step)  # switching back is the plan shown before
    assert sch.toggle_ready("gelu_approximation") is False  # an opt-in step was never warmed


def test_the_plan_alone_says_what_is_opted_in(tiny_export):
    """An opt-in step switched on and off again is off in the plan the timeline runs, and the plan says so."""
    path = tiny_export("torchscript", "eager").path
    sch = _scheduled(path, FusionPlan(engine="ort"))
    on = sch.toggle("gelu_approximation", True)
    assert "gelu_approximation" in [s.step for s in on] and "gelu_approximation" in sch.timeline.plan.opted_in
    off = sch.toggle("gelu_approximation", False)
    assert "gelu_approximation" not in [s.step for s in off] and not sch.timeline.enabled("gelu_approximation")
    assert "gelu_approximation" not in sch.timeline.plan.opted_in


def test_stop_warming_gives_up_after_its_stated_bound_in_one_line(tiny_export, monkeypatch, capsys):
    """A warm-up held by a participant's rule still in ``match``: ``stop_warming()`` waits at most
    $WORKBENCH_STOP_WARMING_WAIT_S (else STOP_WARMING_WAIT_S), then says so in one line and returns False."""
    import time

    from workbench.concurrency import new_flag
    from workbench.fusion import Rule, register_rule, unregister_rule
    from workbench.fusion.scheduler import rule_time_limit, set_rule_time_limit

    slow, entered, release = new_flag(), new_flag(), new_flag()

    class Held(Rule):
        name = "held_rule"
        after = {"onnxscript": "ort_patterns"}
        anchors = ("SkipLayerNormalization",)

        def match(self, node):
            if slow.is_set():
                entered.set()
                t = time.monotonic()
                while not release.is_set() and time.monotonic() - t < 60:  # Python code: a step in flight
                    pass
            return None

    before = rule_time_limit()
    register_rule(Held())
    try:
        set_rule_time_limit(120)
        sch = _scheduled(tiny_export("torchscript", "eager").path, FusionPlan(engine="onnxscript"))
        slow.set()
        sch.start_warming()
        assert entered.wait(120), "the warm-up reached the rule"
        monkeypatch.setenv("WORKBENCH_STOP_WARMING_WAIT_S", "0.3")
        capsys.readouterr()
        t = time.monotonic()
        assert sch.stop_warming() is False
        assert time.monotonic() - t < 10
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "gave up after 0.3 s waiting for the fusion warm-up to stop" in err[0], err
        release.set()
        assert sch.wait_warm(120) and not sch.warming
        assert sch.stop_warming() is True
    finally:
        release.set()
        set_rule_time_limit(before)
        unregister_rule("held_rule")
