"""The report: task parity per fusion step and per benchmark variant when text is given; unchanged without."""

import os
import re
import subprocess
import sys

import pytest

from textmodels import save_task_model
from workbench.config import BenchConfig
from workbench.models import resolve
from workbench.report import collect
from workbench.viz.report import render, task_parity_words

SENTENCES = ["The cat sat on the mat.", "A cat was sitting on a rug.", "How do I reset my password?",
             "I forgot my password.", "Stocks fell 3.2% on Tuesday.", "The market dropped sharply.", "Hi!",
             "The committee will meet on 12 March 2025 to discuss the budget for the next fiscal year."]
FAST = BenchConfig(runs=3, warmup=1, threads=1)
STEP_COLUMNS = ["step", "nodes", "fused", "elapsed s", "parity", "why not fused"]
VARIANT_COLUMNS = ["variant", "provider", "p50 ms", "p90 ms", "p99 ms", "runs", "floor", "x floor",
                   "x MatMuls alone", "max abs diff", "cosine"]


def wb(*args):
    return subprocess.run([sys.executable, "-m", "workbench.cli", *map(str, args)], capture_output=True, text=True,
                          env=os.environ, timeout=600)


def _headers(html: str) -> list[list[str]]:
    return [re.findall(r"<th>(.*?)</th>", row) for row in re.findall(r"<table><tr>(.*?)</tr>", html)]


def _rows(html: str, table: int) -> dict[str, dict[str, str]]:
    """Table number ``table`` as {first cell: {column: cell text}}."""
    body = re.findall(r"<table>(.*?)</table>", html)[table]
    trs = re.findall(r"<tr>(.*?)</tr>", body)
    cols = re.findall(r"<th>(.*?)</th>", trs[0])
    out = {}
    for tr in trs[1:]:
        cells = re.findall(r"<td[^>]*>(.*?)</td>", tr)
        out[cells[0]] = dict(zip(cols, cells))
    return out


@pytest.fixture(scope="module")
def embedding_folder(tmp_path_factory):
    return save_task_model("embedding", tmp_path_factory.mktemp("report") / "tiny embedding")


def test_task_parity_in_words():
    assert task_parity_words(None) == ""
    assert task_parity_words({"kind": "embedding", "sentences": 7, "top1_agreement": 1.0, "spearman": 0.99996,
                              "min_cosine": 0.9999}) == "top-1 100%, Spearman 1.0000"
    assert task_parity_words({"kind": "masked_lm", "positions": 12, "top1_agreement": 0.75,
                              "top5_agreement": 0.9}) == "top-1 75%, top-5 90% (12 blanks)"
    assert task_parity_words({"kind": "masked_lm", "positions": 0, "top1_agreement": None,
                              "top5_agreement": None}) == "no masked positions"
    assert task_parity_words({"kind": "classification", "answers": 4, "label_agreement": 1.0,
                              "max_prob_change": 2.1e-5}) == "labels 100%, largest probability change 2.1e-05"
    # A share just short of all never reads as 100%.
    assert task_parity_words({"kind": "embedding", "sentences": 39, "top1_agreement": 0.9996, "spearman": 0.98631,
                              "min_cosine": 0.9}) == "top-1 99.9%, Spearman 0.9863"
    assert task_parity_words({"kind": "classification", "answers": 39, "label_agreement": 37 / 39,
                              "max_prob_change": 0.25}) == "labels 94.8%, largest probability change 0.25"


