"""Opset 23: the dynamo exporter writes sdpa attention as ONNX's own Attention op; the timeline
fuses the rest around it, counts every kind of attention node, and says who fused what."""
from __future__ import annotations

import json
import subprocess
import sys

import onnx
import pytest

from workbench.config import OPSETS, ExportConfig
from workbench.fusion import Timeline
from workbench.graph.summary import attention_kinds


def _std_attention(model) -> int:
    return sum(1 for n in model.graph.node if n.op_type == "Attention" and n.domain in ("", "ai.onnx"))


def test_opsets_23_and_24_are_offered():
    assert {23, 24} <= set(OPSETS)
    assert ExportConfig(exporter="dynamo", opset=23).resolved_opset == 23


@pytest.mark.parametrize("opset", [23, 24])
def test_dynamo_sdpa_writes_one_standard_attention_per_layer(tiny_export, opset):
    res = tiny_export("dynamo", "sdpa", opset)
    m = onnx.load(res.path, load_external_data=False)
    assert res.opset == opset and res.parity["ok"]
    assert _std_attention(m) == 2  # bert-tiny has two layers
    assert not any(n.op_type == "Softmax" for n in m.graph.node)


def test_timeline_fuses_around_the_standard_op_and_counts_every_kind(tiny_export):
    res = tiny_export("dynamo", "sdpa", 23)
    tl = Timeline(res.path, num_heads=2, hidden_size=32, num_layers=2)
    tl.run()
    tl.check_parity(len(tl.snapshots) - 1)
    d = tl.to_dict()
    assert d["input"]["attention_kinds"]["standard"] == 2  # the exporter's doing
    assert d["final"]["attention_nodes"] == 2  # one attention node per layer, whatever its kind
    assert d["final"]["fused"]["SkipLayerNormalization"] == 4 and d["final"]["fused"]["BiasGelu"] == 2
    assert d["final"]["parity"]["ok"]


def test_eager_attention_at_opset_23_is_fused_by_the_engines(tiny_export):
    res = tiny_export("dynamo", "eager", 23)
    tl = Timeline(res.path, num_heads=2, hidden_size=32, num_layers=2)
    final = tl.run()[-1]
    kinds = attention_kinds(final.skeleton)
    assert sum(kinds.values()) == 2 and kinds["standard"] == 0
    assert attention_kinds(tl.input.skeleton) == {"standard": 0, "contrib": 0, "multi_head": 0, "group_query": 0}


def test_torchscript_writes_opset_23_with_parity(tiny_export):
    res = tiny_export("torchscript", "eager", 23)
    assert res.opset == 23 and res.parity["ok"]


def test_fuse_cli_json_has_attention_nodes_and_parity():
    p = subprocess.run([sys.executable, "-m", "workbench.cli", "fuse", "bert-tiny", "--exporter", "dynamo",
                        "--attention", "sdpa", "--opset", "23", "--parity", "--json"],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    doc = json.loads(p.stdout)
    final = doc["final"]
    assert final["attention_nodes"] == 2 and final["parity"]["ok"] is True
    assert doc["input"]["attention_kinds"]["standard"] == 2  # the exporter wrote ONNX's own op
    # the standard_attention step maps it; onnxscript's attention step packs it into the contrib op
    assert final["attention_kinds"] == {"standard": 0, "contrib": 2, "multi_head": 0, "group_query": 0}
    ours = next(s for s in doc["steps"] if s["step"] == "standard_attention")
    assert ours["fused_here"]["MultiHeadAttention"] == 2 and ours["parity"]["ok"] is True


def test_matrix_has_opset_23_cells_with_the_exporters_attention():
    from workbench.fusion.matrix import exporter_matrix

    rows = exporter_matrix("bert-tiny", (23,), exporters=("dynamo",), attentions=("sdpa",))
    (row,) = rows
    assert row["opset"] == 23 and row["error"] is None
    assert row["exporter_attention"] == 2 and row["auto"]["attention_nodes"] == 2
    # on their own, both engines keep the exporter's op; the workbench's standard_attention step maps it
    assert row["onnxscript"]["attention_kinds"]["standard"] == 2 and row["ort"]["attention_kinds"]["standard"] == 2
    assert row["workbench_rule_standard"] == 2 and row["auto"]["attention_kinds"]["contrib"] == 2


def test_an_onnxruntime_too_old_for_opset_23_says_so_in_one_line(tiny_export, monkeypatch, capsys):
    from workbench import modelio
    from workbench.cli import main

    tiny_export("dynamo", "sdpa", 23)  # exported while the real runtime answers; an older one must refuse to run it
    real = modelio.runtime_limits()
    assert real["max_opset"] >= 23  # the installed onnxruntime runs opset 23 itself
    monkeypatch.setattr(modelio, "runtime_limits", lambda: {**real, "max_opset": 22, "version": "1.20.1"})
    # A real older onnxruntime has another version, so it never reads timelines persisted under this one
    # (fusion/timeline_store.py keys them by version) and loads the export, which refuses; the version faked here
    # is invisible to that key, so this run must be cold.
    monkeypatch.setenv("WORKBENCH_PERSIST_TIMELINE", "0")
    rc = main(["fuse", "bert-tiny", "--exporter", "dynamo", "--attention", "sdpa", "--opset", "23"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "Traceback" not in err
    assert "uses ai.onnx opset 23, but the installed onnxruntime 1.20.1 supports at most opset 22" in err
