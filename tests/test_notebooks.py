"""Execute the workshop notebooks end to end (on bert-tiny, to keep CI fast)."""

from __future__ import annotations

import os
import time

import pytest

import notebook_runner

NAMES = ("01_fusion_tour", "02_profiling_cpu_gpu", "03_workshop_exercises", "04_exporter_matrix", "06_write_a_fusion")


def test_every_notebook_is_valid_and_committed_without_outputs():
    # every notebook in the folder, 05 included (it runs in test_task_parity_models.py)
    for name in sorted(p.stem for p in notebook_runner.NOTEBOOKS.glob("*.ipynb")):
        notebook_runner.assert_committed_clean(name)
    for name in NAMES:
        notebook_runner.assert_committed_clean(name)
        # each notebook reads the model from the override variable
        assert any("WORKBENCH_NOTEBOOK_MODEL" in c.source for c in notebook_runner.read(name).cells), name


@pytest.fixture(scope="module")
def tiny_modernbert(tmp_path_factory):
    """A two-layer ModernBERT (one global, one 16-token local layer) for notebook 04's modern-encoder section."""
    from test_workshop import save_tiny_modernbert

    return save_tiny_modernbert(tmp_path_factory.mktemp("modernbert"))


@pytest.mark.parametrize("name", NAMES)
def test_notebook_runs_start_to_finish(name, tmp_path, monkeypatch, request):
    model = os.environ.get("WORKBENCH_NOTEBOOK_MODEL", "bert-tiny")
    monkeypatch.setenv("WORKBENCH_NOTEBOOK_MODEL", model)
    if name == "04_exporter_matrix" and "WORKBENCH_NOTEBOOK_MODERN" not in os.environ:
        monkeypatch.setenv("WORKBENCH_NOTEBOOK_MODERN", str(request.getfixturevalue("tiny_modernbert")))
    t0 = time.perf_counter()
    book, joined = notebook_runner.run(name, tmp_path)
    elapsed = time.perf_counter() - t0
    if name == "01_fusion_tour":
        # the app was displayed as a widget, and it loaded without an error
        assert any("application/vnd.jupyter.widget-view+json" in out.get("data", {})
                   for c in book.cells for out in c.get("outputs", []))
        assert "loaded |" in joined
    if name == "03_workshop_exercises":
        # every check names the answer and a reason, and no exercise's premise is false on this export
        checks = [line for line in joined.splitlines() if "Solution:" in line]
        assert len(checks) == 6 and all("Why: " in line for line in checks), checks
        assert "does not hold" not in joined and "0 nodes replaced" not in joined and "{}" not in joined
    if name == "04_exporter_matrix":
        # the matrix is filled: the sdpa cell is fused by the workbench's own rule, ORT alone fuses 0 there
        assert "workbench sdpa rule" in joined
        assert "could not produce opset 14" in joined
        # the opset-23 section: the standard op mapped by our step, parity kept, the three paths timed
        assert "standard_attention" in joined and "ok=True" in joined and "Fastest here:" in joined
        # the modern encoder: the exercise's answer with the engine's words for its failure
        assert "SkipLayerNormalization by ORT on ModernBERT (dynamo): not answered yet. Solution: 0." in joined
        assert "failed in this step" in joined and "does not hold" not in joined
    if name == "06_write_a_fusion":
        # the premise, the rule added to the open app as a step, its parity, its reasons elsewhere, what it buys
        assert "4 bias Adds still feed a SkipLayerNormalization" in joined
        assert "+4 SkipLayerNormalization" in joined and "left after the chain: 0 bias Adds" in joined
        assert "same outputs" in joined and "has its bias input already" in joined
        assert "skip_norm_bias: " in joined and "noise band" in joined
        from workbench.fusion import BY_NAME

        assert "skip_norm_bias" not in BY_NAME  # the kernel's rule stayed in the kernel
    print(f"{name}: {elapsed:.1f} s")
