"""Notebook 06's exercise: its premise holds on today's export (the onnxscript chain leaves a bias Add before every
SkipLayerNormalization of a TorchScript BERT), and its solution, the notebook's own cell, fuses them all with parity
and says why not, node by node, on the dynamo export where onnxscript folded the bias itself."""

from __future__ import annotations

import pytest

from workbench.config import FusionPlan
from workbench.fusion import Timeline, unregister_rule

LAYERS = 2  # bert-tiny


def solution():
    """The rule class the notebook defines, from its cell (one copy of the solution: the notebook's)."""
    import notebook_runner

    cell = next(c for c in notebook_runner.read("06_write_a_fusion").cells if c.get("id") == "write-your-rule")
    scope: dict = {}
    exec(compile(cell.source, "06_write_a_fusion.ipynb:write-your-rule", "exec"), scope)
    return scope["SkipNormBias"]


def bias_adds_before_norms(snapshot) -> list[str]:
    graph = snapshot.skeleton.graph
    made = {out: node for node in graph.node for out in node.output}
    weights = {t.name for t in graph.initializer}
    return [made[i].name for node in graph.node if node.op_type == "SkipLayerNormalization"
            for i in node.input[:2] if i in made and made[i].op_type == "Add" and set(made[i].input) & weights]


def _timeline(path) -> Timeline:
    tl = Timeline(path, FusionPlan(engine="onnxscript"), num_heads=2, hidden_size=128, persist=False)
    tl.run()
    return tl


def test_premise_the_onnxscript_chain_leaves_the_bias_add_before_every_skip_norm(tiny_export):
    tl = _timeline(tiny_export("torchscript", "eager").path)
    left = bias_adds_before_norms(tl.final)
    assert len(left) == 2 * LAYERS, left  # the attention output's and the feed-forward output's, per layer
    assert tl.final.fused.get("SkipLayerNormalization") == 2 * LAYERS
    # onnxscript's own rule folds the bias where it comes second (the dynamo export): nothing left there
    assert bias_adds_before_norms(_timeline(tiny_export("dynamo", "eager").path).final) == []


def test_the_notebooks_solution_fuses_them_with_parity_and_says_why_not_elsewhere(tiny_export):
    from workbench.fusion import register_rule

    rule = register_rule(solution()())
    try:
        tl = _timeline(tiny_export("torchscript", "eager").path)
        i = [s.step for s in tl.snapshots].index(rule.name)
        step = tl.snapshots[i]
        assert tl.snapshots[i - 1].step == "ort_patterns"
        assert step.counts == {rule.name: 2 * LAYERS} and step.fused_here == {"SkipLayerNormalization": 2 * LAYERS}
        assert bias_adds_before_norms(tl.final) == [] and step.nodes == tl.snapshots[i - 1].nodes - 2 * LAYERS
        # each new norm replaced its own layer's bias Add and norm
        assert sorted(step.diff.layer_of[a] for a in step.diff.added) == [0, 0, 1, 1]
        assert tl.check_parity(i).ok
        dyn = _timeline(tiny_export("dynamo", "eager").path)
        why = next(s for s in dyn.snapshots if s.step == rule.name)
        assert not why.skipped and why.counts == {rule.name: 0}
        assert "has its bias input already" in why.diagnostic and "(layer 0)" in why.diagnostic
    finally:
        unregister_rule(rule.name)


def test_a_graph_without_skip_norms_skips_the_rule_as_not_applicable(tiny_export):
    from workbench.fusion import register_rule

    rule = register_rule(solution()())
    try:
        tl = Timeline(tiny_export("torchscript", "eager").path,
                      FusionPlan(engine="onnxscript", disabled=frozenset({"skip_layer_norm"})), persist=False)
        snap = next(s for s in tl.run() if s.step == rule.name)
        assert snap.skipped == "nothing to fuse: no SkipLayerNormalization node in the graph; the step was not run."
    finally:
        unregister_rule(rule.name)


