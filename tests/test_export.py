"""Export with both torch exporters: parity with PyTorch, dynamic axes, cache."""

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from workbench.config import ExportConfig
from workbench.errors import ConfigError, ExportError
from workbench.export import cache_key, export
from workbench.models import resolve
from workbench.ort.inputs import InputSpec, make_inputs
from workbench.ort.session import create_session, run_session

CELLS = [("torchscript", "eager"), ("torchscript", "sdpa"), ("dynamo", "eager"), ("dynamo", "sdpa")]


@pytest.mark.parametrize("exporter,attention", CELLS)
def test_bert_tiny_exports_match_pytorch(tiny_export, exporter, attention):
    r = tiny_export(exporter, attention)
    assert r.parity["ok"] and r.parity["max_abs_diff"] < 1e-4 and r.parity["cases"] == 2
    assert r.opset == (17 if exporter == "torchscript" else 18)
    assert r.nodes > 50


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_batch_and_sequence_axes_are_dynamic(tiny_export, exporter):
    r = tiny_export(exporter, "eager")
    sess = create_session(r.path, level="disable")
    for b, s in [(1, 5), (3, 33)]:
        out = run_session(sess, make_inputs(InputSpec(), b, s, seed=1))[0]
        assert out.shape == (b, s, 128)


@pytest.mark.parametrize("opset", [14, 17, 18])
def test_torchscript_honours_opset(tiny_export, opset):
    r = tiny_export("torchscript", "eager", opset)
    assert r.opset == opset and r.parity["ok"]


def test_dynamo_cannot_go_below_opset_17_and_says_why(tiny_export):
    with pytest.raises(ExportError, match="opset 17 or 18"):
        tiny_export("dynamo", "eager", 14)


def test_bad_settings_are_refused():
    with pytest.raises(ConfigError):
        ExportConfig(exporter="tflite")
    with pytest.raises(ConfigError):
        ExportConfig(attention="flash")


def test_cache_key_covers_everything_that_changes_the_result():
    src = resolve("bert-tiny")
    base = cache_key(src, ExportConfig())
    assert base == cache_key(resolve("bert-tiny"), ExportConfig())
    assert base != cache_key(src, ExportConfig(exporter="dynamo"))
    assert base != cache_key(src, ExportConfig(attention="sdpa"))
    assert base != cache_key(src, ExportConfig(opset=14))
    assert base != cache_key(resolve("bert-tiny", seed=1), ExportConfig())
    assert ExportConfig(opset=17) != ExportConfig() or cache_key(src, ExportConfig(opset=17)) == base


def test_second_export_is_a_cache_hit(tiny_export):
    first = tiny_export("torchscript", "eager")
    again = export("bert-tiny", ExportConfig())
    assert again.cached and again.path == first.path and again.export_s == 0.0  # nothing re-exported
    assert again.parity == first.parity


def test_cli_cache_hit_does_not_import_torch(tiny_export):
    tiny_export("torchscript", "eager")
    code = ("import sys, json; from workbench.export import export; r = export('bert-tiny');"
            "print(json.dumps({'cached': r.cached, 'torch': 'torch' in sys.modules}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"cached": True, "torch": False}


@pytest.mark.parametrize("kind", ["bert", "roberta", "distilbert"])
@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_bert_family_folders_export_with_parity(hf_folder, kind, exporter):
    r = export(hf_folder(kind), ExportConfig(exporter=exporter))
    assert r.parity["ok"], r.parity
    import onnx

    names = [i.name for i in onnx.load(r.path, load_external_data=False).graph.input]
    assert names == list(resolve(hf_folder(kind)).input_names)


@pytest.mark.slow
@pytest.mark.parametrize("exporter,attention", CELLS)
def test_bert_base_exports_match_pytorch(exporter, attention, bert_base_two_layers):
    """The default cell on the real 12-layer bert-base; the other cells on bert-base's layer shapes with two
    layers (the same export path and parity check; exports shared with tests/fusion/test_cells.py)."""
    default = (exporter, attention) == ("torchscript", "eager")
    r = export("bert-base" if default else resolve(str(bert_base_two_layers)),
               ExportConfig(exporter=exporter, attention=attention))
    assert r.nodes > (300 if default else 60)
    assert r.parity["ok"] and r.parity["max_abs_diff"] < 1e-4, r.parity
