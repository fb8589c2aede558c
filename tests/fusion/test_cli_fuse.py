"""``workbench fuse`` and ``workbench matrix`` end to end on bert-tiny."""

from __future__ import annotations

import json

import onnx

from workbench.cli import main


def test_fuse_json_writes_model_and_refuses_overwrite(tmp_path, capsys):
    out = tmp_path / "fused.onnx"
    rc = main(["fuse", "bert-tiny", "--engine", "auto", "--parity", "--json", "-o", str(out)])
    d = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert d["engine"] == "ort"
    assert d["final"]["fused"]["Attention"] == 2 and d["final"]["fused"]["SkipLayerNormalization"] == 4
    assert d["final"]["fused"]["BiasGelu"] == 2 and d["final"]["fused"]["EmbedLayerNormalization"] == 1
    assert all(s["parity"]["ok"] for s in d["steps"])
    assert {"name", "nodes", "fused", "elapsed_s", "parity", "diagnostic"} <= set(d["steps"][0])
    m = onnx.load(str(out))
    assert sum(n.op_type == "Attention" for n in m.graph.node) == 2
    rc = main(["fuse", "bert-tiny", "--engine", "ort", "-o", str(out)])
    assert rc == 2
    assert "already exists" in capsys.readouterr().err


def test_fuse_disable_and_table(capsys):
    rc = main(["fuse", "bert-tiny", "--engine", "ort", "--disable", "attention"])
    text = capsys.readouterr().out
    assert rc == 0
    assert "attention" not in [line.split()[0] for line in text.splitlines()[3:] if line.strip()]
    assert "Attention" not in text.split("final:")[1]


def test_fuse_unknown_step_exits_2(capsys):
    assert main(["fuse", "bert-tiny", "--disable", "atention"]) == 2
    assert "unknown fusion step" in capsys.readouterr().err


def test_matrix_json(capsys):
    rc = main(["matrix", "bert-tiny", "--opsets", "17", "--json"])
    d = json.loads(capsys.readouterr().out)
    assert rc == 0
    rows = {(r["exporter"], r["attention"]): r for r in d["rows"]}
    assert len(rows) == 4
    assert rows[("torchscript", "eager")]["ort"]["Attention"] == 2
    assert rows[("torchscript", "eager")]["onnxscript"]["Attention"] == 0
    assert rows[("dynamo", "eager")]["onnxscript"]["Attention"] == 2
    assert rows[("dynamo", "eager")]["best"] == "onnxscript"


def test_fuse_shows_the_session_layer_on_top(tiny_export):
    import json
    import os
    import subprocess
    import sys

    tiny_export("dynamo", "eager")
    out = subprocess.run([sys.executable, "-m", "workbench.cli", "fuse", "bert-tiny", "--exporter", "dynamo",
                          "--engine", "ort", "--session-layer", "--json"], capture_output=True, text=True,
                         env=os.environ, timeout=600)
    assert out.returncode == 0, out.stderr[-500:]
    layer2 = json.loads(out.stdout)["session_layer"]
    # On the dynamo export ORT's optimizer leaves SkipLayerNormalization to the session, which forms it.
    assert layer2["fused"].get("SkipLayerNormalization", 0) >= 1
    assert layer2["nodes"] <= json.loads(out.stdout)["final"]["nodes"]
