"""The whole-model view reads like an architecture diagram: the embeddings, the attention mask, the layers and
what follows them are named boxes; the graph's inputs and outputs carry the model's own names; labels are as
long as the space allows. On BERT from both exporters and on a tiny ModernBERT (sliding-window attention)."""

from __future__ import annotations

import onnx
import pytest

from workbench.graph.groups import module_words, view_groups
from workbench.graph.layout import layout_graph
from workbench.graph.nodes import node_table, without_constants
from workbench.viz.graph import fit_label, graph_scene


def _names(lay, kind: str) -> list[str]:
    return [label.rsplit(" (", 1)[0] if kind == "group" else label
            for label, k in zip(lay.labels, lay.kinds) if k == kind]


def _edge(lay, a: str, b: str) -> bool:
    return (lay.ids.index(a), lay.ids.index(b)) in lay.edges


@pytest.fixture(scope="module")
def modernbert(tmp_path_factory):
    """A tiny ModernBERT (2 layers, a 16-token local window on layer 1), exported by dynamo, then fused."""
    from test_workshop import save_tiny_modernbert  # the workshop's tiny ModernBERT: layer 1 local, 16 tokens

    from workbench.config import ExportConfig, FusionPlan
    from workbench.export import export
    from workbench.fusion import Timeline
    from workbench.models import resolve

    src = resolve(save_tiny_modernbert(tmp_path_factory.mktemp("modernbert")))
    result = export(src, ExportConfig(exporter="dynamo", attention="sdpa"))
    tl = Timeline(result.path, FusionPlan(engine="onnxscript"), num_heads=src.num_heads,
                  hidden_size=src.hidden_size, num_layers=src.num_layers)
    tl.run()
    return onnx.load(str(result.path)), tl.final


@pytest.mark.parametrize("exporter,attention", [("torchscript", "eager"), ("dynamo", "sdpa")])
def test_bert_is_a_handful_of_named_boxes(tiny_export, exporter, attention):
    tab = without_constants(node_table(onnx.load(str(tiny_export(exporter=exporter, attention=attention).path))))
    lay = layout_graph(tab)
    assert _names(lay, "node") == []  # no loose mask or size arithmetic between the boxes
    assert {"embeddings", "attention mask", "layer 0", "layer 1"} <= set(_names(lay, "group"))
    assert _names(lay, "input") == ["input_ids", "attention_mask", "token_type_ids"]
    assert _names(lay, "output") == ["last_hidden_state"]
    assert _edge(lay, "group:embeddings", "group:layer 0") and _edge(lay, "group:layer 0", "group:layer 1")
    assert _edge(lay, "input:attention_mask", "group:attention mask")
    assert _edge(lay, "group:attention mask", "group:layer 0")
    # Drawn in a pane of 540 px, every item is named in full.
    sc = graph_scene(lay, width=540)
    assert sc["nodes"]["label"] == lay.labels


def test_modernbert_names_its_mask_window_and_its_final_norm(modernbert):
    exported, fused = modernbert
    for model in (exported, fused.skeleton):
        tab = without_constants(node_table(model))
        lay = layout_graph(tab)
        groups = set(_names(lay, "group"))
        assert {"embeddings", "attention mask (window ±8)", "layer 0", "layer 1", "final norm"} <= groups
        hover = lay.hover[lay.ids.index("group:attention mask (window ±8)")]
        assert "sliding window: each token attends to the tokens at most 8 positions away" in hover
        assert _names(lay, "node") == [] and _names(lay, "output") == ["last_hidden_state"]
        assert _edge(lay, "group:final norm", "output:last_hidden_state")
        sc = graph_scene(lay, width=540)
        assert sc["nodes"]["label"] == lay.labels  # the window is in the name, in full
    # The exported model's rotary tables sit in their own box, named from the module that makes them.
    assert "rotary embedding" in _names(layout_graph(without_constants(node_table(exported))), "group")
    # Every node of the fused layer stays in its layer; the mask's nodes are not lent to layer 0.
    groups = view_groups(without_constants(node_table(fused.skeleton)))
    assert sum(g.startswith("attention mask") for g in groups.values()) >= 10
    assert not [op for nid, op in ((n.id, n.op_type) for n in node_table(fused.skeleton).nodes)
                if op in ("LessOrEqual", "Abs") and groups.get(nid, "").startswith("layer")]


def test_group_names_are_words():
    assert module_words("rotary_emb_1") == "rotary embedding"
    assert module_words("final_norm") == "final norm" and module_words("pooler") == "pooler"


def test_labels_are_as_long_as_the_room_allows():
    assert fit_label("Unsqueeze", 20) == "Unsqueeze"
    assert fit_label("Unsqueeze", 6) == "Unsqu…"  # the first letters, not a three-letter code
    assert fit_label("Unsqueeze", 3) == "Usq"
    assert fit_label("SkipLayerNormalization", 12) == "SkipLN" and fit_label("SkipLayerNormalization", 30) == \
        "SkipLayerNormalization"
    assert fit_label("last_hidden_state", 9, node=False) == "last_hid…" and fit_label("input_ids", 3, node=False) == ""
