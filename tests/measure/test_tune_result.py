"""The tune's result is typed, and its ``to_json()`` is ``workbench tune --json`` key for key.

The key tree below is the ``--json`` document as it stood before the result was typed (docs/tune.md,
"Interfaces", names the keys the checks read; every one of them is in it). Rows and recommendations are
built through the same public functions ``tune`` uses, on figures given here (no tune is run: test_tune.py
runs one and checks its real ``--json`` against the same tree).
"""
from __future__ import annotations

import re
from pathlib import Path

from workbench.measure.harness.results import VariantStats
from workbench.measure.tune.result import SessionSpec, Skipped, TuneResult
from workbench.measure.tune.rows import peers_line, recommend, row, why

EMB = {"kind": "embedding", "sentences": 13, "top1_agreement": 1.0, "spearman": 0.999, "min_cosine": 0.99}
ROW = {"name", "label", "p50_ms", "p90_ms", "p50_mode", "sentences_per_s", "throughput_mode", "batch",
       "batch_search", "size_mb", "peak_rss_mb", "task_parity", "task_parity_search", "task_parity_batched",
       "task_parity_batched_search", "parity", "holds", "holds_batch1", "holds_batched", "reference",
       "interleaved", "shipped", "session_providers", "kind", "floor_ms", "floor_precision"}
REC = {"variant", "label", "mode", "batch", "task_parity", "task_parity_batched", "parity", "why"}
#: The ``--json`` document's keys: top level, then the typed parts' own keys.
TREE = {
    "": {"model", "source", "recommended", "workloads", "variants", "skipped", "machine", "config", "rates", "split",
         "reference", "plan", "ablation", "int8_search", "openvino_guard", "paths", "sessions", "threads", "shipped",
         "machine_load", "saved"},
    "recommended.latency": REC | {"p50_ms"},
    "recommended.throughput": REC | {"sentences_per_s"},
    "variants[]": ROW,
    "variants[].interleaved": {"p50_ms", "p90_ms", "runs", "sentences_per_s"},
    "skipped[]": {"name", "why"},
    "sessions.*": {"kind", "level", "disabled_optimizers", "options"},
    "split": {"search", "check", "source"},
    "plan": {"engine", "disabled", "enabled"},
}


def key_tree(doc: dict) -> dict:
    """The keys of ``doc`` at each place :data:`TREE` names."""
    out = {"": set(doc)}
    for w, rec in doc["recommended"].items():
        out[f"recommended.{w}"] = set(rec)
    out["variants[]"] = set().union(*(set(v) for v in doc["variants"]))
    out["variants[].interleaved"] = set().union(*(set(v["interleaved"]) for v in doc["variants"]))
    out["skipped[]"] = set().union(*(set(s) for s in doc["skipped"]))
    out["sessions.*"] = set().union(*(set(s) for s in doc["sessions"].values()))
    out["split"], out["plan"] = set(doc["split"]), set(doc["plan"])
    return out


def documented_keys() -> set[str]:
    """Every key docs/tune.md's "Interfaces" names for ``workbench tune --json``."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "tune.md").read_text()
    part = text.split("## Interfaces", 1)[1].split("`workbench bench", 1)[0]
    names = set(re.findall(r"`([a-z_0-9]+)`", part)) | set(re.findall(r'"([a-z_0-9]+)"', part))
    return {n for n in names if n not in ("latency", "throughput")} | {"_search"}


def _stats(name: str, p50: float, tp) -> VariantStats:
    return VariantStats(name, "cpu", p50, p50 * 1.2, p50 * 1.3, p50, 0.1, 1e3 / p50, 5, [p50] * 5,
                        parity=None if tp is None else {"ok": True, "max_abs_diff": 1e-6, "cosine": 1.0},
                        task_parity=tp, task_parity_parts=None if tp is None else {"search": tp, "check": tp})


def built() -> TuneResult:
    thr = {"batch": 16, "tried": {"1": 100.0, "16": 400.0}, "sentences_per_s": 400.0, "task_parity": EMB}
    ship = {"latency_ms": [2.0, 2.1, 2.2], "throughput_ms": [30.0, 31.0], "sentences": 13, "peak_rss_mb": 200.0}
    slow = dict(ship, latency_ms=[4.0, 4.5, 5.0], throughput_ms=[60.0, 61.0])
    rows = [row("torch", _stats("torch", 5.0, None), dict(thr, task_parity=None), slow, 90.0),
            row("fused", _stats("fused", 2.0, EMB), thr, ship, 90.0),
            row("openvino", _stats("openvino", 3.0, EMB), dict(thr, sentences_per_s=300.0), None, 90.0)]
    recs = {}
    for w in ("latency", "throughput"):
        recs[w] = recommend(rows, w)
        recs[w].why = why(recs[w], rows, w, {"isa": []}, {})
    return TuneResult(model={"label": "tiny"}, source="tiny", recommended=recs, workloads=list(recs), variants=rows,
                      skipped=[Skipped("int8-static", "no calibration text")], machine={"cpu": "x"}, config={},
                      rates={}, split={"search": [1], "check": [0], "source": "built-in"}, reference="torch",
                      plan={"engine": "ort", "disabled": [], "enabled": []}, ablation=None, int8_search=None,
                      openvino_guard=None, paths={"fused": "/m.onnx"},
                      sessions={"fused": SessionSpec("onnx", "all", [], {})}, threads=1, shipped=True)


def test_the_json_has_exactly_the_keys_it_had_and_every_documented_one():
    doc = built().to_json()
    assert key_tree(doc) == TREE
    everywhere = set().union(*TREE.values())
    assert documented_keys() - {"_search"} <= everywhere, documented_keys() - everywhere
    assert {k for k in everywhere if k.endswith("_search") and k.startswith("task_parity")} == \
        {"task_parity_search", "task_parity_batched_search"}  # "their `_search` forms"


def test_readers_use_the_typed_result_and_the_json_says_the_same():
    res = built()
    doc = res.to_json()
    assert res.recommended["latency"].variant == doc["recommended"]["latency"]["variant"] == "fused"
    assert doc["recommended"]["latency"]["p50_ms"] == res.recommended["latency"].figure == res.row("fused").p50_ms
    assert res.row("fused").p50_mode == "shipped" and res.row("openvino").p50_mode == "interleaved"
    assert res.engine_kind("fused") == "onnx" and res.engine_kind("torch") is None
    assert "PyTorch" in peers_line(res, "latency") and doc["saved"] is None
    assert "paths" not in res.to_json(drop=("paths",))
