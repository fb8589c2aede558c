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
       "interleaved", "shipped", "session_providers", "kind", "floor_ms", "floor_precision",
       "same_as"}  # same_as: new in issue 42 (the tuned row's graph per workload), a new key only
REC = {"variant", "label", "mode", "batch", "task_parity", "task_parity_batched", "parity", "why"}
#: The ``--json`` document's keys: top level, then the typed parts' own keys.
TREE = {
    "": {"model", "source", "recommended", "workloads", "variants", "skipped", "machine", "config", "rates", "split",
         "reference", "plan", "ablation", "int8_search", "openvino_guard", "paths", "sessions", "threads", "shipped",
         "machine_load", "random_weights", "saved", "plans"},  # plans: new in issue 42, a new key only
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


BAD = {"kind": "embedding", "sentences": 13, "top1_agreement": 0.5, "spearman": 0.9, "min_cosine": 0.9}


def _with_a_changed_peer(random_weights: bool) -> TuneResult:
    """:func:`built` with OpenVINO's answers moved (a peer whose answers did not hold)."""
    thr = {"batch": 16, "tried": {"1": 100.0, "16": 400.0}, "sentences_per_s": 300.0, "task_parity": BAD}
    res = built()
    res.variants[-1] = row("openvino", _stats("openvino", 3.0, BAD), thr, None, 90.0)
    res.random_weights = random_weights
    res.config = {"split": {"search": 1, "check": 1, "source": "built-in"}}
    return res


def test_on_random_weights_no_variant_is_marked_changed_and_one_sentence_says_why():
    """Random weights (a preset): the terminal's table and the saved card say what bench says, no "(changed)"
    verdict and no holds yes/no, and what the recommendation did all the same; with real weights they judge."""
    from workbench.cli.tune import table_lines
    from workbench.measure.tune.card import model_card
    from workbench.ort.answer_policy import random_weights_words

    info = {"onnxruntime": "fused", "openvino": None, "tokenizer": True}
    real, rand = _with_a_changed_peer(False), _with_a_changed_peer(True)
    assert not real.row("openvino").holds and not rand.row("openvino").holds  # the rule is the same on both
    real_text, rand_text = "\n".join(table_lines(real)), "\n".join(table_lines(rand))
    assert "openvino" in real_text and "(changed)" in real_text and "weights are random" not in real_text
    assert "(its answers changed)" in peers_line(real, "latency")
    assert "(changed)" not in rand_text and "(its answers changed)" not in peers_line(rand, "latency")
    note = [ln for ln in rand_text.splitlines() if ln.startswith("note: the answers above: ")]
    assert note == [f"note: the answers above: {random_weights_words('embedding')}; the recommendation still counts "
                    f"only the variants whose answers held here, as it would with real weights (left out: "
                    f"{rand.row('openvino').label})"], rand_text
    real_card, rand_card = model_card(real, info, "/out"), model_card(rand, info, "/out")
    assert " | no |" in real_card and "weights are random" not in real_card
    rows = [ln for ln in rand_card.splitlines() if ln.startswith("| ") and ln.endswith(" |") and "---" not in ln]
    assert rows and not any(ln.endswith(("| yes |", "| no |")) for ln in rows if not ln.startswith("| PyTorch"))
    assert "The weights are random, so the answers mean nothing and this is no verdict on int8" in rand_card
    assert rand.to_json()["random_weights"] is True and real.to_json()["random_weights"] is False
    # The guarded int8 search's candidates in the card: no holds verdict on random weights either.
    search = {"chosen": "fp32 qkv", "method": "per channel", "kept_fp32": ["qkv"], "kept_fp32_share": 0.25,
              "candidates": [{"label": "fp32 qkv", "kept_fp32_share": 0.25, "task_parity": EMB, "p50_ms": 1.0,
                              "holds": True},
                             {"label": "int8 everywhere", "kept_fp32_share": 0.0, "task_parity": BAD, "p50_ms": 0.9,
                              "holds": False}]}
    for res, cells in ((real, ("| yes |", "| no |")), (rand, ("| - |", "| - |"))):
        res.int8_search = search
        card = model_card(res, dict(info, onnxruntime="int8-guarded"), "/out")
        assert card.count(f"| 0.90 {cells[1]}") == 1 and card.count(f"| 1.00 {cells[0]}") == 1, card
    # The report's tune section (from the JSON) and the app's tune table say the same.
    from workbench.report.html import tune_section
    from workbench.ui.measuring.panel import tune_html
    for html in (tune_section(rand.to_json()), tune_html(rand)):
        assert "the weights are random, so the answers mean nothing" in html.lower() and "<td>no</td>" not in html
        assert "left out: OpenVINO" in html
    for html in (tune_section(real.to_json()), tune_html(real)):
        assert "<td>no</td>" in html and "weights are random" not in html
    # The why claims nothing about answers on random weights (the fp32 engines' "no int8 model kept the answers").
    rows = rand.variants
    rec = recommend(rows, "latency")
    assert "kept the answers" not in why(rec, rows, "latency", {"isa": []}, {}, random_weights=True)
    assert "no int8 model kept the answers" in why(rec, rows, "latency", {"isa": []}, {})


def test_the_card_names_a_busy_machine():
    from workbench.measure.harness.load import MachineLoad
    from workbench.measure.tune.card import model_card

    res = built()
    res.config = {"split": {"search": 1, "check": 1, "source": "built-in"}}
    busy = MachineLoad(cores=2, threads=2, seconds=8, other_cores=1.2, runnable=4.1, cpus=2)
    res.machine_load = busy.to_dict()
    info = {"onnxruntime": "fused", "openvino": None, "tokenizer": True}
    assert f"Warning: {busy.words()}." in model_card(res, info, "/out")
    res.machine_load = MachineLoad(cores=2, threads=2, seconds=8, other_cores=0.1).to_dict()
    assert "busy" not in model_card(res, info, "/out")
