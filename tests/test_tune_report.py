"""The report leads with the tune's recommendation, writes every setting as words and labels plots as its tables."""

from __future__ import annotations

import re

from workbench.measure.variants.labels import variant_label
from workbench.report.data import collect
from workbench.report.html import render, words


def _tables(html: str) -> list[str]:
    return re.findall(r"<table.*?</table>", html, re.S)


def test_the_report_leads_with_the_recommendation_and_shows_no_raw_dicts():
    from workbench.config import BenchConfig

    data = collect("bert-tiny", bench_cfg=BenchConfig(seq=16, runs=3, warmup=1, threads=1))
    # A tune result as measure.tune returns it, without running a tune (that is test_tune's job): plain data.
    data["tune"] = {
        "recommended": {"latency": {"variant": "int8-guarded", "label": "x", "p50_ms": 1.5, "batch": 1,
                                    "why": "the fastest whose answers hold.", "task_parity": None, "parity": None},
                        "throughput": {"variant": "openvino", "label": "y", "sentences_per_s": 812.0, "batch": 32,
                                       "why": "the fastest in batches.", "task_parity": None, "parity": None}},
        "variants": [{"name": "torch", "p50_ms": 9.0, "p90_ms": 9.5, "parity": None, "task_parity": None, "holds": True},
                     {"name": "openvino", "p50_ms": 3.0, "p90_ms": 3.1, "parity": {"cosine": 1.0}, "holds": True,
                      "task_parity": {"kind": "embedding", "top1_agreement": 1.0, "spearman": 0.9991}},
                     {"name": "int8-guarded", "p50_ms": 1.5, "p90_ms": 1.6, "parity": {"cosine": 1.0}, "holds": True,
                      "task_parity": {"kind": "embedding", "top1_agreement": 1.0, "spearman": 0.9931}}],
        "skipped": [{"name": "torch-compile", "why": "no C++ compiler"}]}
    html = render(data)
    first_h2 = re.search(r"<h2>(.*?)</h2>", html).group(1)
    assert first_h2.startswith("Recommended here: answer-guarded int8 for latency, 1.50 ms")
    assert "Recommended here: OpenVINO, its default precision for throughput, 812 sentences/s" in html
    assert html.index("Recommended here") < html.index("<h2>Model</h2>")
    assert "OpenVINO, its default precision" in html and "torch.compile (inductor) not measured: no C++ compiler" in html
    for t in _tables(html):  # export settings, parity, machine, packages: words, never {...} or ["..."]
        cells = re.findall(r"<td[^>]*>(.*?)</td>", t, re.S)
        assert not [c for c in cells if c.lstrip().startswith(("{", "[")) or "&quot;" in c or '": ' in c], cells[:5]
    # The latency plot names its bars as the tables do.
    for v in data["bench"]["variants"]:
        assert f'"{variant_label(v["name"])}"' in html


def test_words_writes_nested_settings_plainly():
    assert words({"exporter": "torchscript", "opset": 17, "dynamic": ["batch", "sequence"]}) == \
        "exporter torchscript; opset 17; dynamic batch, sequence"
    assert words({"onnxruntime": {"version": "1.31.1"}, "gpu": None}) == "onnxruntime version 1.31.1"


def test_the_report_pictures_one_encoder_layer_before_and_after():
    data = collect("bert-tiny", bench=False)
    pics = data["layer_pictures"]
    assert pics["before"].startswith("<svg") and pics["after"].startswith("<svg")
    # The fused layer has fewer operators than the exported one.
    assert pics["after"].count("<circle") + pics["after"].count("<polygon") < \
        pics["before"].count("<circle") + pics["before"].count("<polygon")
    assert "<polygon" in pics["after"]  # fused operators drawn as diamonds
    html = render(data)
    assert "One encoder layer before and after the fusions" in html and html.count("font-family='sans-serif'") == 2
