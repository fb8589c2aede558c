"""The report: task parity per fusion step and per benchmark variant when text is given; unchanged without."""

import os
import re
import subprocess
import sys

import pytest

from textmodels import save_task_model
from workbench.config import BenchConfig
from workbench.models import resolve
from workbench.report.data import collect, summary
from workbench.report.html import render
from workbench.viz.summary import task_parity_words

SENTENCES = ["The cat sat on the mat.", "A cat was sitting on a rug.", "How do I reset my password?",
             "I forgot my password.", "Stocks fell 3.2% on Tuesday.", "The market dropped sharply.", "Hi!",
             "The committee will meet on 12 March 2025 to discuss the budget for the next fiscal year."]
FAST = BenchConfig(runs=3, warmup=1, threads=1)
STEP_COLUMNS = ["step", "nodes", "fused here", "seconds", "parity", "why not fused"]
VARIANT_COLUMNS = ["variant", "p50 ms", "p90 ms", "p99 ms", "runs", "floor", "x floor", "x MatMuls alone",
                   "max abs diff", "cosine", "nodes per provider"]


def wb(*args):
    return subprocess.run([sys.executable, "-m", "workbench.cli", *map(str, args)], capture_output=True, text=True,
                          env=os.environ, timeout=600)


def _tables(html: str) -> dict[str, str]:
    """The plain tables of the report, keyed by their first column's header ("step", "variant", ...): the first
    table of each (the steps that cannot apply come after the steps' own table)."""
    out: dict[str, str] = {}
    for t in re.findall(r"<table><tr>.*?</table>", html, re.S):
        out.setdefault(re.search(r"<th>(.*?)</th>", t).group(1), t)
    return out


def _header(html: str, first: str) -> list[str]:
    return re.findall(r"<th>(.*?)</th>", re.search(r"<tr>(.*?)</tr>", _tables(html)[first]).group(1))


def _rows(html: str, first: str) -> dict[str, dict[str, str]]:
    """The table whose first column is ``first``, as {first cell: {column: cell text}}."""
    trs = re.findall(r"<tr>(.*?)</tr>", _tables(html)[first])
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
    col = "answers on the text (sentence embeddings)"
    assert _header(html, "step") == STEP_COLUMNS[:-1] + [col, "why not fused"]
    # A length mix has no single floor: its columns are left out rather than shown empty.
    assert _header(html, "variant") == [c for c in VARIANT_COLUMNS if "floor" not in c and "MatMuls" not in c] + [col]
    step_rows = _rows(html, "step")
    for s in steps:
        if s["name"] in step_rows:  # a step that cannot apply is folded away, not given a row
            assert step_rows[s["name"]][col] == task_parity_words(s["task_parity"]), s["name"]
    assert step_rows[steps[-1]["name"]][col].startswith("top-1 100%, Spearman 1.0")
    variant_rows = {r["variant"]: r[col] for r in _rows(html, "variant").values()}
    assert variant_rows["PyTorch eager"] == "reference"
    for name in ("unfused", "fused", "int8"):
        assert task_parity_words(variants[name]["task_parity"]) in variant_rows.values()
    assert "Task parity on 8 sentences in 2 padded batches, against the unfused export: sentence embeddings" in html
    assert "against PyTorch eager" in html


@pytest.fixture(scope="module")
def plain_data(embedding_folder):
    """The report's data without text (export, timeline, the standard benchmark)."""
    return collect(resolve(embedding_folder), bench_cfg=FAST)


def _visible_text(html: str) -> str:
    """What a reader sees: the page without its scripts (plotly's), styles and pictures."""
    html = re.sub(r"<(script|style|svg)\b.*?</\1>", " ", html, flags=re.S)
    return re.sub(r"<[^>]+>", " ", html)


