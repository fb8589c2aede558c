"""A fusion rule added to the open app (``app.add_rule``): a new step with its checkbox, selected, its graph before
and after with rings, its parity; switched off and on; taken out again (controller and state, no widgets)."""

from __future__ import annotations

import pytest

from workbench.errors import FusionError
from workbench.ui.state import AppState


def solution():
    """The rule class notebook 06 defines, from its cell (as ``tests/fusion/test_write_a_fusion.py`` reads it)."""
    import notebook_runner

    cell = next(c for c in notebook_runner.read("06_write_a_fusion").cells if c.get("id") == "write-your-rule")
    scope: dict = {}
    exec(compile(cell.source, "06_write_a_fusion.ipynb:write-your-rule", "exec"), scope)
    return scope["SkipNormBias"]


@pytest.fixture(scope="module")
def ctl(tiny_export):
    from workbench.ui.controller import Controller

    tiny_export("torchscript", "eager")
    c = Controller(AppState(source="bert-tiny", engine="onnxscript"), background=False, auto_parity=False)
    c.load()
    yield c
    c.close()


def test_an_added_rule_is_a_new_step_shown_at_once(ctl):
    s = ctl.state
    assert "skip_norm_bias" not in [r["name"] for r in s.rows]
    rule = solution()()
    try:
        ctl.rules.add_rule(rule)
        assert s.error is None, s.error
        assert s.rules == ("skip_norm_bias",) and s.status.kind == "ok"
        row = next(r for r in s.rows if r["name"] == "skip_norm_bias")
        assert row["on"] and row["here"] == "+4 SkipLayerNormalization" and row["kind"] == "fusion"
        assert "notebook 06" in row["tip"]  # its catalog row, for the checkbox's hover
        # selected: the panes show the layer before and after it, what it replaced and emitted ringed
        assert s.pair.step == "skip_norm_bias" and s.pair.before.highlight and s.pair.after.highlight
        assert "SkipLayerNormalization" in s.pair.after.layout.ops
        ctl.parity.check(wait=True)
        assert next(r for r in s.rows if r["name"] == "skip_norm_bias")["parity"] is True
        # its checkbox: off, the step is not run and the bias Adds come back; on again, a lookup
        adds = s.snapshots[-1].histogram.get("Add", 0)
        ctl.toggle("skip_norm_bias", False)
        off = next(r for r in s.rows if r["name"] == "skip_norm_bias")
        assert not off["on"] and off["index"] is None
        assert s.snapshots[-1].histogram.get("Add", 0) == adds + 4
        ctl.toggle("skip_norm_bias", True)
        assert next(r for r in s.rows if r["name"] == "skip_norm_bias")["here"] == "+4 SkipLayerNormalization"
        # the same rule added again (after editing the cell) replaces the first
        ctl.rules.add_rule(solution()())
        assert s.rules == ("skip_norm_bias",) and [r["name"] for r in s.rows].count("skip_norm_bias") == 1
    finally:
        ctl.rules.remove_rule("skip_norm_bias")
    assert s.rules == () and "skip_norm_bias" not in [r["name"] for r in s.rows]


def test_a_rule_that_does_not_say_where_it_runs_is_refused_before_anything_changes(ctl):
    from workbench.fusion import Rule

    class Nowhere(Rule):
        name = "nowhere"
        anchors = ("Add",)

    rows = ctl.state.rows
    with pytest.raises(FusionError, match="after which step"):
        ctl.rules.add_rule(Nowhere())
    assert ctl.state.rows == rows and ctl.state.rules == ()


# ------------------------------------------------------------------ a participant's rule cannot break the room
def _anchored_rule(name: str, body):
    """A real rule of notebook 06's shape (after ort_patterns, anchored on SkipLayerNormalization) whose
    ``match`` is ``body(node)``."""
    from workbench.fusion import Rule

    return type(name.title().replace("_", ""), (Rule,), {
        "name": name, "after": {"onnxscript": "ort_patterns"}, "anchors": ("SkipLayerNormalization",),
        "match": lambda self, node: body(node), "rewrite": lambda self, m: None})()


def _row(ctl, name):
    return next(r for r in ctl.state.rows if r["name"] == name)


@pytest.mark.parametrize("bad,message", [
    (object(), "instance of a workbench.fusion.Rule subclass, not object"),
    ("skip_norm_bias", "not str"),
    (None, "not NoneType"),
])
def test_what_is_not_a_rule_is_refused_in_one_line_and_the_app_goes_on(ctl, bad, message):
    rows, status = ctl.state.rows, ctl.state.status
    with pytest.raises(FusionError, match=message) as e:
        ctl.rules.add_rule(bad)
    assert "\n" not in str(e.value) and ctl.state.status == status  # raised at the call: the app is as it was
    assert ctl.state.rows == rows and ctl.state.rules == ()
    ctl.load()  # the next load is not broken by it
    assert ctl.state.error is None and ctl.state.rows == rows


