"""The app's Tune action: app.tune(out) measures, recommends, saves, and the panel and the report show it."""

from __future__ import annotations

import pytest

from workbench.errors import ConfigError


@pytest.fixture(scope="module")
def app(tiny_export):
    from workbench.ui.app import Workbench

    tiny_export()
    w = Workbench("bert-tiny", background=False)
    yield w
    w.close()


def test_tune_button_recommends_saves_and_reports(app, tmp_path):
    app.profile_panel.w_runs.value = 3
    app.profile_panel.w_seq.value = 16
    app.profile_panel.w_threads.value = 1
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "x").write_text("mine")
    with pytest.raises(ConfigError, match="not empty"):  # refused at the call, nothing measured
        app.tune(taken)
    assert app.tune_result is None and app.error is None
    assert not app.profile_panel.w_tune.disabled
    app.tune(tmp_path / "deploy")
    res = app.tune_result
    assert res is not None, app.error
    assert set(res.recommended) == {"latency"}  # no text: the latency workload, answers on the built-in split
    assert res.recommended["latency"].variant in {v.name for v in res.variants}
    assert res.saved["dir"] == str(tmp_path / "deploy") and res.to_json()["saved"] == res.saved
    assert (tmp_path / "deploy" / "model.onnx").is_file() and (tmp_path / "deploy" / "README.md").is_file()
    # bert-tiny borrows the packaged MiniLM's tokenizer (same vocabulary): answers on the built-in sentences.
    from workbench.text import BUILTIN_SENTENCES

    assert res.config["answers_text"]["sentences"] == len(BUILTIN_SENTENCES)
    assert res.config["split"] == {"search": len(BUILTIN_SENTENCES) - 13, "check": 13, "source": "built-in"}
    assert (tmp_path / "deploy" / "tokenizer_config.json").is_file()
    import html

    from workbench.measure.variants.labels import variant_label

    assert html.escape(variant_label(res.recommended["latency"].variant)) in app.profile_panel.w_tune_result.value
    assert "Recommended for" in app.save_report(tmp_path / "r.html").read_text()


def test_int8_in_the_app_has_its_answers_checked_without_any_text(app):
    """Wherever int8 is timed its answers are checked (the built-in sentences); the timing keeps its shape."""
    app.profile_panel.w_runs.value = 2
    app.profile_panel.w_seq.value = 16
    app.profile_panel.w_threads.value = 1
    app.profile_panel.w_int8.value = True
    try:
        app.run_benchmark()
        app.wait_benchmark()
        r = app.state.bench_result
        assert r is not None, app.error
        int8 = r["int8"]
        assert int8.task_parity["kind"] == "embedding" and int8.task_parity["sentences"] == 39
        assert r.config["text"] is None  # timed at one shape, not on the sentences
    finally:
        app.profile_panel.w_int8.value = False
