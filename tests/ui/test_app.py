"""The app's state and wiring, without a browser, on bert-tiny."""

from __future__ import annotations

import html

import pytest

from workbench.errors import ConfigError, OutputPathError
from workbench.ui import compat
from workbench.ui.state import AppState


@pytest.fixture(scope="module")
def app(tiny_export):
    from workbench.ui.app import Workbench

    tiny_export()  # warm the cache
    w = Workbench("bert-tiny", background=False)
    yield w
    w.close()


def test_state_round_trips_and_derives_settings():
    s = AppState(source="bert-tiny", exporter="dynamo", opset=18, engine="onnxscript", seq=64)
    s.set_step_enabled("attention", False)
    s.set_step_enabled("gelu", False)
    s.set_step_enabled("gelu", True)
    assert s.disabled == ["attention"]
    assert AppState.from_dict(s.to_dict()) == s
    assert s.export_config().exporter == "dynamo" and s.export_config().resolved_opset == 18
    assert s.fusion_plan().disabled == frozenset({"attention"}) and s.fusion_plan().engine == "onnxscript"
    assert s.bench_config().seq == 64
    with pytest.raises(ConfigError):
        AppState.from_dict({"nonsense": 1})
    with pytest.raises(ConfigError):
        AppState(view="sideways")


def test_loads_and_draws_the_default_step(app):
    assert app.error is None, app.error
    names = [s.step for s in app.snapshots]
    assert names[0] == "export" and "attention" in names
    # The first view is the Attention step: replaced nodes on the left, the fused node on the right.
    assert names[app.state.step] == "attention"
    assert app.fusion.w_step.value == app.state.step
    after = app.after.graph
    assert "Attention" in [t.strip() for t in after.labels]
    assert len(after.highlight) >= 1 and len(app.before.graph.highlight) > 10  # rings: emitted / replaced
    assert "Softmax" in app.fusion.w_counts.value and "Attention" in app.fusion.w_counts.value
    rows = app.step_rows()
    assert [r["name"] for r in rows if r["name"] == "attention"] and rows[0]["kind"] in ("fusion", "cleanup")
    att = next(r for r in rows if r["name"] == "attention")
    assert att["here"] == "+2 Attention" and att["nodes"] == app.snapshots[att["index"]].nodes
    # one compact grid: a row per step of the engine in use, grouped, with a checkbox and a parity badge
    assert "wb-row-sel" in app.fusion.rows["attention"][0]._dom_classes
    assert "Fusions" in str([getattr(c, "value", "") for c in app.fusion.w_rows.children])
    assert "Graph clean-ups" in str([getattr(c, "value", "") for c in app.fusion.w_rows.children])
    assert "wb-badge" in app.fusion.rows["attention"][3].value
    # steps the engine in use does not run have no row (onnxscript's steps under ort)
    assert app.timeline.engine_used == "ort" and "pre_optimize" not in app.fusion.rows
    # the model bar says which engine auto chose, and why
    assert app.model_bar.w_engine_note.value and "auto → ORT transformers optimizer (fuses 2 Attention; onnxscript fuses 2)" \
        in app.model_bar.w_engine_note.value
    assert "after fusion" in app.model_bar.status.value


def test_toggle_calls_the_scheduler_and_redraws(app, monkeypatch):
    calls = []
    sch = app.controller.scheduler
    real = sch.toggle
    monkeypatch.setattr(sch, "toggle", lambda name, on: calls.append((name, on)) or real(name, on))
    nodes_on = app.snapshots[-1].nodes
    counts_on = app.fusion.w_counts.value
    app.fusion.toggles["attention"].value = False  # what a click does
    assert calls == [("attention", False)]
    assert "attention" in app.state.disabled
    assert app.snapshots[-1].nodes > nodes_on
    assert app.fusion.w_counts.value != counts_on
    app.toggle("attention", True)
    assert app.fusion.toggles["attention"].value is True and app.snapshots[-1].nodes == nodes_on


