"""The app's state and wiring, without a browser, on bert-tiny."""

from __future__ import annotations

import pytest

from workbench.errors import ConfigError
from workbench.ui import compat
from workbench.ui.state import UIState


@pytest.fixture(scope="module")
def app(tiny_export):
    from workbench.ui.app import Workbench

    tiny_export()  # warm the cache
    w = Workbench("bert-tiny", background=False)
    yield w
    w.close()


def test_state_round_trips_and_derives_settings():
    s = UIState(source="bert-tiny", exporter="dynamo", opset=18, engine="onnxscript", seq=64)
    s.set_step_enabled("attention", False)
    s.set_step_enabled("gelu", False)
    s.set_step_enabled("gelu", True)
    assert s.disabled == ["attention"]
    assert UIState.from_dict(s.to_dict()) == s
    assert s.export_config().exporter == "dynamo" and s.export_config().resolved_opset == 18
    assert s.fusion_plan().disabled == frozenset({"attention"}) and s.fusion_plan().engine == "onnxscript"
    assert s.bench_config().seq == 64
    with pytest.raises(ConfigError):
        UIState.from_dict({"nonsense": 1})
    with pytest.raises(ConfigError):
        UIState(view="sideways")


def test_loads_and_draws_the_default_step(app):
    assert app.error is None, app.error
    names = [s.step for s in app.snapshots]
    assert names[0] == "export" and "attention" in names
    # The first view is the Attention step: replaced nodes on the left, the fused node on the right.
    assert names[app.state.step] == "attention"
    assert app.w_step.value == app.state.step
    after = app.fig_after.data
    assert "Attention" in list(after[1].text)
    assert len(after[2].x) >= 1 and len(app.fig_before.data[2].x) > 10  # rings: emitted / replaced
    assert "Softmax" in app.w_counts.value and "Attention" in app.w_counts.value
    assert "parity" in app.w_badges.value
    assert "after fusion" in app.status.value


def test_toggle_calls_the_timeline_and_redraws(app, monkeypatch):
    calls = []
    real = app.timeline.toggle
    monkeypatch.setattr(app.timeline, "toggle", lambda name, on: calls.append((name, on)) or real(name, on))
    nodes_on = app.snapshots[-1].nodes
    counts_on = app.w_counts.value
    app.toggles["attention"].value = False  # what a click does
    assert calls == [("attention", False)]
    assert "attention" in app.state.disabled
    assert app.snapshots[-1].nodes > nodes_on
    assert app.w_counts.value != counts_on
    assert app.timings["toggle_s"] < 5
    app.toggle("attention", True)
    assert app.toggles["attention"].value is True and app.snapshots[-1].nodes == nodes_on


def test_step_slider_view_switch_and_clicks(app):
    app.w_step.value = 0  # the export: before and after are the same model
    assert app.state.step == 0
    assert len(app.fig_after.data[2].x) == 0
    app.select_step([s.step for s in app.snapshots].index("attention"))
    app.w_view.value = "model"
    items = list(app.fig_after.data[1].customdata)
    assert "group:layer 0" in items and "group:layer 1" in items
    app.click("group:layer 1")  # expand
    items2 = list(app.fig_after.data[1].customdata)
    assert "group:layer 1" not in items2 and len(items2) > len(items) - 1
    app.w_view.value = "layer"
    lay = app._layout(app.state.step)
    att = lay.ids[lay.ops.index("Attention")]
    app.click(att, "after")
    # selecting the fused node rings what it replaced in the "before" pane
    assert len(app.fig_after.data[3].x) == 1 and len(app.fig_before.data[3].x) > 10
    app.click(att, "after")
    assert len(app.fig_after.data[3].x) == 0


def test_errors_show_in_the_app_not_as_tracebacks(tiny_export, tmp_path):
    from workbench.ui.app import Workbench

    w = Workbench(str(tmp_path / "missing-model"), background=False)
    assert w.error and "\n" not in w.error
    assert "color:#cf222e" in w.status.value and "Traceback" not in w.status.value
    w.close()
    bad = tmp_path / "junk.onnx"
    bad.write_bytes(b"not a model at all")
    w = Workbench.from_onnx(bad, background=False)
    assert w.error and "junk.onnx" in w.error
    w.close()


def test_report_is_written(app, tmp_path):
    out = app.save_report(tmp_path / "r.html")
    text = out.read_text()
    assert "attention" in text and "bert-tiny" in text
    assert app.save_report(tmp_path / "r.html") is None and "already exists" in app.error


def test_live_benchmark_feeds_the_plots(app):
    app.w_runs.value = 4
    app.w_seq.value = 16
    app.run_benchmark()
    app.wait_benchmark(300)
    assert app.error is None, app.error
    r = app.bench_result
    assert [v.name for v in r.variants] == ["unfused", app.snapshots[-1].step]
    assert all(v.runs == 4 for v in r.variants)
    assert [t.name for t in app.fig_live.data] == ["unfused", app.snapshots[-1].step]
    assert len(app.fig_live.data[0].y) == 4
    assert list(app.fig_pct.data[0].y) == pytest.approx([v.p50_ms for v in r.variants])
    assert "speed-up" in app.w_results.value


