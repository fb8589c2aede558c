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
        ctl.add_rule(rule)
        assert s.error is None, s.error
        assert s.rules == ("skip_norm_bias",) and s.status.kind == "ok"
        row = next(r for r in s.rows if r["name"] == "skip_norm_bias")
        assert row["on"] and row["here"] == "+4 SkipLayerNormalization" and row["kind"] == "fusion"
        assert "notebook 06" in row["tip"]  # its catalog row, for the checkbox's hover
        # selected: the panes show the layer before and after it, what it replaced and emitted ringed
        assert s.pair.step == "skip_norm_bias" and s.pair.before.highlight and s.pair.after.highlight
        assert "SkipLayerNormalization" in s.pair.after.layout.ops
        ctl.check_parity(wait=True)
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
        ctl.add_rule(solution()())
        assert s.rules == ("skip_norm_bias",) and [r["name"] for r in s.rows].count("skip_norm_bias") == 1
    finally:
        ctl.remove_rule("skip_norm_bias")
    assert s.rules == () and "skip_norm_bias" not in [r["name"] for r in s.rows]


def test_a_rule_that_does_not_say_where_it_runs_is_refused_before_anything_changes(ctl):
    from workbench.fusion import Rule

    class Nowhere(Rule):
        name = "nowhere"
        anchors = ("Add",)

    rows = ctl.state.rows
    with pytest.raises(FusionError, match="after which step"):
        ctl.add_rule(Nowhere())
    assert ctl.state.rows == rows and ctl.state.rules == ()