def test_step_slider_view_switch_and_clicks(app):
    app.fusion.w_step.value = 0  # the export: before and after are the same model
    assert app.state.step == 0
    assert len(app.after.graph.highlight) == 0
    app.select_step([s.step for s in app.snapshots].index("attention"))
    app.view_bar.w_view.value = "model"
    items = app.after.graph.ids
    assert "group:layer 0" in items and "group:layer 1" in items
    app.click("group:layer 1")  # expand
    items2 = app.after.graph.ids
    assert "group:layer 1" not in items2 and len(items2) > len(items) - 1
    app.view_bar.w_view.value = "layer"
    lay = app.state.pair.after.layout
    att = lay.ids[lay.ops.index("Attention")]
    app.click(att, "after")
    # selecting the fused node rings what it replaced in the "before" pane
    assert len(app.after.graph.selected) == 1 and len(app.before.graph.selected) > 10
    app.click(att, "after")
    assert len(app.after.graph.selected) == 0


def test_errors_show_in_the_app_not_as_tracebacks(tiny_export, tmp_path):
    from workbench.ui.app import Workbench

    w = Workbench(str(tmp_path / "missing-model"), background=False)
    assert w.error and "\n" not in w.error
    assert "color:#cf222e" in w.model_bar.status.value and "Traceback" not in w.model_bar.status.value
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
    with pytest.raises(OutputPathError, match="already exists"):  # refused at the call: never overwritten
        app.save_report(tmp_path / "r.html")
    assert out.read_text() == text


def test_live_benchmark_feeds_the_plots(app):
    app.profile_panel.w_runs.value = 4
    app.profile_panel.w_seq.value = 16
    app.run_benchmark()
    app.wait_benchmark(300)
    assert app.error is None, app.error
    r = app.bench_result
    # The default comparison: unfused against fused (all steps), stable keys in the result,
    # the words a user understands on screen.
    from workbench.measure.variants.gpu_column import device_plan, gpu_key
    from workbench.measure.variants.labels import on_gpu
    from workbench.ort.gpu import gpu_status

    assert [v.name for v in r.variants if not on_gpu(v.name)] == ["unfused", "fused"]
    # the GPU column: the GPU variants where a GPU is usable, none here without one (never a CPU figure)
    assert [v.name for v in r.variants if on_gpu(v.name)] == [gpu_key(n) for n in device_plan(gpu_status()).gpu]
    assert all(v.runs == 4 for v in r.variants)
    assert [t.name for t in app.profile_panel.fig_live.data][:2] == ["ONNX Runtime, no optimizations",
                                                                     "fused (all steps)"]
    assert len(app.profile_panel.fig_live.data[0].y) == 4
    assert list(app.profile_panel.fig_pct.data[0].y) == pytest.approx([v.p50_ms for v in r.variants])
    assert "speed-up" in app.profile_panel.w_results.value
    # A bound is shown as a figure when it is possible, and not at all when a disturbed probe put it above
    # the measured time (it is then unknown).
    if r.floor_ms:
        assert f"hardware floor {r.floor_ms:.2f} ms" in app.profile_panel.w_results.value
    if r.matmul_bound_ms:
        assert f"weights read from memory: {r.matmul_bound_ms:.2f} ms" in app.profile_panel.w_results.value
    else:
        assert "weights read from memory:" not in app.profile_panel.w_results.value


def test_latency_panel_says_why_there_is_no_gpu_column(app):
    """Without a usable GPU the latency panel says why in one line (the CUDA the installed onnxruntime-gpu
    needs, read from the package), and offers no GPU; with one, what its GPU column times."""
    from workbench.ort.cuda_build import cuda_build
    from workbench.ort.gpu import gpu_status

    ok, why = gpu_status()
    note = app.profile_panel.w_gpu.value
    if ok:
        assert "GPU column: fused, fp16" in note
        return
    assert html.escape(f"no GPU column: {why}") in note
    assert cuda_build().words() in note and app.state.gpu_note.count("\n") == 0
    # no GPU is offered as a provider either (a CUDA session that lands on the CPU is refused: test_gpu.py)
    assert list(app.profile_panel.w_provider.options) == ["cpu"]


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