def test_the_report_opens_with_the_story_and_folds_the_steps_that_cannot_apply(plain_data):
    data = plain_data
    html = render(data)
    box = html[html.index("<div class='summary'>"):html.index("<h2>")]  # the first screen, above every section
    text = _visible_text(box)
    s = summary(data)
    assert s["fusion"]["attention_nodes"] == 2 and s["fusion"]["nodes_before"] > s["fusion"]["nodes_after"]
    assert f"2 attention nodes, {s['fusion']['nodes_before']} → {s['fusion']['nodes_after']} nodes" in text
    # int8's answers, checked on the built-in sentences even without --text (issue 29).
    for words in ("PyTorch eager", "fused (all steps)", "int8", "faster", "int8 answers",
                  "checked on 39 sentences: the nearest other sentence"):
        assert words in text, words
    assert box.count("<svg") == 2  # the layer before and after the fusions, beside the facts
    # Settings and parity in words and rounded figures; no row without something to say.
    page = _visible_text(html)
    assert not re.search(r"\d\.\d{7,}", page), re.search(r".{40}\d\.\d{7,}.{10}", page)
    model = re.search(r"<table class='kv'>(.*?)</table>", html).group(1)
    assert "<td></td>" not in model and "untested" not in model and "<td>folder</td>" in model  # a folder: its path
    assert re.search(r"max abs diff \d\.\de-\d+, cosine \d\.\d{6}<", model)
    # Steps whose anchors are absent sit under one line; a step that fused nothing but could keeps its row.
    steps = data["fusion"]["steps"]
    skipped = [st["name"] for st in steps if st["skipped"]]
    assert skipped and "shape" in skipped  # bert-tiny's TorchScript graph has no Concat after the attention fusion
    fold = re.search(r"<details class='na'><summary>not applicable to this model \((\d+)\)</summary>(.*?)</details>",
                     html, re.S)
    assert fold and all(f"<td>{n}</td>" in fold.group(2) for n in skipped)
    rows = _rows(html, "step")
    assert not set(skipped) & set(rows) and int(fold.group(1)) == len(steps) - len(rows)
    assert rows["sdpa_attention"]["why not fused"].startswith("fused nothing")


def test_without_text_the_report_is_unchanged(plain_data):
    data = plain_data
    assert "text" not in data
    assert all(s["task_parity"] is None for s in data["fusion"]["steps"])
    assert all(v["task_parity"] is None for v in data["bench"]["variants"] if v["name"] != "int8")
    assert data["bench"]["config"]["batch"] == 1 and data["bench"]["config"]["sequence"] == 128
    html = render(data)
    assert _header(html, "step") == STEP_COLUMNS and _header(html, "variant") == VARIANT_COLUMNS
    # Which provider ran each ONNX Runtime session's nodes (ONNX Runtime's own record): all of them the CPU's here.
    by = {v["name"]: v for v in data["bench"]["variants"]}
    cells = {name: row["nodes per provider"] for name, row in _rows(html, "variant").items()}
    assert cells["PyTorch eager"] == "" and cells["fused (all steps)"] == f"CPU {by['fused']['assignment']['nodes']}"
    assert by["fused"]["assignment"]["counts"] == {"CPU": by["fused"]["assignment"]["nodes"]}
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
    path = next((tmp_path / "out").glob("report-*.html"))
    html = path.read_text()
    # The terminal ends with what was found, in a few lines, then where the report is.
    lines = out.stdout.strip().splitlines()
    assert 4 <= len(lines) <= 6 and lines[-1] == f"report: {path}", lines
    assert lines[0].startswith("tiny classifier") and "export" in lines[0]
    assert next(x for x in lines if x.startswith("Fused: ")) and next(x for x in lines if x.startswith("Latency (p50"))
    assert next(x for x in lines if x.startswith("int8 answers: ")).split(": ", 1)[1].startswith(
        "checked on 8 sentences: the same label for ")
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
    from workbench.measure.variants import standard_variants

    plan = FusionPlan(disabled=frozenset({"attention"}))
    fused = standard_variants("bert-tiny", ["fused"], exporter="dynamo", opset=18, plan=plan)[0]
    model = onnx.load(str(fused.model)) if not isinstance(fused.model, bytes) else onnx.load_from_string(fused.model)
    ops = {n.op_type for n in model.graph.node}
    assert "Attention" not in ops and "SkipLayerNormalization" in ops  # the plan's step stayed off
    assert max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) == 18
    data = collect("bert-tiny", ExportConfig(exporter="dynamo", opset=18), plan, FAST, bench=False)
    assert data["fusion"]["steps"][-1]["fused"].get("Attention", 0) == 0


