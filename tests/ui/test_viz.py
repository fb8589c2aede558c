"""Figures get the right data: graph figures and latency figures (no browser)."""

from __future__ import annotations

import onnx
import plotly.graph_objects as go
import pytest

from workbench.graph.layout import layout_graph
from workbench.graph.nodes import node_table, without_constants
from workbench.viz import latency as vl
from workbench.viz.graph import (
    CHAR_PX,
    FUSED_COLOUR,
    graph_figure,
    graph_scene,
    shared_yrange,
    short_label,
    visible_labels,
)


@pytest.fixture(scope="module")
def table(tiny_export):
    return node_table(onnx.load(str(tiny_export().path)))


def test_graph_figure_draws_every_item_edge_and_hover(table):
    lay = layout_graph(table, layer=0)
    fig = graph_figure(lay, highlight={lay.ids[3]}, selected={lay.ids[4]})
    edges, nodes, hl, sel = fig.data
    assert list(nodes.customdata) == lay.ids
    assert len(nodes.x) == len(lay)
    assert len([v for v in edges.x if v is None]) == len(lay.edges)
    assert all("<b>" in h for h in nodes.hovertext)
    assert (hl.x[0], hl.y[0]) == (lay.x[3], lay.y[3]) and len(hl.x) == 1
    assert (sel.x[0], sel.y[0]) == (lay.x[4], lay.y[4])
    assert fig.layout.yaxis.range[0] > fig.layout.yaxis.range[1]  # inputs at the top


def test_latency_overlay_colours_by_share(table):
    lay = layout_graph(table, layer=0)
    node_ids = [i for i, k in zip(lay.ids, lay.kinds) if k == "node"]
    hot, cold = node_ids[0], node_ids[1]
    fig = graph_figure(lay, latency={hot: 9.0, cold: 0.01})
    colours = dict(zip(lay.ids, fig.data[1].marker.color))
    assert colours[hot] != colours[cold]
    hover = dict(zip(lay.ids, fig.data[1].hovertext))
    assert "latency" in hover[hot] and "9.000 ms" in hover[hot]


def test_collapsed_groups_and_fused_nodes_are_styled(table, tiny_export):
    lay = layout_graph(table)
    fig = graph_figure(lay)
    sym = dict(zip(lay.ids, fig.data[1].marker.symbol))
    assert sym["group:layer 0"] == "square"
    assert len(fig.layout.shapes) == 0  # collapsed: no boxes
    expanded = layout_graph(table, collapsed=set())  # a box, named, around each group's nodes
    assert [b.group for b in expanded.boxes][:2] == ["embeddings", "attention mask"]
    assert len(graph_figure(expanded).layout.shapes) == len(expanded.boxes) >= 4
    from onnxruntime.transformers.optimizer import optimize_model

    fused = optimize_model(str(tiny_export().path), model_type="bert", num_heads=2, hidden_size=128).model
    flay = layout_graph(node_table(fused), layer=0)
    ffig = graph_figure(flay)
    att = flay.ops.index("Attention")
    assert ffig.data[1].marker.color[att] == FUSED_COLOUR and ffig.data[1].marker.symbol[att] == "diamond"


def test_graph_widget_switches_views_and_moves_only_rings_on_a_new_highlight(table):
    from workbench.viz.graph_widget import GraphWidget

    gw = GraphWidget()
    assert gw.show(graph_scene(layout_graph(table, layer=0))) is True
    big = layout_graph(table, collapsed=set())
    assert gw.show(graph_scene(big)) is True and gw.ids == big.ids
    one = layout_graph(table, layer=1)
    assert gw.show(graph_scene(one, highlight={one.ids[2]})) is True
    assert gw.highlight == [2] and gw.selected == []
    sent = []
    gw.comm.send = lambda data, *a, **k: sent.append(data)  # what goes to the browser
    assert gw.show(graph_scene(one, highlight=(), selected={one.ids[0]})) is False
    assert gw.highlight == [] and gw.selected == [0]
    assert sent and all(set(m.get("state", {})) <= {"highlight", "selected"} for m in sent)