def test_lab_command_starts_jupyterlab_on_the_notebooks(capsys, tmp_path):
    from workbench.cli import main

    assert main(["lab", "--no-browser", "--port", "8899", "--print-command", "--folder", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "jupyterlab" in out and f"--ServerApp.root_dir={tmp_path.resolve()}" in out
    assert (tmp_path / "01_fusion_tour.ipynb").is_file()  # the notebooks, copied there
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

    badges = "".join(row[3].value for name, row in app.fusion.rows.items() if name != "__export__")
    assert "wb-ok" in badges and not re.search(r"wb-bad\b", badges)
    assert "every step within" in app.model_bar.status.value


def test_constants_are_hidden_by_default_and_can_be_shown(app):
    app.select_step(1)
    ops_hidden = list(app.state.pair.before.layout.ops)
    assert "Constant" not in ops_hidden
    app.view_bar.w_constants.value = True
    assert app.state.constants and "Constant" in list(app.state.pair.before.layout.ops)
    app.view_bar.w_constants.value = False
    assert "Constant" not in list(app.state.pair.before.layout.ops)


def test_default_off_steps_show_as_off(app):
    assert app.fusion.toggles["gelu_approximation"].value is False
    assert app.fusion.toggles["attention"].value is True


def test_session_layer_button_shows_what_ort_adds(app):
    app.select_step(len(app.snapshots) - 1)
    app.show_session_layer()
    assert app.session_layer["nodes"] <= app.snapshots[-1].nodes
    assert "ORT session (all) on top of" in app.fusion.w_session_out.value


def test_profile_button_fills_the_op_breakdown_and_the_overlay(app):
    app.state.seq, app.state.runs = 16, 3
    if app.widget is not None:
        app.profile_panel.w_seq.value, app.profile_panel.w_runs.value = 16, 3
    app.profile_panel.w_profile.click()
    app.wait_benchmark(300)
    assert app.profiles, app.model_bar.status.value
    assert len(app.profile_panel.fig_ops.data) >= 1 and any(len(t.x or ()) for t in app.profile_panel.fig_ops.data)
    assert app.view_bar.w_overlay.value is True
    assert app.state.kernels == {} and app.profile_panel.w_kernels.value == ""  # a CPU profile: no GPU kernels


def test_clicking_a_row_selects_its_snapshot_and_off_steps_cannot_be_selected(app):
    names = [s.step for s in app.snapshots]
    app.fusion.rows["gelu"][2].click()
    assert app.state.step == names.index("gelu") and app.fusion.w_step.value == app.state.step
    assert "wb-row-sel" in app.fusion.rows["gelu"][0]._dom_classes
    assert "wb-row-sel" not in app.fusion.rows["attention"][0]._dom_classes
    assert app.fusion.rows["gelu_approximation"][2].disabled  # off by default: no snapshot to show
    app.fusion.rows["__export__"][0].children[1].click()
    assert app.state.step == 0
    app.select_step(names.index("attention"))


def test_a_row_explains_a_fusion_that_fell_short(app):
    """With Attention off, the row of the step says why nothing fused there; with it on, no note."""
    assert not next(r for r in app.step_rows() if r["name"] == "attention")["why"]
    app.toggle("attention", False)
    try:
        rows = {r["name"]: r for r in app.step_rows()}
        assert rows["attention"]["index"] is None and rows["attention"]["nodes"] is None
        # the view stays where Attention was: the next step that ran after it
        order = app.timeline.steps()
        nxt = next(n for n in order[order.index("attention") + 1:] if rows.get(n, {}).get("index") is not None)
        assert app.snapshots[app.state.step].step == nxt
        assert "wb-row-off" in app.fusion.rows["attention"][0]._dom_classes
        assert "off" in app.fusion.rows["attention"][3].value
    finally:
        app.toggle("attention", True)
    assert "wb-row-off" not in app.fusion.rows["attention"][0]._dom_classes
    assert app.snapshots[app.state.step].step == "attention"  # back to the step the user was looking at


def test_engine_summary_names_the_choice():
    from workbench.ui.steps.rows import engine_summary

    both = {"ort": {"Attention": 12}, "onnxscript": {"Attention": 0}}
    assert engine_summary("auto", "ort", both) == ("auto → ORT transformers optimizer (fuses 12 Attention; "
                                                   "onnxscript fuses 0), kept for toggles")
    assert engine_summary("onnxscript", "onnxscript", {"onnxscript": {"MultiHeadAttention": 12}}) == \
        "engine: onnxscript rules (fuses 12 Attention)"
    assert engine_summary("auto", "", {}) == ""


def test_parity_runs_in_the_background_and_drops_stale_results(tiny_export):
    """After a run the badges fill by themselves; a toggle meanwhile restarts the pass on the new snapshots."""
    from workbench.ui.app import Workbench

    tiny_export()
    w = Workbench("bert-tiny", background=True)
    try:
        w.wait(300)
        assert w.error is None, w.error
        w.toggle("attention", False)  # while the first pass runs
        w.wait(300)
        assert w.wait_parity(300)
        assert all(sn.parity is not None and sn.parity.ok for sn in w.snapshots[1:])
        assert "attention" not in [s.step for s in w.snapshots]
        shown = {r["name"] for r in w.step_rows() if r["index"] is not None and r["applies"]}
        badges = [w.fusion.rows[n][3].value for n in shown]
        assert all("wb-ok" in b for b in badges), badges  # every step that ran: green (the folded ones say why)
        assert w.error is None
        w.toggle("attention", True)
        w.wait(300)
        w._stop_threads(timeout=30)  # what the kernel's exit does: no thread left inside ONNX Runtime
        assert not w.controller.runner.running("parity")
        assert not w.controller.scheduler.warming
    finally:
        w.close()


def test_pane_width_comes_from_one_value_and_labels_fit(app):
    from workbench.viz.graph import CHAR_PX

    assert app.after.graph.scene["width"] == app.state.pane_width
    assert app.after.widget.layout.width == f"{app.state.pane_width + 4}px"
    # every drawn label ends before the next node of its row
    fig, lay = app.before.graph, app.state.pair.before.layout
    xr, width = fig.scene["xrange"], app.state.pane_width - 20
    px = width / (xr[1] - xr[0])
    rows = {}
    # a node's label runs right of it; a marker's sits centred above or below it (labelpos "t"/"b"), off the row
    pos = fig.scene["nodes"]["labelpos"]
    for x, y, t, p in zip(lay.x, lay.y, fig.labels, pos):
        rows.setdefault(y, []).append((x, t if p == "r" else ""))
    for items in rows.values():
        items.sort()
        for (x, t), (x2, _) in zip(items, items[1:]):
            if t:
                assert (x2 - x) * px >= 9 + CHAR_PX * len(t), (t, x, x2)
    # before and after share one vertical scale when their depths are comparable
    assert fig.scene["height"] == app.after.graph.scene["height"]


def test_warm_up_line_says_when_clicks_are_lookups(app):
    assert app.controller.scheduler.wait_warm(300)
    assert "precomputed" in app.warm_text() and "a click is a lookup" in app.warm_text()


def test_what_each_fusion_buys(app, tmp_path):
    """The ablation button's work: a row per fused step, the bar figure, the table and the tuned plan."""
    app.profile_panel.w_runs.value = 4
    app.profile_panel.w_seq.value = 16
    app.background = True
    try:
        app.ablate(steps=["bias_gelu", "skip_layer_norm"])
        app.run_benchmark()  # refused while the ablation measures: two workers would time each other
        assert "already running" in (app.error or "")
        app.wait_benchmark(600)
    finally:
        app.background = False
    res = app.ablation
    assert res is not None, app.error
    assert [r.step for r in res.rows] == ["bias_gelu", "skip_layer_norm"]
    assert list(app.profile_panel.fig_ablation.data[0].y) == ["bias_gelu", "skip_layer_norm"]
    assert list(app.profile_panel.fig_ablation.data[0].x) == pytest.approx([r.saves_pct for r in res.rows])
    assert "bias_gelu" in app.profile_panel.w_ablation.value and f"±{res.noise_pct:.1f}%" in app.profile_panel.w_ablation.value
    assert res.config["seq"] == 16 and res.config["runs"] == 4
    # Issue 42: the plan is checked against the unfused graph and the full plan on the workload it was measured
    # on (here the benchmark's shape: no text timed), and each step's row says what it buys there.
    (plan,) = app.state.plans.values()
    assert plan.workload["words"].startswith("batch 1, sequence 16") and plan.check.ships in ("tuned", "full plan",
                                                                                               "unfused")
    assert f"checked: {plan.words()}"[:60] in app.profile_panel.w_ablation.value.replace("&#x27;", "'")
    row = next(r for r in app.state.rows if r["name"] == "bias_gelu")
    assert row["buys"].startswith("shape ") and row["buys"].endswith("%") and "shape (batch 1" in row["buys_tip"]
    html = app.save_report(tmp_path / "r.html").read_text()
    assert "What each fusion buys here" in html and "checked: " in html



@pytest.mark.parametrize("width, pane, side_by_side", [
    (700, 684, False), (799, 783, False), (800, 384, True), (900, 434, True), (1280, 624, True), (2560, 1264, True),
])
def test_pane_sizes_side_by_side_from_800_px_and_never_wider_than_the_area(width, pane, side_by_side):
    from workbench.ui.width import pane_sizes

    got, sbs = pane_sizes(width)
    assert (got, sbs) == (pane, side_by_side)
    assert (2 * got + 4 if sbs else got) <= width  # never wider than the output area


def test_measured_width_resizes_panes_and_plots(app):
    app.w_width.width = 900  # what the browser's ResizeObserver reports for a 900 px notebook column
    assert app.state.pane_width == 434
    assert app.before.graph.scene["width"] == app.after.graph.scene["width"] == 434 == app.profile_panel.fig_live.layout.width
    assert app.before.widget.layout.width == "438px"
    app.w_width.width = 2560
    assert app.after.graph.scene["width"] == 1264


def test_side_panel_mode_puts_the_app_in_jupyterlabs_right_area():
    from sidecar import Sidecar

    from workbench import Workbench

    app = Workbench("bert-tiny", autorun=False, panel="side")
    try:
        assert app.panel == "side" and isinstance(app._sidecar, Sidecar) and app._sidecar.anchor == "split-right"
        shown = app._sidecar.outputs[0]["data"]["application/vnd.jupyter.widget-view+json"]["model_id"]
        assert shown == app.widget.model_id and app.model_bar.w_side.disabled
        assert "side panel" in app._repr_mimebundle_()["text/plain"]
        app.close_side_panel()
        assert app.panel == "inline" and "application/vnd.jupyter.widget-view+json" in app._repr_mimebundle_()
        app.model_bar.w_side.click()  # the button in the model bar does the same
        assert app.panel == "side"
    finally:
        app.close()
    with pytest.raises(Exception, match="panel must be one of 'inline' or 'side'"):
        Workbench("bert-tiny", autorun=False, panel="left")


def test_opening_a_cached_model_imports_neither_torch_nor_transformers(tiny_export):
    """Heavy imports happen only when an export really runs (a reopened model starts fast)."""
    import subprocess
    import sys

    tiny_export()  # the export is in the cache now
    code = ("import sys; from workbench import Workbench; app = Workbench('bert-tiny', background=False); app.wait(); "
            "assert app.error is None and len(app.snapshots) > 5, app.error; "
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip().splitlines()[-1] == "[]"


def test_the_first_figure_widget_skips_a_grammar_compile_and_iri_checks_still_work():
    """plotly's FigureWidget pulls in jsonschema's iri grammar (1.6 s at import); the app defers it to first use."""
    import subprocess
    import sys

    code = ("import sys; from workbench.ui.compat import defer_slow_imports; defer_slow_imports(); "
            "import plotly.graph_objects as go; go.FigureWidget; "
            "print('rfc3987_syntax.syntax_helpers' in sys.modules); import jsonschema; c = jsonschema.FormatChecker(); "
            "print(c.conforms('http://example.com/ä', 'iri'), c.conforms('not an iri ::', 'iri'))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.split() == ["False", "True", "False"]


def test_gpu_column_variants_are_the_fused_model_on_cuda_and_never_run_on_the_cpu(app):
    """The GPU column's variants: the same fused file as the CPU's, on the CUDA provider, named ``name@gpu``;
    without a GPU the benchmark refuses them in one line before any timing (never a CPU figure)."""
    from workbench.errors import RuntimeUnavailableError
    from workbench.measure.harness.bench import stream_benchmark
    from workbench.measure.variants.gpu_column import DevicePlan
    from workbench.ort.gpu import gpu_status

    vs = app.controller.measuring.gpu_variants(DevicePlan(("fused", "fused-cudagraph"), "GPU column: fused"))
    assert [v.name for v in vs] == ["fused@gpu", "fused-cudagraph@gpu"]
    assert all(v.provider == "cuda" for v in vs) and vs[1].kind == "onnx-cudagraph"
    cpu = next(v for v in app.controller.measuring.variants() if v.name == "fused")
    assert cpu.provider == "cpu" and vs[0].model == cpu.model == vs[1].model
    if not gpu_status()[0]:
        with pytest.raises(RuntimeUnavailableError, match="^GPU asked for, but "):
            stream_benchmark(vs, app.state.bench_config())


def test_a_warm_toggle_sends_only_what_changed(tiny_export, monkeypatch):
    """A warm click (a lookup) creates no widget in the browser and moves the step slider in one message.

    Every widget message goes through a comm; ``comm.create_comm`` is the seam the ``comm`` package
    offers for a kernel's own Comm class, so a recording one sees what a kernel would send to the page.
    """
    import comm
    from comm import DummyComm

    from workbench.ui.app import Workbench

    sent = []

    class Recording(DummyComm):
        def publish_msg(self, msg_type, data=None, metadata=None, buffers=None, **keys):
            sent.append((msg_type, self, data))

    monkeypatch.setattr(comm, "create_comm", lambda *a, **k: Recording(*a, **k))
    tiny_export()
    w = Workbench("bert-tiny", background=False)
    try:
        assert w.controller.scheduler.wait_warm(timeout=600)
        slider = w.fusion.w_step.comm
        for on in (False, True, False, True):
            sent.clear()
            nodes = w.snapshots[-1].nodes
            w.fusion.toggles["attention"].value = on  # what a click does
            assert w.error is None, w.error
            assert (w.snapshots[-1].nodes > nodes) if not on else (w.snapshots[-1].nodes < nodes)
            opened = [d["state"].get("_model_name") for t, _, d in sent if t == "comm_open"]
            assert opened == [], f"a warm toggle made new widgets: {opened}"
            assert len([1 for _, c, _ in sent if c is slider]) <= 1, "the step slider was sent more than once"
            assert len(sent) <= 30, [(t, (d or {}).get("state", {}).keys()) for t, _, d in sent]
    finally:
        w.close()
