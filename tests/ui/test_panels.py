"""Each panel against a real state and a stub controller: set state, read widget values, click buttons."""

from __future__ import annotations

import pytest

from workbench.ui.state import AppState, JobStatus, Status


class StubController:
    """Records every call a panel makes (the panel's only way to change anything)."""

    def __init__(self):
        self.calls: list[tuple] = []
        self.measuring = _Measuring(self.calls, "measuring")

    def __getattr__(self, name):
        return _Recorder(self.calls, name)


class _Recorder:
    """A controller method (records its call by name) or a feature object (``controller.sweep.run_sweep``)."""

    def __init__(self, calls: list, name: str):
        self.calls, self.name = calls, name

    def __call__(self, *a, **k):
        self.calls.append((self.name, a, k))

    def __getattr__(self, name):
        return _Recorder(self.calls, name)


class _Measuring(_Recorder):
    """The measuring feature: records its calls, and offers the variant list of two snapshots."""

    def variant_choices(self):
        return [("0: export (ONNX Runtime, no optimizations)", "0: export"), ("1: attention (fused, all steps)",
                                                                              "1: attention")]


@pytest.fixture()
def stub():
    return StubController()


@pytest.fixture(scope="module")
def loaded(tiny_export):
    """A state filled by the real controller once (snapshots, rows, pair), for panels to draw."""
    from workbench.ui.controller import Controller

    tiny_export()
    c = Controller(AppState(source="bert-tiny"), background=False)
    c.load()
    yield c.state
    c.close()


def test_model_bar_shows_status_progress_and_loads_through_the_controller(stub):
    from workbench.ui.loading.panel import ModelBar

    s = AppState(source="bert-tiny")
    bar = ModelBar(s, stub, choices={"presets": ["bert-tiny", "bert-base"], "exporters": ("torchscript", "dynamo"),
                                     "opsets": (17, 18, 23), "attentions": ("eager", "sdpa"),
                                     "engines": ("auto", "ort")})
    s.status = Status("no such model", "error")
    assert "no such model" in bar.status.value and "#cf222e" in bar.status.value
    s.jobs = {"load": JobStatus("running", "exporting", 0.4)}
    assert bar.progress.layout.visibility == "visible" and bar.progress.value == 0.4
    s.jobs = {"load": JobStatus("done", "", 1.0)}
    assert bar.progress.layout.visibility == "hidden"
    assert bar.w_opset.label == "default"  # the exporter's own opset reads as a choice, not a blank
    bar.w_opset.value = 23  # a menu change loads at once
    assert stub.calls[-1][0] == "load_model" and stub.calls[-1][2]["opset"] == 23
    s.exporter = "dynamo"  # the state moves the menu without a load
    assert bar.w_exporter.value == "dynamo" and len(stub.calls) == 1
    bar.w_load.click()
    assert stub.calls[-1][2]["exporter"] == "dynamo"


def test_fusion_panel_draws_rows_and_sends_clicks(loaded, stub):
    from workbench.ui.steps.panel import FusionPanel

    p = FusionPanel(loaded, stub)  # made after the load: draws what is there
    assert "attention" in p.rows and p.toggles["attention"].value is True
    assert "+2 Attention" in p.rows["attention"][3].value
    assert "wb-row-sel" in p.rows["attention"][0]._dom_classes
    assert "Softmax" in p.w_counts.value and "<b>attention</b>" in p.w_diag.value
    p.toggles["attention"].value = False
    assert stub.calls[-1] == ("toggle", ("attention", False), {})
    p.rows["gelu"][2].click()
    assert stub.calls[-1] == ("select_row", ("gelu",), {})
    p.w_step.value = 0
    assert stub.calls[-1] == ("select_step", (0,), {})
    # state moving a checkbox does not call the controller back
    n = len(stub.calls)
    loaded.rows = tuple({**r, "on": False} if r["name"] == "gelu" else r for r in loaded.rows)
    assert p.toggles["gelu"].value is False and len(stub.calls) == n
    assert "wb-row-off" in p.rows["gelu"][0]._dom_classes
    # answers on text add a column
    loaded.rows = tuple({**r, "answers": "top-1 100%, ρ 1.0000"} for r in loaded.rows)
    assert "top-1 100%" in p.rows["attention"][3].value
    loaded.session_line = "ORT session (all) on top of attention: 18 → 16 nodes"
    assert "18 → 16" in p.w_session_out.value


