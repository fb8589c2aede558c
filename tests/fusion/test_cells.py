"""No empty cell: engine auto fuses every encoder layer on every exporter x attention cell."""

from __future__ import annotations

import pytest

from workbench.config import ExportConfig, FusionPlan
from workbench.fusion import Timeline

CELLS = [("torchscript", "eager"), ("torchscript", "sdpa"), ("dynamo", "eager"), ("dynamo", "sdpa")]
#: Which engine auto keeps per exporter (TorchScript + sdpa: ORT's chain with our sdpa_attention rule).
WINNER = {"torchscript": "ort", "dynamo": "onnxscript"}


def _timeline(source, exporter: str, attention: str) -> Timeline:
    from workbench.export import export
    from workbench.models import resolve

    src = resolve(source) if not hasattr(source, "num_layers") else source
    res = export(src, ExportConfig(exporter=exporter, attention=attention))
    tl = Timeline(res.path, FusionPlan(engine="auto"), num_heads=src.num_heads, hidden_size=src.hidden_size,
                  num_layers=src.num_layers)
    tl.run()
    return tl


@pytest.mark.parametrize("exporter,attention", CELLS)
def test_bert_tiny_every_cell_fully_fused_and_every_step_keeps_parity(tiny_export, exporter, attention):
    from workbench.models import resolve

    src = resolve("bert-tiny")
    res = tiny_export(exporter, attention)
    tl = Timeline(res.path, FusionPlan(engine="auto"), num_heads=src.num_heads, hidden_size=src.hidden_size,
                  num_layers=src.num_layers)
    tl.run()
    assert tl.engine_used == WINNER[exporter], tl.engine_note
    f = tl.final.fused
    assert (f.get("Attention", 0), f.get("SkipLayerNormalization", 0), f.get("BiasGelu", 0)) == (2, 4, 2), f
    for i in range(1, len(tl.snapshots)):
        p = tl.check_parity(i)
        assert p.ok and p.cases == 4, (tl.snapshots[i].step, p)
    used = [s.step for s in tl.snapshots if s.fused_here.get("Attention")]
    if (exporter, attention) == ("torchscript", "sdpa"):
        assert used == ["sdpa_attention"]  # our rule, not ORT's, fused it
    elif exporter == "torchscript":
        assert used == ["attention"]


@pytest.mark.parametrize("kind", ["bert", "roberta", "distilbert"])
def test_local_folders_every_cell_attention_on_every_layer(hf_folder, kind):
    from workbench.models import resolve

    src = resolve(hf_folder(kind))
    assert src.num_layers == 2
    for exporter, attention in CELLS:
        tl = _timeline(src, exporter, attention)
        f = tl.final.fused
        assert f.get("Attention", 0) == src.num_layers, (kind, exporter, attention, tl.engine_note)
        assert f.get("BiasGelu", 0) == src.num_layers, (kind, exporter, attention, f)
        assert f.get("SkipLayerNormalization", 0) >= 2 * src.num_layers, (kind, exporter, attention, f)
        assert tl.check_parity(len(tl.snapshots) - 1).ok, (kind, exporter, attention)


@pytest.mark.slow
def test_bert_base_default_cell():
    """The default model as a user opens it (TorchScript, eager): every one of its 12 layers fused."""
    tl = _timeline("bert-base", "torchscript", "eager")
    f = tl.final.fused
    assert (f.get("Attention", 0), f.get("SkipLayerNormalization", 0), f.get("BiasGelu", 0)) == (12, 24, 12), \
        (f, tl.engine_note)
    assert tl.engine_used == WINNER["torchscript"]
    assert tl.check_parity(len(tl.snapshots) - 1).ok


@pytest.mark.slow
@pytest.mark.parametrize("exporter,attention", [c for c in CELLS if c != ("torchscript", "eager")])
def test_bert_base_shapes_every_other_cell(bert_base_two_layers, exporter, attention):
    """The other cells on bert-base's own layer shapes (12 heads of 64): each layer fused on each."""
    from workbench.models import resolve

    src = resolve(str(bert_base_two_layers))
    assert (src.num_heads, src.hidden_size, src.num_layers) == (12, 768, 2)
    tl = _timeline(src, exporter, attention)
    f = tl.final.fused
    assert (f.get("Attention", 0), f.get("SkipLayerNormalization", 0), f.get("BiasGelu", 0)) == (2, 4, 2), \
        (f, tl.engine_note)
    assert tl.engine_used == WINNER[exporter]
    assert tl.check_parity(len(tl.snapshots) - 1).ok
