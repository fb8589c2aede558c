"""The controller, its state and its job runner, without a single widget (bert-tiny)."""

from __future__ import annotations

import sys
import threading
import time

import pytest

from workbench.errors import ConfigError, WorkbenchError
from workbench.ui.jobs import JobRunner
from workbench.ui.state import AppState, JobStatus


@pytest.fixture(scope="module")
def ctl(tiny_export):
    from workbench.ui.controller import Controller

    tiny_export()
    c = Controller(AppState(source="bert-tiny"), background=False)
    c.load()
    yield c
    c.close()


def test_controller_never_imports_widgets():
    import subprocess

    code = ("import sys; import workbench.ui.controller, workbench.ui.state, workbench.ui.jobs; "
            "print([m for m in ('ipywidgets', 'plotly', 'IPython') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


def test_state_values_are_replaced_and_observed():
    s = AppState()
    seen = []
    s.observe(lambda ch: seen.append(ch["name"]), names=["disabled", "status", "jobs"])
    s.set_step_enabled("attention", False)
    s.jobs = {**s.jobs, "load": JobStatus("running", "exporting", 0.5)}
    assert seen == ["disabled", "jobs"] and s.disabled == ["attention"]
    assert s.busy("load") and not s.busy("benchmark")
    with pytest.raises(ConfigError, match="pane_width"):
        AppState(pane_width=10)
    with pytest.raises(ConfigError, match="unknown app setting"):
        AppState(nonsense=1)


def test_load_fills_state_rows_and_pair(ctl):
    s = ctl.state
    assert s.error is None, s.error
    assert s.status.kind == "ok" and "after fusion" in s.status.text
    assert s.jobs["load"].state == "done"
    names = [sn.step for sn in s.snapshots]
    assert names[0] == "export" and names[s.step] == "attention"  # the first view: Attention
    assert s.pair.step == "attention" and s.pair.index == s.step
    assert "Attention" in s.pair.after.layout.ops and s.pair.before.highlight and s.pair.after.highlight
    att = next(r for r in s.rows if r["name"] == "attention")
    assert att["here"] == "+2 Attention" and att["on"] and att["index"] == s.step
    assert s.engine_line.startswith("auto → ORT transformers optimizer")


def test_toggle_replaces_snapshots_and_keeps_the_chosen_step(ctl):
    s = ctl.state
    before = s.snapshots
    ctl.toggle("attention", False)
    assert s.snapshots is not before and "attention" not in [sn.step for sn in s.snapshots]
    assert s.disabled == ["attention"] and next(r for r in s.rows if r["name"] == "attention")["index"] is None
    ctl.toggle("attention", True)
    assert s.pair.step == "attention"  # back to the step the user was looking at
    assert s.status.text.startswith("attention on:")


def test_select_view_click_and_width(ctl):
    s = ctl.state
    ctl.select_step(0)
    assert s.pair.index == 0 and not s.pair.after.highlight  # the export against itself
    ctl.select_row("attention")
    ctl.set_view("model")
    assert "group:layer 1" in s.pair.after.layout.ids
    ctl.click("group:layer 1")
    assert s.expanded == ["layer 1"] and "group:layer 1" not in s.pair.after.layout.ids
    ctl.set_view("layer", 0)
    att = s.pair.after.layout.ids[s.pair.after.layout.ops.index("Attention")]
    ctl.click(att, "after")
    assert s.selected == att and s.pair.after.selected == {att} and len(s.pair.before.selected) > 5
    ctl.set_width(900)
    assert s.pane_width == 434


def test_parity_pass_fills_every_row(ctl):
    ctl.parity.check()
    assert all(r["parity"] is True for r in ctl.state.rows if r["index"] is not None)
    assert "every step within" in ctl.state.status.text
    # ... and the nodes each execution provider runs (ONNX Runtime's own record), each a node of the snapshot;
    # the fused Attention on the CPU provider (asked for here, on an AMD CPU; OpenVINO's fall-back on an Intel one).
    ran = [r for r in ctl.state.rows if r["index"] is not None]
    for r in ran:
        sn = ctl.state.snapshots[r["index"]]
        names = {n.name for n in sn.skeleton.graph.node}
        counts = sn.assignment.counts()
        assert r["providers"] == ", ".join(f"{p} {k}" for p, k in counts.items())
        assert set(sn.assignment.providers()) <= names
        assert r["providers_tip"].startswith(f"asked for the {sn.assignment.asked} provider, level all: ")
    att = ctl.state.snapshots[next(r["index"] for r in ran if r["name"] == "attention")].assignment
    assert [(n.domain, n.provider) for n in att.nodes if n.op_type == "Attention"] == [("com.microsoft", "CPU")] * 2
    # ... and the graph panes outline each node in its provider's colour (the overlay of the provider that runs it).
    ctl.select_row("attention")
    pair = ctl.state.pair
    lay = pair.after.layout
    nodes = [i for i, k in zip(lay.ids, lay.kinds) if k == "node"]
    assert pair.after.providers and set(pair.after.providers.values()) == {"CPU"}
    assert {i for i in nodes if lay.ops[lay.ids.index(i)] == "Attention"} <= set(pair.after.providers)


def test_the_latency_panel_offers_the_openvino_provider_and_says_why_it_cannot_run_here(ctl):
    """Beside the snapshots, ONNX Runtime with OpenVINO's execution provider (on the export and on the fused
    snapshot): timed where its plugin offers this CPU, else left out with its one line (an AMD CPU here)."""
    from workbench.ort.openvino_ep import status

    keys = [k for _, k in ctl.measuring.variant_choices()]
    assert keys[len(ctl.state.snapshots):] == ["ort-openvino", "ort-openvino-fused"]
    vs = ctl.measuring.variants([keys[0], "ort-openvino-fused"])
    ok, why = status()
    if ok:
        assert [v.name for v in vs] == ["unfused", "ort-openvino-fused"] and vs[1].options == {"ep": "openvino"}
    else:
        assert [v.name for v in vs] == ["unfused"] and ctl.measuring.skipped == [{"name": "ort-openvino-fused",
                                                                                  "why": why}]


def test_measuring_refuses_without_a_model_and_errors_are_one_line():
    from workbench.ui.controller import Controller

    c = Controller(AppState(source="/nonexistent/model-folder"), background=False)
    c.measuring.run_benchmark()
    assert c.state.error == "load a model first"
    c.load()
    assert c.state.jobs["load"].state == "error" and "\n" not in c.state.error
    assert c.state.status.kind == "error"


def test_job_runner_lanes_progress_errors_and_cancel():
    reports: list[tuple[str, JobStatus]] = []
    r = JobRunner(lambda n, st: reports.append((n, st)), background=True)
    order = []

    def slow(job):
        job.progress("half way", 0.5)
        time.sleep(0.3)
        order.append("slow")

    r.start("a", slow, lane="x")
    r.start("b", lambda job: order.append("b"), lane="x")  # same lane: after "a"
    r.start("bad", lambda job: (_ for _ in ()).throw(WorkbenchError("broken model")), lane="y")
    assert r.wait("x", 10) and r.wait("y", 10)
    assert order == ["slow", "b"]
    states = {n: st.state for n, st in reports}
    assert states == {"a": "done", "b": "done", "bad": "error"}
    assert ("a", JobStatus("running", "half way", 0.5, None, reports[1][1].elapsed_s)) in reports
    assert [st.error for n, st in reports if n == "bad" and st.state == "error"] == ["broken model"]
    # cancel: the job stops at its next check and is reported cancelled
    go = threading.Event()

    def loop(job):
        while True:
            go.set()
            job.check()
            time.sleep(0.01)

    r.start("loop", loop, lane="z")
    go.wait(5)
    r.cancel("loop")
    assert r.wait("z", 5)
    assert reports[-1] == ("loop", reports[-1][1]) and reports[-1][1].state == "cancelled"


def test_job_runner_kick_runs_again_when_asked_meanwhile():
    runs = []
    gate = threading.Event()
    r = JobRunner(lambda n, st: None, background=True)

    def work(job):
        runs.append(len(runs))
        gate.wait(5)
        return True

    r.kick("parity", work)
    time.sleep(0.1)
    r.kick("parity", work)  # while the first pass runs: one more pass after it, not a second thread
    gate.set()
    assert r.wait("parity", 10)
    assert runs == [0, 1]


def test_synchronous_runner_reports_a_bug_as_one_line():
    got = []
    r = JobRunner(lambda n, st: got.append(st), background=False)
    r.start("load", lambda job: {}["missing"])
    assert got[-1].state == "error" and got[-1].error.startswith("load failed unexpectedly: KeyError")
    assert "Traceback" in (r.last_trace or "")


def test_answers_on_real_text_fill_the_rows_and_the_precision_rows(tmp_path):
    """The app's "Check answers": every step's answers column, int8 and fp16 against the unfused export."""
    from textmodels import save_task_model

    from workbench.ui.controller import Controller

    folder = save_task_model("embedding", tmp_path / "embedder")
    c = Controller(AppState(source=str(folder)), background=False)
    try:
        c.load()
        assert c.state.error is None, c.state.error
        c.text_answers.use_text("The cat sat on the mat.\nA cat was sitting on a rug.\nHow do I reset my password?\n"
                   "I forgot my password.\nStocks fell on Tuesday.")
        s = c.state
        assert s.error is None, s.error
        assert s.sentences and "5 sentences" in s.text_line and "embedding" in s.text_line
        ran = [r for r in s.rows if r["index"] is not None]
        assert ran and all(r["answers"].startswith("top-1 ") for r in ran), [r["answers"] for r in ran]
        assert all(sn.task_parity["kind"] == "embedding" for sn in s.snapshots[1:])
        names = [a["name"] for a in s.answers]
        assert names == ["int8", "fp16"] and all("spearman" in a or "error" in a for a in s.answers)
        assert "answers" in c.report.report_data() and c.report.report_data()["text"]["sentences"] == 5
    finally:
        c.close()


def test_a_sweep_from_the_app_fills_its_table(ctl, tmp_path):
    """The sweep panel's Run: a YAML spec, measured here one point at a time, rows as they land."""
    spec = "models: [bert-tiny]\nplans: [default, {disable: [attention]}]\nseq: [16]\nthreads: [1]\nruns: 3\nwarmup: 1\n"
    ctl.sweep.run_sweep(spec, "local", out=str(tmp_path / "sweep.json"))
    s = ctl.state
    assert s.error is None, s.error
    assert s.sweep["running"] is False and len(s.sweep["rows"]) == 2
    assert all(r["p50_ms"] > 0 and r["machine"]["cpu"] for r in s.sweep["rows"])
    assert (tmp_path / "sweep.json").is_file() and s.jobs["sweep"].state == "done"
    with pytest.raises(ConfigError, match="not valid YAML") as e:  # refused at the call, nothing run
        ctl.sweep.run_sweep("models: [bert-tiny", "local")
    assert "\n" not in str(e.value) and s.error is None and s.jobs["sweep"].state == "done"


def test_auto_shows_the_likely_engine_first_then_compares_in_the_background(tiny_export):
    """The graph does not wait for the engine that loses: auto's comparison runs after it is shown."""
    from workbench.config import FusionPlan
    from workbench.fusion import Timeline
    from workbench.models import resolve
    from workbench.ui.controller import Controller

    path = tiny_export().path
    c = Controller(AppState(source="bert-tiny"), background=True)
    shown = []
    c.state.observe(lambda ch: shown.append((c.state.engine_line, len(c.state.snapshots))), names=["pair"])
    try:
        c.load()
        c.wait(300)
        s = c.state
        assert s.error is None, s.error
        assert shown[0] == ("", 1)  # the export's graph, drawn while the fusion steps run
        fused = [line for line, n in shown if n > 1]
        assert fused and fused[0].startswith("auto → ORT transformers optimizer (comparing")
        assert s.engine_line.startswith("auto → ORT transformers optimizer (fuses 2 Attention; onnxscript fuses 2)")
        assert c.timeline.plan.engine == "ort"
        # the same choice and reasons as running both engines at once
        src = resolve("bert-tiny")
        both = Timeline(path, FusionPlan(engine="auto"), num_heads=src.num_heads, hidden_size=src.hidden_size,
                        num_layers=src.num_layers)
        both.run()
        assert (both.engine_used, both.engine_note) == ("ort", s.engine_note)
    finally:
        c.close()


def test_background_parity_waits_until_the_selected_steps_toggle_is_ready(tiny_export, monkeypatch):
    """On bert-base a parity check beside a click that computes its plan made the click 3 s instead of 1 s:
    automatic parity starts once the warm-up has the selected step's toggle in memory."""
    from workbench.fusion import Timeline
    from workbench.ui.controller import Controller

    tiny_export()
    monkeypatch.setenv("WORKBENCH_PERSIST_TIMELINE", "0")  # parity read back from disk would run no check
    seen = []
    real = Timeline.check_parity

    def spy(tl, i):
        seen.append(c.scheduler.toggle_ready(c.looking_at))
        return real(tl, i)

    monkeypatch.setattr(Timeline, "check_parity", spy)
    c = Controller(AppState(source="bert-tiny", engine="ort"), background=True)
    try:
        c.load()
        c.wait(300)
        assert c.parity.wait(300)
        assert c.state.error is None, c.state.error
        assert seen and all(seen), seen
    finally:
        c.stop_threads()


def test_auto_switches_when_the_likely_engine_fuses_less(tiny_export, monkeypatch):
    import workbench.fusion.timeline as timeline
    from workbench.ui.controller import Controller

    tiny_export()
    monkeypatch.setitem(timeline.LIKELY_ENGINE, "torchscript", "onnxscript")  # a wrong guess
    c = Controller(AppState(source="bert-tiny"), background=False)
    try:
        c.load()
        s = c.state
        assert s.error is None, s.error
        assert c.timeline.plan.engine == "ort" and c.timeline.engine_used == "ort"
        assert "auto switched from onnxscript to ort" in s.status.text
        assert s.pair.step == "attention" and "Attention" in s.pair.after.layout.ops
        assert s.engine_line.startswith("auto → ORT transformers optimizer")
    finally:
        c.close()


def test_twenty_quick_clicks_on_one_checkbox_end_in_the_state_of_the_last(tiny_export, monkeypatch):
    """A lane runs its jobs in the order asked: rapid alternating clicks apply in order, the last one wins."""
    from workbench.fusion.scheduler import FusionScheduler
    from workbench.ui.controller import Controller

    tiny_export()
    applied = []
    real = FusionScheduler.toggle

    def spy(sch, name, on):
        applied.append(on)
        return real(sch, name, on)

    monkeypatch.setattr(FusionScheduler, "toggle", spy)
    c = Controller(AppState(source="bert-tiny", engine="ort"), background=True)
    try:
        c.load()
        c.wait(300)
        assert c.state.error is None, c.state.error
        clicks = [i % 2 == 0 for i in range(20)]  # on, off, on, ... off: the last click switches it off
        for on in clicks:  # back to back, as fast as a hand can click (the clicks never wait for the work)
            c.toggle("attention", on)
        assert next(r for r in c.step_rows() if r["name"] == "attention")["on"] is False  # the box shows the last click
        c.wait(300)
        assert applied == clicks  # in the order clicked, none lost
        assert not c.clicks_in_flight  # every click ran
        s = c.state
        assert s.error is None and "attention" in s.disabled
        assert not s.snapshots[-1].fused.get("Attention") and "attention" in c.timeline.plan.disabled
        assert next(r for r in c.step_rows() if r["name"] == "attention")["on"] is False
    finally:
        c.close()


def test_profiles_follow_their_snapshots_and_a_new_load_drops_them(tiny_export):
    """An operator profile belongs to the snapshot it timed: a toggle that replaces that snapshot drops its
    profile (the overlay would colour a graph it never measured), an untouched snapshot keeps its own, and a
    new load starts with none."""
    from workbench.ui.controller import Controller

    tiny_export()
    c = Controller(AppState(source="bert-tiny", engine="ort", seq=16, runs=3), background=False)
    try:
        c.load()
        s = c.state
        names = [sn.step for sn in s.snapshots]
        att, last = names.index("attention"), len(names) - 1
        c.measuring.profile([0, att, last])
        assert s.error is None, s.error
        assert {i: p.variant for i, p in c.measuring.profiles.items()} == {0: "export", att: "attention",
                                                                           last: names[-1]}
        assert set(s.op_breakdown) == {"0: export", "after attention", f"{last}: {names[-1]}"}
        c.toggle("attention", False)  # the steps from attention on are new graphs
        assert "attention" not in [sn.step for sn in s.snapshots]
        assert {i: p.variant for i, p in c.measuring.profiles.items()} == {0: "export"}
        c.toggle("attention", True)
        assert {i: p.variant for i, p in c.measuring.profiles.items()} == {0: "export"}  # not measured again
        c.load()
        assert s.error is None and c.measuring.profiles == {}
    finally:
        c.close()
