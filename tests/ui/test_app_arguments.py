"""The app's API given wrong arguments: each raises at the call, in one line naming the argument, and leaves the app
as it was; ``app.error`` is for background work and clears when the state it describes is gone."""

from __future__ import annotations

import pytest

from workbench.errors import ConfigError, ConfigTypeError, FusionError, OutputPathError

SPEC = {"models": ["bert-tiny"], "seq": [8], "threads": [1], "runs": 1, "warmup": 1}


@pytest.fixture(scope="module")
def app(tiny_export):
    from workbench.ui.app import Workbench

    tiny_export()  # warm the cache
    w = Workbench("bert-tiny", background=False)
    assert w.error is None, w.error
    yield w
    w.close()


def _seen(app) -> tuple:
    """Everything a call could change: the settings, what is shown, the status line and error, the jobs."""
    s = app.state
    return (s.to_dict(), s.status, s.error, dict(s.jobs), [id(sn) for sn in app.snapshots], s.sentences, s.text_line,
            s.answers, s.rules, s.report_path, s.sweep, s.bench_result, s.tune, app.background,
            app.rule_time_limit_s)


def _set(name, value):
    return lambda app: setattr(app, name, value)


WRONG = [  # (what the user wrote, the call, the error, what its line must say)
    ("select_step(10**9)", lambda a: a.select_step(10**9), ConfigError, r"index must be a whole number from 0 to \d+"),
    ("select_step(-1)", lambda a: a.select_step(-1), ConfigError, r"index .* not -1"),
    ("select_step(1.5)", lambda a: a.select_step(1.5), ConfigTypeError, "index must be a whole number, not 1.5"),
    ("select_step(True)", lambda a: a.select_step(True), ConfigTypeError, "index must be a whole number"),
    ("toggle yes", lambda a: a.toggle("attention", "yes"), ConfigTypeError, "on must be True or False, not 'yes'"),
    ("toggle 1", lambda a: a.toggle("attention", 1), ConfigTypeError, "on must be True or False, not 1"),
    ("toggle unknown", lambda a: a.toggle("no-such-step", False), ConfigError,
     r"name must be one of .*'attention'.*not 'no-such-step'"),
    ("use_text []", lambda a: a.use_text([]), ConfigError, "sentences is empty"),
    ("use_text [None, 3]", lambda a: a.use_text([None, 3]), ConfigTypeError,
     r"sentences\[0\] must be a sentence \(a string\), not None"),
    ("use_text one string", lambda a: a.use_text("a single string"), ConfigError,
     "sentences holds 1 different sentence; checking answers needs at least 3"),
    ("use_text repeated", lambda a: a.use_text(["Hi.", "Hi.", "Hi."]), ConfigError, "1 different sentence"),
    ("use_text empty line", lambda a: a.use_text(["One.", " ", "Two."]), ConfigError,
     r"sentences\[1\] is an empty sentence"),
    ("use_text a tuple of one", lambda a: a.use_text(("Hi.",)), ConfigError, "1 different sentence"),
    ("use_text precision", lambda a: a.use_text(None, precisions=("int4",)), ConfigError,
     r"precisions\[0\] 'int4' is not a precision here; choose from 'int8'"),
    ("use_text precision str", lambda a: a.use_text(None, precisions="int8"), ConfigTypeError,
     r"precisions must be a list of precisions, not a string: write \['int8'\]"),
    ("run_sweep missing file", lambda a: a.run_sweep("/nonexistent.yaml"), ConfigError,
     "spec '/nonexistent.yaml': no such file"),
    ("run_sweep not YAML", lambda a: a.run_sweep("models: [bert-tiny"), ConfigError, "not valid YAML"),
    ("run_sweep a list", lambda a: a.run_sweep("- bert-tiny\n- minilm\n"), ConfigError, "must be a YAML mapping"),
    ("run_sweep unknown axis", lambda a: a.run_sweep({"modles": ["bert-tiny"]}), ConfigError,
     "unknown sweep key.*modles"),
    ("run_sweep a number", lambda a: a.run_sweep(42), ConfigTypeError, "spec must be a dict, a YAML file's path"),
    ("run_sweep executor", lambda a: a.run_sweep(SPEC, "cloud"), ConfigError,
     "executor must be one of 'local' or 'ray', not 'cloud'"),
    ("run_sweep out", lambda a: a.run_sweep(SPEC, out="/proc/x.json"), OutputPathError, "/proc/x.json"),
    ("save_report /proc", lambda a: a.save_report("/proc/x.html"), OutputPathError, "cannot write /proc/x.html"),
    ("save_report ''", lambda a: a.save_report(""), ConfigError, "path is an empty path; give None for the default"),
    ("save_report 3", lambda a: a.save_report(3), ConfigTypeError, "path must be a path"),
    ("set_view", lambda a: a.set_view("sideways"), ConfigError, "view must be one of 'layer' or 'model'"),
    ("set_view layer", lambda a: a.set_view("layer", 99), ConfigError, "layer must be a whole number from 0 to 1"),
    ("click", lambda a: a.click("no-such-node"), ConfigError, "item must be the id of a node or group drawn in the after"),
    ("click pane", lambda a: a.click("no-such-node", "middle"), ConfigError, "pane must be one of 'before' or 'after'"),
    ("profile []", lambda a: a.profile([]), ConfigError, "indices is empty"),
    ("profile [10**6]", lambda a: a.profile([10**6]), ConfigError, r"indices\[0\] must be a whole number from 0 to"),
    ("profile '0'", lambda a: a.profile("0"), ConfigTypeError, "indices must be a list"),
    ("ablate a string", lambda a: a.ablate("attention"), ConfigTypeError, r"not a string: write \['attention'\]"),
    ("ablate unknown", lambda a: a.ablate(["no-such-step"]), ConfigError, r"steps\[0\] 'no-such-step' is not a fusion"),
    ("run_benchmark unknown", lambda a: a.run_benchmark(["fused"]), ConfigError,
     r"names\[0\] 'fused' is not a variant here; choose from '0: export'"),
    ("run_benchmark a string", lambda a: a.run_benchmark("0: export"), ConfigTypeError, "names must be a list"),
    ("variants []", lambda a: a.variants([]), ConfigError, "names is empty"),
    ("tune 123", lambda a: a.tune(123), ConfigTypeError, "out must be a path"),
    ("tune /proc", lambda a: a.tune("/proc/deploy"), OutputPathError, "/proc/deploy"),
    ("session layer", lambda a: a.show_session_layer("max"), ConfigError, "level must be one of 'disable'"),
    ("check_parity", lambda a: a.check_parity("yes"), ConfigTypeError, "wait must be True or False"),
    ("wait -1", lambda a: a.wait(-1), ConfigError, "timeout must be a number of seconds, 0 or more"),
    ("wait nan", lambda a: a.wait(float("nan")), ConfigError, "timeout must be"),
    ("wait_benchmark '10'", lambda a: a.wait_benchmark("10"), ConfigTypeError, "timeout must be"),
    ("wait_parity True", lambda a: a.wait_parity(True), ConfigTypeError, "timeout must be"),
    ("remove_rule 3", lambda a: a.remove_rule(3), ConfigTypeError, "name must be a string"),
    ("remove_rule unknown", lambda a: a.remove_rule("never_added"), FusionError, "no rule named 'never_added'"),
    ("add_rule", lambda a: a.add_rule("x"), FusionError, "instance of a workbench.fusion.Rule subclass, not str"),
    ("background", _set("background", "no"), ConfigTypeError, "background must be True or False, not 'no'"),
    ("rule_time_limit_s", _set("rule_time_limit_s", 0), ConfigError, "rule_time_limit_s must be a positive number"),
]


