"""Issue 42 item 5: the fastest engine named where it wins, with the reason read from this CPU's instruction sets."""

from __future__ import annotations

from workbench.measure.tune.engine_line import entries_of_bench, entries_of_tune, faster_engine
from workbench.report.data import summary
from workbench.viz.summary import summary_lines

AMX = {"isa": ["AVX2", "AVX-512", "AVX512-VNNI", "AVX512-BF16", "AMX", "AMX-INT8", "AMX-BF16"]}
AVX2 = {"isa": ["AVX2", "FMA"]}
EMB = {"kind": "embedding", "sentences": 13, "top1_agreement": 1.0, "spearman": 0.9995, "min_cosine": 0.99}
CHANGED = {**EMB, "top1_agreement": 0.8, "spearman": 0.95}


def _bench(ov_ms: float, int8_tp=CHANGED):
    return [{"name": "torch", "p50_ms": 9.0, "parity": None},
            {"name": "unfused", "p50_ms": 6.0, "parity": {"cosine": 1.0}, "task_parity": EMB},
            {"name": "fused", "p50_ms": 5.0, "parity": {"cosine": 1.0}, "task_parity": EMB},
            {"name": "int8", "p50_ms": 2.0, "parity": {"cosine": 0.99}, "task_parity": int8_tp},
            {"name": "openvino", "p50_ms": ov_ms, "parity": {"cosine": 0.99998}, "task_parity": EMB}]


def test_openvino_at_bf16_faster_than_onnx_runtime_is_named_with_the_units_it_uses():
    line = faster_engine(entries_of_bench(_bench(2.2)), AMX, "minilm")
    # int8 changed the answers, so ONNX Runtime's fastest that held is fused (5.0 ms): OpenVINO 2.27x
    assert line.startswith("OpenVINO, its default precision ran 2.27x as fast as ONNX Runtime's fastest here")
    assert "fused (all steps), 2.20 ms against 5.00 ms" in line and "its answers holding" in line
    assert "bf16 by default on this CPU's AMX-BF16, AVX512-BF16" in line and "`workbench tune minilm`" in line
    plain = faster_engine(entries_of_bench(_bench(2.2)), AVX2, "minilm")
    assert "fp32 kernels (oneDNN)" in plain  # no bf16 units on an AVX2 CPU: the words say what is there


def test_nothing_is_said_where_onnx_runtime_won_or_within_the_margin():
    assert faster_engine(entries_of_bench(_bench(2.2, int8_tp=EMB)), AMX, "minilm") == ""  # int8 held, 2.0 ms
    assert faster_engine(entries_of_bench(_bench(4.9)), AMX, "minilm") == ""  # 2% faster: within the margin
    ov_changed = [{**v, "task_parity": CHANGED} if v["name"] == "openvino" else v for v in _bench(1.0)]
    assert faster_engine(entries_of_bench(ov_changed), AMX, "minilm") == ""  # its answers moved: not named


def test_on_random_weights_the_outputs_decide_and_the_line_says_so():
    line = faster_engine(entries_of_bench(_bench(2.2), random_weights=True), AMX, "bert-base", random_weights=True)
    # the answers mean nothing on random weights: int8 (cosine 0.99) does not hold, OpenVINO (0.99998) does
    assert "its outputs agreeing (random weights: no answer check)" in line and "2.27x" in line


def test_a_tune_names_the_engine_per_workload_from_its_rows():
    rows = [{"name": "fused", "p50_ms": 4.0, "sentences_per_s": 500.0, "holds": True, "same_as": {}},
            {"name": "tuned", "p50_ms": 4.0, "sentences_per_s": 500.0, "holds": True, "same_as": {"latency": "fused"}},
            {"name": "ctranslate2", "p50_ms": 3.0, "sentences_per_s": 900.0, "holds": True, "same_as": {}}]
    lat = faster_engine(entries_of_tune(rows, "latency"), AMX, "minilm", "latency")
    thr = faster_engine(entries_of_tune(rows, "throughput"), AMX, "minilm", "throughput")
    assert "1.33x" in lat and "ragged batches" in lat
    assert "1.80x" in thr and "900 sentences/s against 500 sentences/s" in thr


def test_the_report_summary_leads_with_the_faster_engine():
    data = {"model": {"name": "minilm", "label": "MiniLM"},
            "bench": {"variants": _bench(2.2), "machine": AMX, "config": {"provider": "cpu", "batch": 1,
                                                                          "sequence": 128, "threads": 2}}}
    s = summary(data)
    assert s["engine"].startswith("OpenVINO, its default precision ran 2.27x")
    assert any(line.startswith("Faster engine here: OpenVINO") for line in summary_lines(s))