def test_the_clis_step_table_folds_the_steps_that_cannot_apply_into_one_line():
    import json

    out = wb("fuse", "bert-tiny")
    assert out.returncode == 0, out.stderr
    steps = json.loads(wb("fuse", "bert-tiny", "--json").stdout)["steps"]
    skipped = [s["name"] for s in steps if s["skipped"]]
    assert skipped
    lines = out.stdout.splitlines()
    table = [x.split()[0] for x in lines if x[:1].isalpha() and len(x.split()) > 2 and x.split()[1].isdigit()]
    assert not set(skipped) & set(table) and "sdpa_attention" in table  # fused nothing, but could: kept
    from workbench.report.data import not_applicable

    na = [s["name"] for s in steps if not_applicable(s)]  # the skipped ones, and rotary patterns BERT lacks
    fold = [x for x in lines if x.startswith("not applicable to this model")]
    assert len(fold) == 1 and fold[0].startswith(f"not applicable to this model ({len(na)}): ")
    assert set(skipped) <= set(na) and all(n in fold[0] for n in na)


def test_summary_lines_say_what_was_found_in_a_few_rounded_words():
    """The terminal's summary from report data alone: an .onnx file's (no PyTorch: ONNX Runtime unfused is the
    reference), int8 checked on text, and a tune's recommendation."""
    from workbench.viz.summary import sci, summary_lines

    tp = {"kind": "embedding", "sentences": 39, "top1_agreement": 0.9487, "spearman": 0.98631}
    data = {"model": {"label": "model.onnx"}, "errors": ["fusion: something went wrong"],
            "export": {"export": {"exporter": "dynamo", "opset": None, "attention": "sdpa"}, "opset": 18, "nodes": 444},
            "fusion": {"engine": "onnxscript", "input": {"nodes": 444},
                       "final": {"nodes": 130, "attention_nodes": 12, "fused": {"Attention": 12, "BiasGelu": 12}},
                       "steps": [{"name": "attention", "nodes": 130}]},
            "bench": {"config": {"batch": 1, "sequence": 128, "threads": 2},
                      "variants": [{"name": "unfused", "p50_ms": 101.09, "parity": None},
                                   {"name": "fused", "p50_ms": 97.74, "parity": {"cosine": 1.0}},
                                   {"name": "int8", "p50_ms": 33.62, "parity": {"cosine": 0.99955}, "task_parity": tp}]},
            "tune": {"recommended": {  # per workload, as measure.tune returns it
                "latency": {"variant": "int8-guarded", "p50_ms": 47.9, "batch": 1, "why": "fastest that holds"},
                "throughput": {"variant": "openvino", "sentences_per_s": 812.4, "batch": 32, "why": "in batches"}}}}
    lines = summary_lines(summary(data), "out/report.html")
    assert lines == [
        "model.onnx, dynamo export, opset 18, sdpa attention",
        "Fused: 12 attention nodes, 444 → 130 nodes, by the onnxscript rules (Attention 12, BiasGelu 12)",
        "Latency (p50, batch 1, sequence 128, 2 threads): ONNX Runtime, no optimizations 101.1 ms; "
        "fused (all steps) 97.74 ms (1.03x faster); int8 (dynamic) 33.62 ms (3.01x faster)",
        "int8 answers: checked on 39 sentences: the nearest other sentence is the same for 94.8% of them; their "
        "similarities rank alike at Spearman 0.9863: int8 changes the answers",
        "Recommended for latency: answer-guarded int8, 47.90 ms",
        "Recommended for throughput: OpenVINO, its default precision, 812 sentences/s at batch 32",
        "error: fusion: something went wrong",
        "report: out/report.html"]
    assert sci(3.084540367126465e-06) == "3.1e-6" and sci(0.0) == "0"