def test_compat_names_what_to_install():
    assert compat.problems() == []
    msgs = compat.problems({"ipywidgets": "8.1.5", "jupyterlab_widgets": "1.1.1", "plotly": "6.3.0", "anywidget": None})
    assert any("jupyterlab_widgets>=3,<4" in m for m in msgs)
    assert any("anywidget" in m and "pip install" in m for m in msgs)
    assert compat.problems({"ipywidgets": None, "jupyterlab_widgets": None, "plotly": "5.0", "anywidget": None})[0] \
        .startswith("ipywidgets is not installed")


def test_broken_widget_stack_shows_a_message_not_a_blank(monkeypatch):
    from workbench.ui import app as app_mod

    monkeypatch.setattr(app_mod.compat, "problems", lambda: ["plotly 6.3 draws live figures with anywidget, which is "
                                                             "not installed: install it with `pip install anywidget`"])
    w = app_mod.Workbench("bert-tiny", autorun=False)
    bundle = w._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" not in bundle
    assert "pip install anywidget" in bundle["text/html"] and "pip install anywidget" in bundle["text/plain"]


def test_widget_bundle_explains_itself_in_plain_text(app):
    bundle = app._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert "jupyterlab_widgets" in bundle["text/plain"]


def test_magic_parses_and_registers():
    from IPython.core.interactiveshell import InteractiveShell

    from workbench.ui.magic import parse_line

    assert parse_line("bert-tiny --exporter dynamo --opset 18") == {
        "source": "bert-tiny", "exporter": "dynamo", "attention": "eager", "opset": 18, "engine": "auto"}
    with pytest.raises(ConfigError):
        parse_line("--exporter nope")
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "workbench")
    assert "workbench" in shell.magics_manager.magics["line"]
    res = shell.run_line_magic("workbench", "--exporter nope")
    assert "exporter" in res.data and "<div" in res.data  # an HTML error box, no exception


def test_lab_command_starts_jupyterlab_on_the_notebooks(capsys):
    from workbench.cli import main
    from workbench.cli.lab import notebooks_dir

    assert main(["lab", "--no-browser", "--port", "8899", "--print-command"]) == 0
    out = capsys.readouterr().out
    assert "jupyterlab" in out and f"--ServerApp.root_dir={notebooks_dir()}" in out
    assert "--port=8899" in out and "--no-browser" in out and "--ip=127.0.0.1" in out
    assert main(["lab", "--port", "70000"]) == 2


def test_auto_keeps_its_engine_for_later_toggles(app):
    """Under auto, switching Attention off must not swap engines (and step lists) under the user."""
    assert app.state.engine == "auto"
    engine = app.timeline.engine_used
    steps = [s.step for s in app.snapshots]
    app.toggle("attention", False)
    assert app.timeline.engine_used == engine
    assert [s.step for s in app.snapshots] == [n for n in steps if n != "attention"]
    app.toggle("attention", True)
    assert app.snapshots[-1].fused.get("Attention") == 2


def test_check_parity_turns_every_badge_green(app):
    app.check_parity()
    assert all(sn.parity is not None and sn.parity.ok for sn in app.snapshots[1:])
    import re

    assert "wb-ok" in app.w_badges.value and not re.search(r"wb-bad\b", app.w_badges.value)
    assert "every step within" in app.status.value


def test_constants_are_hidden_by_default_and_can_be_shown(app):
    app.select_step(1)
    ops_hidden = list(app._layout(0).ops)
    assert "Constant" not in ops_hidden
    app.w_constants.value = True
    assert "Constant" in list(app._layout(0).ops)
    app.w_constants.value = False
    assert "Constant" not in list(app._layout(0).ops)


def test_default_off_steps_show_as_off(app):
    assert app.toggles["gelu_approximation"].value is False
    assert app.toggles["attention"].value is True


def test_session_layer_button_shows_what_ort_adds(app):
    app.select_step(len(app.snapshots) - 1)
    app.show_session_layer()
    assert app.session_layer["nodes"] <= app.snapshots[-1].nodes
    assert "ORT session (all) on top of" in app.w_session_out.value


def test_profile_button_fills_the_op_breakdown_and_the_overlay(app):
    app.state.seq, app.state.runs = 16, 3
    if app.widget is not None:
        app.w_seq.value, app.w_runs.value = 16, 3
    app.w_profile.click()
    app.wait_benchmark(300)
    assert app.profiles, app.status.value
    assert len(app.fig_ops.data) >= 1 and any(len(t.x or ()) for t in app.fig_ops.data)
    assert app.w_overlay.value is True