@pytest.mark.parametrize("call,error,says", [w[1:] for w in WRONG], ids=[w[0] for w in WRONG])
def test_a_wrong_argument_raises_at_the_call_and_changes_nothing(app, call, error, says):
    before = _seen(app)
    with pytest.raises(error, match=says) as e:
        call(app)
    assert "\n" not in str(e.value)
    assert _seen(app) == before


def test_the_errors_are_also_python_s_own_kinds(app):
    """``except ValueError`` / ``except TypeError`` catch them, as they would pandas' or ipywidgets'."""
    with pytest.raises(ValueError):
        app.select_step(-1)
    with pytest.raises(TypeError):
        app.toggle("attention", "yes")


CONSTRUCTED = [
    ({"panel": "left"}, ConfigError, "panel must be one of 'inline' or 'side', not 'left'"),
    ({"background": "yes"}, ConfigTypeError, "background must be True or False"),
    ({"autorun": 1}, ConfigTypeError, "autorun must be True or False, not 1"),
    ({"auto_parity": "on"}, ConfigTypeError, "auto_parity must be True or False"),
    ({"exporter": "onnx"}, ConfigError, "exporter must be one of"),
    ({"engine": "fast"}, ConfigError, "engine must be one of"),
    ({"attention": "flash"}, ConfigError, "attention must be one of"),
    ({"opset": "17"}, ConfigTypeError, "'opset'"),
    ({"opset": 5}, ConfigError, "opset must be from 7 to 30, not 5"),
    ({"seq": 0}, ConfigError, "seq must be at least 1"),
    ({"view": "sideways"}, ConfigError, "view must be one of"),
    ({"nonsense": 1}, ConfigError, "unknown app setting"),
    ({"source": 123}, ConfigTypeError, "source must be a string, not 123"),
    ({"source": ""}, ConfigError, "source is empty"),
]