@pytest.fixture(autouse=True)
def _no_rule_left_behind():
    yield
    from workbench.fusion import BY_NAME

    assert "skip_norm_bias" not in BY_NAME


def test_the_prepared_folder_covers_notebook_06(tmp_path, monkeypatch):
    """``workbench prepare`` for notebook 06: the app's timelines (both exporters, the onnxscript chain) read back
    without an engine step, parity of every snapshot found, and the ablation's model without the rule built."""
    from workbench.config import ExportConfig
    from workbench.export import export
    from workbench.fusion import disk, register_rule, timeline_store
    from workbench.measure.variants.models import fuse_bert
    from workbench.models import resolve
    from workbench.workshop.prepare import STAGES, write_a_fusion

    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path / "cache"))
    for name in (timeline_store.ENV_ROOT, timeline_store.ENV_SWITCH):
        monkeypatch.delenv(name, raising=False)
    assert ("06 write a fusion", write_a_fusion) in STAGES
    src = resolve("bert-tiny")
    write_a_fusion(src, lambda line: None)
    assert disk.flush(120)
    plan = FusionPlan(engine="onnxscript")
    for exporter in ("torchscript", "dynamo"):
        tl = Timeline(export(src, ExportConfig(exporter=exporter)).path, plan, num_heads=src.num_heads,
                      hidden_size=src.hidden_size, num_layers=src.num_layers)
        snaps = tl.run()
        assert tl.steps_run == 0, exporter
        if exporter == "torchscript":  # the app's first export: every snapshot's parity found before
            assert all(s.parity is not None and s.parity.ok for s in snaps[1:])
    ts = export(src, ExportConfig(exporter="torchscript")).path
    without = fuse_bert(ts, num_heads=src.num_heads, hidden_size=src.hidden_size, plan=plan)
    rule = register_rule(solution()())
    try:  # the participant's plan with the rule switched off is the prepared model, not a new one
        off = FusionPlan(engine="onnxscript", disabled=frozenset({rule.name}))
        assert fuse_bert(ts, num_heads=src.num_heads, hidden_size=src.hidden_size, plan=off) == without
    finally:
        unregister_rule(rule.name)


def test_a_slow_rule_fails_its_step_under_the_time_limit_and_runs_again_under_a_larger_one(tiny_export, tmp_path,
                                                                                          monkeypatch):
    """A failed step is kept in memory only: a timeline opened again with a larger limit runs the rule, never
    reads the failure (or the steps after it) back from disk."""
    import time

    from workbench.fusion import Rule, register_rule
    from workbench.fusion.scheduler import rule_time_limit, set_rule_time_limit

    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path / "cache"))

    class Slow(Rule):
        name = "slow_rule"
        after = {"onnxscript": "ort_patterns"}
        anchors = ("SkipLayerNormalization",)

        def match(self, node):
            calls.append(node.name)
            t = time.perf_counter()
            while time.perf_counter() - t < 0.4:  # Python code: stoppable
                pass
            return None

    calls: list[str] = []
    path = tiny_export("torchscript", "eager").path
    before = rule_time_limit()
    register_rule(Slow())
    try:
        set_rule_time_limit(0.2)
        tl = Timeline(path, FusionPlan(engine="onnxscript"), num_heads=2, hidden_size=128, persist=True)
        tl.run()
        slow = next(s for s in tl.snapshots if s.step == "slow_rule")
        assert slow.failed.startswith("rule slow_rule did not finish within 0.2 s") and slow.diff.empty
        assert tl.final.fused.get("SkipLayerNormalization") == 2 * LAYERS  # the later steps ran
        set_rule_time_limit(30)
        calls.clear()
        again = Timeline(path, FusionPlan(engine="onnxscript"), num_heads=2, hidden_size=128, persist=True)
        again.run()
        assert next(s for s in again.snapshots if s.step == "slow_rule").failed == ""
        assert len(calls) == 2 * LAYERS  # run again, not read back from disk
        assert [s.nodes for s in again.snapshots] == [s.nodes for s in tl.snapshots]
    finally:
        set_rule_time_limit(before)
        unregister_rule("slow_rule")