def test_steps_that_cannot_apply_fold_under_one_line(loaded, stub):
    """bert-tiny's graph lacks the anchors of some ORT steps: those sit under one line, hidden until clicked."""
    from workbench.ui.steps.panel import FusionPanel

    p = FusionPanel(loaded, stub)
    snaps = {sn.step: sn for sn in loaded.snapshots}
    na = [r["name"] for r in loaded.rows if not r["applies"]]
    assert "shape" in na and all(r["na_why"] == snaps[r["name"]].skipped for r in loaded.rows
                                 if r["name"] in snaps and snaps[r["name"]].skipped)
    shown = list(p.w_rows.children)
    assert p.w_na_toggle.layout.display != "none"
    assert p.w_na_toggle.description == f"not applicable to this model ({len(na)})"
    assert [p.rows[n][0] for n in na] == list(p.w_na_box.children)  # not rows of their own among the steps
    assert not {p.rows[n][0] for n in na} & set(shown) and p.rows["sdpa_attention"][0] in shown  # fused nothing, applies
    assert p.w_na_box.layout.display == "none"
    p.w_na_toggle.click()
    assert p.w_na_box.layout.display == "flex"
    assert "no Concat nodes" in p.rows["shape"][3].value  # each says why it cannot apply, in the engine's terms
    # The step slider leaves them out too.
    labels = [label for label, _ in p.w_step.options]
    assert not [x for x in labels if x.split(": ", 1)[1] in na]


def test_graph_panes_draw_the_pair_resize_and_report_clicks(loaded, stub):
    from workbench.ui.link import link_panes
    from workbench.ui.graph.panel import GraphPane, ViewBar

    before, after = GraphPane(loaded, stub, "before"), GraphPane(loaded, stub, "after")
    link_panes(before, after, stub)
    assert "wb-graph-after" in after.widget._dom_classes
    assert "Attention" in [t.strip() for t in after.graph.labels]
    assert after.graph.title.startswith("after attention")
    loaded.pane_width = 434
    assert after.graph.scene["width"] == 434 and before.widget.layout.width == "438px"
    # a click in the browser arrives as a message naming the node's index and id
    k = 1
    node = after.graph.ids[k]
    after.graph._on_msg(after.graph, {"type": "click", "index": k, "id": node}, [])
    after.graph._on_msg(after.graph, {"type": "click", "index": k, "id": "stale"}, [])  # a redrawn pane: ignored
    before.graph.click("group:layer 1")
    assert stub.calls[-2:] == [("click", (node, "after"), {}), ("click", ("group:layer 1", "before"), {})]
    bar = ViewBar(loaded, stub)
    bar.w_view.value = "model"
    assert stub.calls[-1] == ("set_view", (), {"view": "model"})
    loaded.layer_max = 1
    loaded.layer = 1
    assert bar.w_layer.value == 1 and stub.calls[-1][0] == "set_view"  # no call back from the state's change


def test_profile_panel_plots_samples_results_and_disables_buttons(stub):
    from workbench.ui.measuring.panel import ProfilePanel

    s = AppState()
    p = ProfilePanel(s, stub)
    p.w_runs.value = 7
    assert stub.calls[-1] == ("configure", (), {"runs": 7})
    s.series = {"unfused": (10.0, 11.0), "fused": (8.0, 8.5)}
    assert [t.name for t in p.fig_live.data] == ["ONNX Runtime, no optimizations", "fused (all steps)"]
    s.jobs = {"benchmark": JobStatus("running")}
    assert p.w_run.disabled and not p.w_stop.disabled and p.w_ablate.disabled
    p.w_stop.click()
    assert stub.calls[-1][0] == "stop_benchmark"
    s.jobs = {"benchmark": JobStatus("done")}
    assert not p.w_run.disabled and p.w_stop.disabled
    s.snapshots = ("a", "b")  # the variant list follows the snapshots
    assert [k for _, k in p.w_variants.options] == ["0: export", "1: attention"]
    assert p.w_variants.value == ("0: export", "1: attention")
    s.pane_width = 300
    assert all(f.layout.width == 300 for f in p.figures)
    # a CUDA profile's GPU kernels, slowest first, with where their times come from
    s.kernels = {"after attention": {"note": "3 GPU kernels, 0.020 ms per run on the GPU",
                                     "ms": {"ampere_sgemm_64x32": 0.012, "Attention_kernel": 0.006, "Add<": 0.002}}}
    html = p.w_kernels.value
    assert "after attention: 3 GPU kernels" in html and "Add&lt;" in html
    assert html.index("ampere_sgemm_64x32") < html.index("Attention_kernel") < html.index("Add&lt;")
    assert "<td>12.0</td>" in html
    s.kernels = {}
    assert p.w_kernels.value == ""
    assert stub.calls[0][0] == "gpu_column"  # the GPU column's line is the controller's, asked at once
    s.gpu_note = "no GPU column: no NVIDIA GPU driver"
    assert "no GPU column: no NVIDIA GPU driver" in p.w_gpu.value