def test_latency_figures_carry_the_numbers():
    series = {"unfused": [10.0, 11.0, 12.0], "fused": [5.0, 5.5, 6.0]}
    live = vl.live_figure(series, floor_ms=3.0)
    # Stable keys in, the words a user reads out (workbench/measure/variants/labels.py).
    assert [t.name for t in live.data] == ["ONNX Runtime, no optimizations", "fused (all steps)"]
    assert list(live.data[1].y) == [5.0, 5.5, 6.0] and list(live.data[1].x) == [1, 2, 3]
    assert live.layout.shapes[0].y0 == 3.0
    box = vl.distribution_figure(series)
    assert box.data[0].type == "box" and vl.distribution_figure(series, kind="violin").data[0].type == "violin"
    stats = {k: vl.percentiles(v) for k, v in series.items()}
    assert stats["unfused"]["p50"] == 11.0 and stats["fused"]["runs"] == 3
    pct = vl.percentile_figure(stats, floor_ms=3.0)
    assert [t.name for t in pct.data] == ["p50", "p90", "p99"]
    assert list(pct.data[0].y) == [11.0, 5.5]
    ops = vl.op_breakdown_figure({"unfused": {"MatMul": 5.0, "Add": 2.0, "Erf": 0.1}, "fused": {"MatMul": 4.8, "Attention": 1.0}}, top=2)
    names = [t.name for t in ops.data]
    assert names[:2] == ["MatMul", "Add"] and names[-1] == "other"
    sweep = vl.sweep_figure([{"seq": 16, "variant": "f", "p50": 1.0, "attention_share": 0.1},
                             {"seq": 512, "variant": "f", "p50": 9.0, "attention_share": 0.4}])
    assert list(sweep.data[0].x) == [16, 512] and list(sweep.data[1].y) == [10.0, 40.0]


def test_refresh_updates_a_widget_in_place():
    fw = go.FigureWidget(vl.live_figure({"a": [1.0]}))
    vl.refresh(fw, vl.live_figure({"a": [1.0, 2.0]}))
    assert list(fw.data[0].y) == [1.0, 2.0]
    vl.refresh(fw, vl.live_figure({"a": [1.0], "b": [3.0]}))
    assert [t.name for t in fw.data] == ["a", "b"]


def test_labels_are_short_and_never_collide(table):
    assert short_label("SkipLayerNormalization") == "SkipLN" and short_label("MatMul") == "MatMul"
    assert len(short_label("AVeryLongCustomOperatorName")) == 12
    lay = layout_graph(table, layer=0)
    for width in (300, 540, 1200):
        fig = graph_figure(lay, width=width)
        assert fig.layout.width == width and fig.layout.autosize is False
        texts = list(fig.data[1].text or [""] * len(lay))
        xr = fig.layout.xaxis.range
        px = (width - 20) / (xr[1] - xr[0])
        markers = [k for k, kd in enumerate(lay.kinds) if kd in ("in", "out")]
        assert markers and all(texts[k] for k in markers)  # a marker is never an unnamed triangle
        for k, t in enumerate(texts):
            if not t or k in markers:  # marker labels sit centred above (below) them: checked next
                continue
            same_row = sorted(x for x, y in zip(lay.x, lay.y) if y == lay.y[k] and x > lay.x[k])
            if same_row:
                assert (same_row[0] - lay.x[k]) * px >= 9 + CHAR_PX * len(t)
            assert (xr[1] - lay.x[k]) * px >= 9 + CHAR_PX * len(t)
        for a, b in zip(markers, markers[1:]):  # centred marker labels on one row never overlap
            if lay.y[a] == lay.y[b]:
                assert abs(lay.x[b] - lay.x[a]) * px >= CHAR_PX * (len(texts[a]) + len(texts[b])) / 2
    # wider panes show more labels; a crowded vertical scale shows no node labels
    n = lambda w: sum(1 for t in graph_figure(lay, width=w).data[1].text or () if t)
    assert n(1200) >= n(300)
    crowded = visible_labels(lay, lay.labels, width=540, height=60, xrange=(-5, 5), yrange=(-1, lay.bounds[3]))
    assert not any(t for t, k in zip(crowded, lay.kinds) if k == "node")  # node labels would overlap row to row
    assert all(t for t, k in zip(crowded, lay.kinds) if k in ("in", "out"))  # markers are always named