@pytest.mark.parametrize("kw,error,says", CONSTRUCTED, ids=[next(iter(c[0])) + "=" + repr(next(iter(c[0].values())))
                                                          for c in CONSTRUCTED])
def test_the_constructor_checks_its_arguments_before_anything_runs(tiny_export, kw, error, says):
    from workbench.ui.app import Workbench

    kw = {"source": "bert-tiny", "autorun": False, **kw}
    with pytest.raises(error, match=says) as e:
        Workbench(kw.pop("source"), **kw)
    assert "\n" not in str(e.value)


def test_from_onnx_checks_its_path():
    from workbench.ui.app import Workbench

    with pytest.raises(ConfigTypeError, match="path must be a path"):
        Workbench.from_onnx(None)


def test_valid_calls_still_work(app, tmp_path):
    att = [s.step for s in app.snapshots].index("attention")
    app.select_step(0)
    assert app.state.step == 0 and app.state.pair.index == 0
    app.select_step(att)
    nodes = app.snapshots[-1].nodes
    app.toggle("attention", False)
    assert "attention" in app.state.disabled and app.snapshots[-1].nodes > nodes
    app.toggle("attention", True)
    assert app.state.disabled == [] and app.snapshots[-1].nodes == nodes
    app.set_view("model")
    app.click("group:layer 1")  # open a layer, then fold it again: an opened layer is no longer drawn as a box
    assert app.state.expanded == ["layer 1"]
    app.click("group:layer 1")
    assert app.state.expanded == []
    app.set_view("layer", 1)
    app.use_text("The cat sat on the mat.\nHow do I reset my password?\nParis is the capital of France.",
                 precisions=())
    assert app.error is None, app.error
    assert app.state.text_line.startswith("3 sentences") and len(app.state.sentences) == 3
    out = app.save_report(tmp_path / "r.html")
    assert out == tmp_path / "r.html" and out.is_file() and app.state.report_path == str(out)


def test_a_wrong_value_from_a_widget_goes_to_the_status_line(app):
    """A click has no cell to raise in: what the API raises at the call is the app's error line instead."""
    app.text_panel.w_text.value = "only one sentence"
    app.text_panel.w_check.click()
    assert "sentences holds 1 different sentence" in app.error and app.state.status.kind == "error"
    app.toggle("attention", True)  # new work clears it
    assert app.error is None


def test_already_running_clears_when_that_measurement_ends(app):
    """A refusal that only says other work is in the way lasts as long as that work."""
    app.profile_panel.w_runs.value = 3
    app.profile_panel.w_seq.value = 16
    app.background = True
    try:
        app.profile([0])
        app.run_benchmark()  # refused: the profile is still measuring (two at once would time each other)
        assert app.error == "a measurement is already running: wait for it or stop it first"
        app.wait_benchmark(300)
    finally:
        app.background = False
    assert app.error is None and app.profiles and app.state.jobs["profile"].state == "done"
    assert "benchmark" not in app.state.jobs  # the refused benchmark never started


def test_an_error_of_finished_work_clears_when_new_work_starts(app, tmp_path):
    missing = str(tmp_path / "no-such-model")
    app.run_sweep({**SPEC, "models": [missing]})  # the spec is fine; its model is found missing while it runs
    assert app.error and missing in app.error and "\n" not in app.error
    app.toggle("attention", True)
    assert app.error is None