def test_the_rule_class_instead_of_an_instance_is_refused_saying_what_to_write(ctl):
    with pytest.raises(FusionError, match=r"SkipNormBias is a Rule, not a rule object.*SkipNormBias\(\)"):
        ctl.rules.add_rule(solution())
    assert ctl.state.rules == ()


def test_a_rule_named_like_a_built_in_step_is_refused_and_the_built_in_stays(ctl):
    attention = {r["name"]: r["here"] for r in ctl.state.rows}
    rule = _anchored_rule("softmax_attention", lambda node: None)
    with pytest.raises(FusionError, match="'softmax_attention' is one of the workbench's own steps"):
        ctl.rules.add_rule(rule)
    ctl.load()
    assert {r["name"]: r["here"] for r in ctl.state.rows} == attention and ctl.state.rules == ()
    with pytest.raises(FusionError, match="own rules; switch it off"):
        ctl.rules.remove_rule("softmax_attention")
    with pytest.raises(FusionError, match="no rule named 'never_added' was added"):
        ctl.rules.remove_rule("never_added")


def test_a_rule_whose_match_never_returns_fails_its_step_in_the_time_limit_and_toggles_go_on(ctl):
    import threading
    import time

    def forever(node):
        while True:
            pass

    limit = ctl.rules.rule_time_limit_s
    assert 1 <= limit <= 10  # a few seconds by default
    ctl.rules.rule_time_limit_s = 0.5
    try:
        t0 = time.perf_counter()
        ctl.rules.add_rule(_anchored_rule("spin_forever", forever))
        assert time.perf_counter() - t0 < 30
        s = ctl.state
        assert s.error is None, s.error
        row = _row(ctl, "spin_forever")
        assert row["failed"].startswith("rule spin_forever did not finish within 0.5 s")
        assert "it was stopped" in row["failed"] and row["why"].startswith("failed: ")
        assert row["here"] == "" and row["nodes"] == _row(ctl, "ort_patterns")["nodes"]  # the graph as it was
        assert any(r["here"] for r in s.rows if r["name"] != "spin_forever")  # the other steps ran
        # the rule's thread was stopped, not left spinning
        time.sleep(0.2)
        assert not [t for t in threading.enumerate() if t.name == "workbench-rule spin_forever"]
        # a toggle of another step (before the rule: the chain runs through it again) does not wait for it
        t0 = time.perf_counter()
        ctl.toggle("cse", False)
        took = time.perf_counter() - t0
        assert s.error is None and s.status.kind == "ok" and not _row(ctl, "cse")["on"], s.status
        assert took < 0.5 + 5, took
        assert _row(ctl, "spin_forever")["failed"].endswith("or raise app.rule_time_limit_s")
        ctl.toggle("cse", True)
        assert _row(ctl, "cse")["on"] and s.error is None
    finally:
        ctl.rules.rule_time_limit_s = limit
        ctl.rules.remove_rule("spin_forever")
    assert "spin_forever" not in [r["name"] for r in ctl.state.rows] and ctl.state.error is None


def test_a_rule_blocked_outside_python_is_abandoned_and_one_that_raises_fails_only_its_step(ctl):
    import time

    limit = ctl.rules.rule_time_limit_s
    ctl.rules.rule_time_limit_s = 0.3
    try:
        ctl.rules.add_rule(_anchored_rule("sleepy", lambda node: time.sleep(2)))
        assert "keeps running in the background (its CPU is not reclaimed)" in _row(ctl, "sleepy")["failed"]
        ctl.rules.add_rule(_anchored_rule("broken", lambda node: node.no_such_thing))
        failed = _row(ctl, "broken")["failed"]
        assert failed.startswith("rule broken raised AttributeError") and "test_add_rule.py, line" in failed
        assert ctl.state.error is None and ctl.state.rules == ("sleepy", "broken")
    finally:
        ctl.rules.rule_time_limit_s = limit
        for name in ("sleepy", "broken"):
            if name in ctl.state.rules:
                ctl.rules.remove_rule(name)


@pytest.mark.parametrize("bad", [0, -1, "soon", float("nan"), True])
def test_the_rule_time_limit_takes_only_a_positive_number_of_seconds(ctl, bad):
    from workbench.errors import WorkbenchError

    limit = ctl.rules.rule_time_limit_s
    with pytest.raises(WorkbenchError, match="positive number of seconds"):
        ctl.rules.rule_time_limit_s = bad
    assert ctl.rules.rule_time_limit_s == limit