def test_collapsed_layer_squares_never_overlap(table):
    lay = layout_graph(table)  # every layer collapsed: squares stacked down the picture
    for height in (None, 200):  # full size, and squeezed into 200 px
        fig = graph_figure(lay, height=height)
        yr = fig.layout.yaxis.range
        px = (fig.layout.height - 46) / abs(yr[0] - yr[1])
        squares = sorted((y * px, sz) for y, sz, k in zip(lay.y, fig.data[1].marker.size, lay.kinds) if k == "group")
        assert len(squares) >= 4
        assert all(b[0] - a[0] >= (a[1] + b[1]) / 2 or b[0] == a[0] for a, b in zip(squares, squares[1:]))


def test_panes_share_a_vertical_scale_only_when_heights_are_comparable(table):
    one, two = layout_graph(table, layer=0), layout_graph(table, layer=1)
    yr = shared_yrange(one, two)
    assert yr is not None and yr[0] < min(one.y) and max(one.y) < yr[1]
    whole, small = layout_graph(table, collapsed=set()), layout_graph(without_constants(table), layer=0)
    height = lambda lay: lay.bounds[3] - lay.bounds[1]  # noqa: E731
    assert height(whole) > 2.5 * height(small) and shared_yrange(small, whole) is None
    fig = graph_figure(one, yrange=yr)
    assert fig.layout.yaxis.range[1] == yr[0] and fig.layout.yaxis.range[0] >= yr[1]


def test_scene_is_what_the_plotly_figure_draws(table):
    lay = layout_graph(table, layer=0)
    sc = graph_scene(lay, highlight={lay.ids[1]}, width=500, title="t")
    fig = graph_figure(lay, highlight={lay.ids[1]}, width=500, title="t")
    assert sc["nodes"]["id"] == list(fig.data[1].customdata) and sc["width"] == fig.layout.width == 500
    # plotly starts a ringed node's label with a space, past its ring
    assert sc["nodes"]["label"] == [t.lstrip("\u2002") for t in fig.data[1].text or [""] * len(lay)]
    assert len(sc["edges"]) == 2 * len(lay.edges) and sc["highlight"] == [1]
    assert (fig.data[2].x[0], fig.data[2].y[0]) == (lay.x[1], lay.y[1])
    import json

    json.dumps(sc)  # goes to the browser as it is


@pytest.mark.parametrize("width", [300, 540, 900])
def test_layer_view_figure_names_every_item(table, width):
    """Layer 0 as drawn: a few named markers for what is outside, no blank dots, a hover on everything."""
    lay = layout_graph(without_constants(table), layer=0)  # as the app opens it (constants hidden)
    fig = graph_figure(lay, width=width)
    nodes = fig.data[1]
    assert list(nodes.customdata) == lay.ids
    outside = [k for k, kd in enumerate(lay.kinds) if kd != "node"]
    assert 2 <= len(outside) <= 4
    texts = list(nodes.text or [""] * len(lay))
    assert all(texts[k] for k in outside)  # markers always carry their label
    assert all(nodes.textposition[k] in ("top center", "bottom center") for k in outside)
    assert all(h and "<b>" in h for h in nodes.hovertext)
    if width >= 540:
        assert all(texts), [lay.labels[k] for k, t in enumerate(texts) if not t]  # no unnamed dot
        assert {texts[k] for k in outside} >= {"hidden states", "attention mask", "to layer 1"}


def test_a_marker_rings_like_a_node(table):
    lay = layout_graph(table, layer=0)
    mask = lay.members["in:mask"][0]
    # the app rings the items standing for removed nodes (ui/app.py: _items_for): a marker's members resolve to it
    items = {g for g, ms in lay.members.items() if {mask} & set(ms)}
    assert items == {"in:mask"}
    sc = graph_scene(lay, highlight=items, selected={"in:hidden"})
    assert sc["highlight"] == [lay.ids.index("in:mask")] and sc["selected"] == [lay.ids.index("in:hidden")]
    assert sc["nodes"]["labelpos"][lay.ids.index("in:mask")] == "t"