def test_text_and_sweep_panels_send_their_inputs(stub):
    from workbench.ui.sweep.panel import SweepPanel
    from workbench.ui.text.panel import TextPanel

    s = AppState(source="bert-tiny")
    t = TextPanel(s, stub)
    t.w_text.value = "A first sentence.\nA second one."
    t.w_check.click()
    assert stub.calls[-1] == ("use_text", ("A first sentence.\nA second one.",), {})
    s.answers = ({"name": "int8", "kind": "embedding", "sentences": 39, "top1_agreement": 0.95, "spearman": 0.986,
                  "max_abs_diff": 0.02, "cosine": 0.999},
                 {"name": "fp16", "kind": "embedding", "sentences": 39, "top1_agreement": 1.0, "spearman": 0.9999,
                  "max_abs_diff": 1e-4, "cosine": 1.0})
    # The answers policy the tune and the CLI use: a changed nearest sentence is a change, never "same answers".
    int8_row, fp16_row = t.w_answers.value.split("<tr>")[2:4]
    assert "top-1 95%, Spearman 0.9860" in int8_row and "answers change" in int8_row
    assert "top-1 100%, Spearman 0.9999" in fp16_row and "same answers" in fp16_row
    s.text_line = "39 sentences in 6 batches"
    assert "39 sentences" in t.w_line.value
    w = SweepPanel(s, stub)
    assert "models: [bert-tiny]" in w.w_spec.value
    w.w_executor.value = "ray"
    w.w_run.click()
    assert stub.calls[-1][0] == "run_sweep" and stub.calls[-1][1][1] == "ray"
    s.sweep = {"rows": [{"config": {"model": "bert-tiny", "plan": "default", "seq": 16}, "node": "n1",
                         "p50_ms": 1.5, "p90_ms": 1.7, "runs": 5}], "total": 4, "running": True}
    assert "1.50" in w.w_table.value and "1 of 4 rows" in w.w_table.value
    s.jobs = {"sweep": JobStatus("running")}
    assert w.w_run.disabled and not w.w_stop.disabled


def test_panels_import_no_other_panel_and_no_compute_module_and_only_jobs_start_threads():
    """The shape the app keeps: panels draw (with viz/) and write through the controller, nothing else."""
    import ast
    from pathlib import Path

    ui = Path(__file__).resolve().parents[2] / "workbench" / "ui"
    compute = {"export", "export_parity", "fusion", "measure", "graph", "ort", "models", "model_types", "modelio", "text", "report",
               "checks"}
    for path in sorted((ui / "panels").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                mod = "." * node.level + (node.module or "")
                parts = [p for p in mod.split(".") if p]
                assert not (node.level == 1 and parts and parts[0] not in ("base",)), (path.name, mod)  # a panel
                assert node.level != 2, (path.name, mod)  # the controller, jobs, views: handed in, never imported
                assert not (node.level >= 3 and parts and parts[0] in compute), (path.name, mod)
                assert not (parts[:2] == ["workbench", "ui"] or (parts and parts[0] in compute and node.level == 0)), \
                    (path.name, mod)
    for path in sorted(ui.rglob("*.py")):
        text = path.read_text()
        if path.name != "jobs.py":
            assert "Thread(" not in text, f"{path.name} starts a thread: only ui/jobs.py may"
    assert max(len(p.read_text().splitlines()) for p in ui.rglob("*.py")) <= 500