def test_report_shows_task_parity_per_step_and_per_variant(embedding_folder):
    data = collect(resolve(embedding_folder), bench_cfg=FAST, text=SENTENCES)
    assert not data["errors"], data["errors"]
    assert data["text"]["sentences"] == 8 and data["text"]["kind"] == "embedding"
    steps = data["fusion"]["steps"]
    # Every step was checked on the text (not only the last), in the snapshot's own shape.
    assert steps and all(s["task_parity"]["kind"] == "embedding" and s["task_parity"]["sentences"] == 8
                         for s in steps)
    variants = {v["name"]: v for v in data["bench"]["variants"]}
    assert variants["torch"]["task_parity"] is None  # the reference
    assert all(variants[n]["task_parity"]["kind"] == "embedding" for n in ("unfused", "fused", "int8"))
    assert variants["fused"]["task_parity"]["top1_agreement"] == 1.0
    assert data["bench"]["floor_ms"] is None  # a length mix has no single floor
    assert data["bench"]["config"]["text"] == "8 sentences in 2 batches"

    html = render(data)
    headers = _headers(html)
    col = "answers on the text (sentence embeddings)"
    assert headers[2] == STEP_COLUMNS[:-1] + [col, "why not fused"]  # after Model and Export
    assert headers[3] == VARIANT_COLUMNS + [col]
    step_rows = _rows(html, 2)
    for s in steps:
        assert step_rows[s["name"]][col] == task_parity_words(s["task_parity"]), s["name"]
    assert step_rows[steps[-1]["name"]][col].startswith("top-1 100%, Spearman 1.0")
    variant_rows = {r["variant"]: r[col] for r in _rows(html, 3).values()}
    assert variant_rows["PyTorch eager"] == "reference"
    for name in ("unfused", "fused", "int8"):
        assert task_parity_words(variants[name]["task_parity"]) in variant_rows.values()
    assert "Task parity on 8 sentences in 2 padded batches, against the unfused export: sentence embeddings" in html
    assert "against PyTorch eager" in html


def test_without_text_the_report_is_unchanged(embedding_folder):
    data = collect(resolve(embedding_folder), bench_cfg=FAST)
    assert "text" not in data
    assert all(s["task_parity"] is None for s in data["fusion"]["steps"])
    assert all(v["task_parity"] is None for v in data["bench"]["variants"])
    assert data["bench"]["config"]["batch"] == 1 and data["bench"]["config"]["sequence"] == 128
    html = render(data)
    headers = _headers(html)
    assert headers[2] == STEP_COLUMNS and headers[3] == VARIANT_COLUMNS
    assert "answers on the text" not in html and "Task parity" not in html
    # int8 is never shown unchecked: its answers on the built-in sentences (issue 29), in a note.
    assert data["bench"]["int8_answers"]["int8"]["sentences"] == 39 and "int8 (dynamic)'s answers on the built-in" in html
    # Only the last step is checked without text, as before.
    assert [s["parity"] is not None for s in data["fusion"]["steps"]][-1]


def test_cli_report_with_text_on_a_classifier(tmp_path):
    folder = save_task_model("sequence_classification", tmp_path / "tiny classifier")
    text = tmp_path / "sentences.txt"
    text.write_text("\n".join(SENTENCES) + "\n")
    out = wb("report", folder, "--text", text, "-o", tmp_path / "out", "--runs", "3", "--threads", "1")
    assert out.returncode == 0, out.stderr
    html = next((tmp_path / "out").glob("report-*.html")).read_text()
    assert "answers on the text (classification)" in html
    assert html.count("labels 100%, largest probability change") >= 3  # steps and the fused variant at least
    assert "Task parity on 8 sentences" in html
    # A bad text file fails at once, in one line, and writes nothing.
    bad = wb("report", folder, "--text", tmp_path / "nope.txt", "-o", tmp_path / "never")
    assert bad.returncode == 2 and "no such text file" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "never").exists()


def test_the_reports_fused_variant_is_the_graph_its_fusion_table_shows():
    """With another exporter, opset and plan, the timed "fused" model is the timeline's last snapshot."""
    import onnx

    from workbench.config import ExportConfig, FusionPlan
    from workbench.measure.recipes import standard_variants

    plan = FusionPlan(disabled=frozenset({"attention"}))
    fused = standard_variants("bert-tiny", ["fused"], exporter="dynamo", opset=18, plan=plan)[0]
    model = onnx.load(str(fused.model)) if not isinstance(fused.model, bytes) else onnx.load_from_string(fused.model)
    ops = {n.op_type for n in model.graph.node}
    assert "Attention" not in ops and "SkipLayerNormalization" in ops  # the plan's step stayed off
    assert max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) == 18
    data = collect("bert-tiny", ExportConfig(exporter="dynamo", opset=18), plan, FAST, bench=False)
    assert data["fusion"]["steps"][-1]["fused"].get("Attention", 0) == 0
