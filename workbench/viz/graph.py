"""Graph pictures: a :class:`~workbench.graph.layout.Layout` in, what to draw out.

:func:`graph_scene` computes everything a pane shows (positions, colours, symbols,
the labels that fit, hovers, rings, layer boxes) as plain data; the app's graph
widget draws it in the browser, and :func:`graph_figure` draws it with plotly
for notebooks and reports (views up to :data:`SVG_LIMIT` items as SVG, larger
ones as WebGL).
"""

from __future__ import annotations

from typing import Iterable, Mapping

from ..graph.layered import RANK_GAP
from ..graph.layout import CHAR_PX, FIT_WIDTH, FUSED_SYMBOL_OPS, TEXT_PX, Layout
from .providers import legend_html, plotly_outline, provider_overlay

#: Above this many items the figure switches to WebGL traces.
SVG_LIMIT = 400
#: Above this many items node labels are left out (hover still has them).
LABEL_LIMIT = 160
#: Figure width in pixels when the caller gives none: the app's pane (what views are laid out for).
DEFAULT_WIDTH = FIT_WIDTH + 20
#: The tallest figure drawn when the caller gives no height (a taller layout is scaled down to fit).
MAX_HEIGHT = 1200
#: The font size of node labels on screen (pixels), in the app, the report and the notebooks' figures.
LABEL_FONT_PX = 9
#: Rows closer than this many pixels get no labels: they would overlap vertically.
MIN_ROW_PX = 12
_MARGIN = dict(l=10, r=10, t=36, b=10)
#: Room kept around a layout's bounds, in pixels.
_PAD = 4.0
#: Short names for long op types, so a label fits between neighbours.
SHORT_OPS = {
    "SkipLayerNormalization": "SkipLN", "LayerNormalization": "LayerNorm", "EmbedLayerNormalization": "EmbedLN",
    "SkipSimplifiedLayerNormalization": "SkipRMSNorm", "SimplifiedLayerNormalization": "RMSNorm",
    "MultiHeadAttention": "MHA", "GroupQueryAttention": "GQA", "RotaryEmbedding": "Rotary",
    "ConstantOfShape": "ConstOfShape", "DynamicQuantizeMatMul": "DQMatMul", "MatMulIntegerToFloat": "MatMulInt",
    "DynamicQuantizeLinear": "DQLinear", "ReduceMean": "ReduceMean", "GreaterOrEqual": "GreaterEq",
}

HIGHLIGHT = "#d62728"
SELECT = "#111111"
_CATEGORY = {
    "matmul": ("#1f77b4", {"MatMul", "Gemm", "MatMulInteger", "DynamicQuantizeMatMul", "MatMulIntegerToFloat"}),
    "norm": ("#2ca02c", {"LayerNormalization", "ReduceMean", "Sqrt", "Pow", "Div"}),
    "act": ("#ff7f0e", {"Erf", "Gelu", "Tanh", "Softmax", "Relu", "Sigmoid"}),
    "elem": ("#8c8c8c", {"Add", "Mul", "Sub", "Where", "Cast", "Equal", "Not", "Expand", "GreaterOrEqual", "And"}),
    "shape": ("#c7c7c7", {"Reshape", "Transpose", "Shape", "Gather", "Unsqueeze", "Squeeze", "Concat", "Slice",
                          "Constant", "ConstantOfShape", "Range", "Identity", "Split"}),
}
FUSED_COLOUR = "#9467bd"
#: Kinds of the labelled markers of a layer view, and where their label sits.
MARKER_KINDS = ("in", "out")
MARKER_TEXT = {"in": "top center", "out": "bottom center"}
MARKER_SHORT = {"hidden states": "hidden", "attention mask": "mask", "other inputs": "other"}
#: Colour of a layer view's in / out markers (what feeds the layer, where its results go).
MARKER_COLOUR = "#f2c14e"
KIND_STYLE = {  # symbol, size
    "node": ("circle", 11), "group": ("square", 26), "in": ("triangle-down", 15), "out": ("triangle-down", 15),
    "input": ("triangle-down", 13), "output": ("triangle-up", 13),
}
FUSED_OPS = FUSED_SYMBOL_OPS  # drawn as a diamond, larger than other nodes


def op_colour(op: str) -> str:
    """The colour of an op type: fused contrib ops purple, others by category."""
    if op in FUSED_OPS:
        return FUSED_COLOUR
    for colour, ops in _CATEGORY.values():
        if op in ops:
            return colour
    return "#17becf"


def _lat_colour(share: float) -> str:
    """White-yellow-red ramp for a latency share in [0, 1]."""
    s = max(0.0, min(1.0, share)) ** 0.5
    if s < 0.5:
        t = s / 0.5
        r, g, b = 255, int(255 - 55 * t), int(204 - 160 * t)
    else:
        t = (s - 0.5) / 0.5
        r, g, b = int(255 - 40 * t), int(200 - 170 * t), int(44 - 14 * t)
    return f"rgb({r},{g},{b})"


#: Three-letter codes for when a node's name does not fit beside it (its hover still names it in full).
TINY_OPS = {
    "Unsqueeze": "Usq", "Squeeze": "Sq", "Concat": "Cat", "Reshape": "Rsh", "Transpose": "Tr", "Gather": "Gat",
    "Shape": "Shp", "Slice": "Slc", "MatMul": "MM", "Softmax": "Smx", "LayerNormalization": "LN",
    "SkipLayerNormalization": "SLN", "Attention": "Att", "BiasGelu": "BG", "Where": "Whr", "Expand": "Exp",
    "Equal": "Eq", "Range": "Rng", "Constant": "Cst", "ConstantOfShape": "CoS", "Identity": "Id", "Cast": "Cas",
    "ReduceMean": "Mea", "Sqrt": "Sqr", "Softplus": "Sp", "GreaterOrEqual": "Ge", "Flatten": "Fl",
}


def tiny_label(label: str) -> str:
    """A code of at most three letters for ``label`` (see :data:`TINY_OPS`)."""
    return TINY_OPS.get(label, label[:3])


def short_label(label: str, limit: int = 12) -> str:
    """A node label short enough to sit next to its node: known abbreviations, else truncated."""
    if label in SHORT_OPS:
        return SHORT_OPS[label]
    return label if len(label) <= limit else label[: limit - 1] + "…"


def visible_labels(layout: Layout, labels: list[str], *, width: int, height: int,
                   xrange: tuple[float, float], yrange: tuple[float, float]) -> list[str]:
    """``labels`` in the longest form that fits beside each item (hover still names every node in full).

    A label is drawn to the right of its node and ends before the next node of
    the same row and inside the figure (:func:`fit_label`: the full name, else
    shortened); rows must be far enough apart for one line of text. A layer view's markers are always
    named (in one word where the full name does not fit).
    """
    n = len(layout)
    if n == 0 or n > LABEL_LIMIT:
        return [""] * n
    px_x = (width - _MARGIN["l"] - _MARGIN["r"]) / max(1e-9, xrange[1] - xrange[0])
    px_y = (height - _MARGIN["t"] - _MARGIN["b"]) / max(1e-9, abs(yrange[1] - yrange[0]))
    out = [""] * n
    # Markers' labels are centred above (below) them, where no node label is: never blank, shortened where
    # two would overlap or one would leave the plot.
    marker_rows: dict[float, list[int]] = {}
    for k, kd in enumerate(layout.kinds):
        if kd in MARKER_KINDS:
            marker_rows.setdefault(layout.y[k], []).append(k)
    for ks in marker_rows.values():
        ks.sort(key=lambda k: layout.x[k])
        full = [labels[k] for k in ks]
        short = [marker_short(t) for t in full]
        out_ks = full if _centred_fit(layout, ks, full, px_x, xrange) else short
        for k, t in zip(ks, out_ks):
            out[k] = t
    if px_y * (RANK_GAP + TEXT_PX) < MIN_ROW_PX:  # node labels would overlap row to row
        return out
    rows: dict[float, list[int]] = {}
    for k, y in enumerate(layout.y):
        rows.setdefault(y, []).append(k)
    for ks in rows.values():
        ks.sort(key=lambda k: layout.x[k])
        for j, k in enumerate(ks):
            if layout.kinds[k] in MARKER_KINDS:  # an obstacle for its left neighbour's label; labelled above
                continue
            room = (xrange[1] - layout.x[k]) * px_x
            if j + 1 < len(ks):
                room = min(room, (layout.x[ks[j + 1]] - layout.x[k]) * px_x - 7)
            out[k] = fit_label(labels[k], int((room - 9) // CHAR_PX), node=layout.kinds[k] == "node")
    return out


def fit_label(label: str, chars: int, *, node: bool = True) -> str:
    """The longest form of ``label`` in ``chars`` characters: the full name, its short form (``SkipLN``), its
    first letters and "…" (at least four), a node's three-letter code, or "" (its hover still names it)."""
    forms = [label, SHORT_OPS.get(label, "")]
    if chars >= 5 and len(label) > chars:
        forms.append(label[: chars - 1] + "…")
    if node:
        forms.append(tiny_label(label.strip()))
    return next((f for f in forms if f and len(f) <= chars), "")


def marker_short(label: str) -> str:
    """The one-word form of a marker's label, for narrow panes."""
    if label.startswith("to "):
        return "out"
    return MARKER_SHORT.get(label, label.split(" ")[0])


def _centred_fit(layout: Layout, ks: list[int], texts: list[str], px_x: float, xrange: tuple[float, float]) -> bool:
    """Whether labels centred on the items ``ks`` (sorted by x) stay apart and inside the plot."""
    half = [CHAR_PX * len(t) / 2 for t in texts]
    for j, k in enumerate(ks):
        x = layout.x[k]
        if (x - xrange[0]) * px_x < half[j] or (xrange[1] - x) * px_x < half[j]:
            return False
        if j and (x - layout.x[ks[j - 1]]) * px_x < half[j] + half[j - 1] + 6:
            return False
    return True


def _colours_and_hover(layout: Layout, latency: Mapping[str, float] | None) -> tuple[list[str], list[str]]:
    """Each item's colour (its op, kind, or share of ``latency``) and hover text (with its latency, if given)."""
    colours = []
    lat_total = sum(v for v in (latency or {}).values() if v and v > 0) or 0.0
    hover = list(layout.hover)
    top_share = _max_share(layout, latency, lat_total) if latency is not None else 1.0
    for k, (iid, op, kd) in enumerate(zip(layout.ids, layout.ops, layout.kinds)):
        if latency is not None and kd in ("node", "group"):
            ms = latency.get(iid, 0.0) or 0.0
            if kd == "group":
                ms = sum(latency.get(m, 0.0) or 0.0 for m in layout.members.get(iid, ()))
            share = ms / lat_total if lat_total else 0.0
            colours.append(_lat_colour(share / top_share))
            hover[k] = hover[k] + f"<br><b>latency</b>: {ms:.3f} ms ({100 * share:.1f}%)"
        elif kd == "group":
            colours.append("#dbe6f4")
        elif kd in ("input", "output"):
            colours.append("#444444")
        elif kd in ("in", "out"):
            colours.append(MARKER_COLOUR)
        else:
            colours.append(op_colour(op))
    return colours, hover


def graph_scene(layout: Layout, *, highlight: Iterable[str] = (), selected: Iterable[str] = (),
                latency: Mapping[str, float] | None = None, height: int | None = None,
                width: int | None = None, yrange: tuple[float, float] | None = None,
                title: str | None = None, providers: Mapping[str, str] | None = None) -> dict:
    """What a graph pane draws for ``layout``, as plain JSON-able data (no plotly).

    The app's own graph widget (:mod:`workbench.viz.graph_widget`) draws this in the browser;
    :func:`graph_spec` turns it into plotly traces for static figures.

    Args:
        layout: from :func:`workbench.graph.layout.layout_graph`.
        highlight: item ids to ring in red (the nodes a step replaced, or emitted).
        selected: item ids to ring in black (a clicked node and what it replaced).
        latency: item id → milliseconds; colours nodes by their share of the total.
        height: figure height in pixels (default grows with the graph's depth).
        width: figure width in pixels (default :data:`DEFAULT_WIDTH`); the figure is
            drawn at exactly this width, and labels are kept only where they fit in it.
        yrange: the (top, bottom) ranks to show, to give two panes one vertical scale
            (default: this layout's own depth).
        title: figure title (default: the layout's).
        providers: node id → its execution provider ("CPU", "OpenVINO"): ``nodes["outline"]`` (a colour per item,
            "" for none), a hover line and ``legend`` (``[provider, colour]``) are added (None: nothing).

    Returns:
        ``width``, ``height``, ``title``, ``margin`` (l, r, t, b), ``xrange``, ``yrange`` (top, bottom;
        y grows downwards), ``nodes`` (columns ``id``, ``op``, ``x``, ``y``, ``color``, ``symbol``, ``size``,
        ``label`` ("" where it would not fit), ``labelpos`` ("r" right of the node, "t" above, "b" below),
        ``hover``), ``edges`` (flat item indices ``[u0, v0, u1, v1, ...]``), ``routes`` (per edge, its bend points
        between its ends, flat ``[x0, y0, x1, y1, ...]``, drawn in order), ``highlight`` and
        ``selected`` (item indices, sorted), ``boxes`` (``[x0, y0, x1, y1, group]``).
    """
    highlight, selected = set(highlight), set(selected)
    colours, hover = _colours_and_hover(layout, latency)
    w = int(width or DEFAULT_WIDTH)
    h, xr, yr, scale = _frame(layout, w, height, yrange)
    group_px = max(10, min(KIND_STYLE["group"][1], int(KIND_STYLE["group"][1] * scale)))
    sizes = [group_px if k == "group" else KIND_STYLE[k][1] + (4 if op in FUSED_OPS else 0)
             for k, op in zip(layout.kinds, layout.ops)]
    symbols = ["diamond" if (op in FUSED_OPS and k == "node") else KIND_STYLE[k][0]
               for op, k in zip(layout.ops, layout.kinds)]
    # The labels do not depend on the rings (the widget starts a ringed node's label past its ring), so a
    # click that only moves rings sends only the rings.
    texts = visible_labels(layout, list(layout.labels), width=w, height=h, xrange=(xr[0], xr[1]),
                           yrange=(yr[0], yr[1]))
    index = layout.index()
    edges: list[int] = []
    for u, v in layout.edges:
        edges += [u, v]
    return _with_providers(dict(
        width=w, height=h, title=title if title is not None else layout.title, margin=dict(_MARGIN),
        xrange=[float(xr[0]), float(xr[1])], yrange=[float(yr[0]), float(yr[1])],
        nodes=dict(id=list(layout.ids), op=list(layout.ops), x=[round(float(v), 4) for v in layout.x],
                   y=[round(float(v), 4) for v in layout.y], color=colours, symbol=symbols, size=sizes,
                   label=texts, labelpos=[_LABEL_POS.get(kd, "r") for kd in layout.kinds], hover=hover),
        edges=edges, routes=[list(r) for r in (layout.routes or [[] for _ in layout.edges])],
        highlight=sorted({index[i] for i in highlight if i in index}),
        selected=sorted({index[i] for i in selected if i in index}),
        boxes=[[b.x0, b.y0, b.x1, b.y1, b.group] for b in layout.boxes],
    ), layout, providers)


def _with_providers(scene: dict, layout: Layout, providers: Mapping[str, str] | None) -> dict:
    """``scene`` with the provider overlay (each item's outline colour, a hover line, the legend), if any."""
    if providers is None:
        return scene
    over = provider_overlay(layout.ids, layout.kinds, layout.members, providers)
    scene["nodes"]["outline"] = over.outline
    scene["nodes"]["hover"] = [h + extra for h, extra in zip(scene["nodes"]["hover"], over.hover)]
    scene["legend"] = [list(item) for item in over.legend]
    return scene


#: Where a marker's label sits in a scene ("r": right of the node, "t": above, "b": below).
_LABEL_POS = {"in": "t", "out": "b"}
_PLOTLY_POS = {"r": "middle right", "t": "top center", "b": "bottom center"}


def graph_spec(layout: Layout, **kw) -> tuple[list[dict], dict]:
    """Plotly trace and layout dictionaries for ``layout`` (what :func:`graph_figure` draws).

    Four traces, in this order: edges, nodes, highlight rings, selection rings. Keyword
    arguments as :func:`graph_scene`.
    """
    sc = graph_scene(layout, **kw)
    nd = sc["nodes"]
    kind = "scattergl" if len(layout) > SVG_LIMIT else "scatter"
    ex: list = []
    ey: list = []
    e = sc["edges"]
    for j, (u, v) in enumerate(zip(e[::2], e[1::2])):
        r = sc["routes"][j] if j < len(sc["routes"]) else []
        ex += [layout.x[u], *r[0::2], layout.x[v], None]
        ey += [layout.y[u], *r[1::2], layout.y[v], None]
    show_text = any(nd["label"])
    ringed = set(sc["highlight"]) | set(sc["selected"])  # plotly starts a label at the node: past the ring
    text = [("\u2002" + t if t and k in ringed and p == "r" else t) for k, (t, p) in enumerate(zip(nd["label"],
                                                                                                 nd["labelpos"]))]

    def ring(ks: list[int]) -> tuple[list, list]:
        return [layout.x[k] for k in ks], [layout.y[k] for k in ks]

    hx, hy = ring(sc["highlight"])
    sx, sy = ring(sc["selected"])
    traces = [
        dict(type=kind, name="edges", x=ex, y=ey, mode="lines", hoverinfo="skip", showlegend=False,
             line=dict(color="#9aa5b1", width=1)),
        dict(type=kind, name="nodes", x=list(layout.x), y=list(layout.y),
             mode="markers+text" if show_text else "markers", text=text if show_text else None,
             textposition=[_PLOTLY_POS[p] for p in nd["labelpos"]],
             textfont=dict(size=LABEL_FONT_PX, color="#333"),
             customdata=list(layout.ids), hovertext=nd["hover"], hoverinfo="text", showlegend=False,
             marker=dict(color=nd["color"], symbol=nd["symbol"], size=nd["size"], line=plotly_outline(nd.get("outline")))),
        dict(type=kind, name="highlight", x=hx, y=hy, mode="markers", hoverinfo="skip", showlegend=False,
             marker=dict(symbol="circle-open", size=20, color=HIGHLIGHT, line=dict(width=2.5, color=HIGHLIGHT))),
        dict(type=kind, name="selected", x=sx, y=sy, mode="markers", hoverinfo="skip", showlegend=False,
             marker=dict(symbol="circle-open", size=26, color=SELECT, line=dict(width=2, color=SELECT))),
    ]
    shapes, notes = [], []
    for x0, y0, x1, y1, group in sc["boxes"]:
        shapes.append(dict(type="rect", x0=x0, x1=x1, y0=y0, y1=y1, layer="below",
                           line=dict(color="#9ab", width=1, dash="dot"), fillcolor="rgba(120,150,200,0.06)"))
        notes.append(dict(x=x0, y=y0, text=group, showarrow=False, xanchor="left", yanchor="bottom",
                          font=dict(size=10, color="#567")))
    if sc.get("legend"):  # one line under the title: a coloured dot per provider
        notes.append(dict(xref="paper", yref="paper", x=0, y=1, yanchor="bottom", xanchor="left", showarrow=False,
                          font=dict(size=LABEL_FONT_PX + 1, color="#333"),
                          text=legend_html(sc["legend"])))
    lay = dict(
        title=dict(text=sc["title"], font=dict(size=13), x=0.02),
        height=sc["height"], width=sc["width"], autosize=False, margin=sc["margin"], plot_bgcolor="white",
        paper_bgcolor="white", xaxis=dict(visible=False, range=sc["xrange"]),
        yaxis=dict(visible=False, autorange=False, range=sc["yrange"][::-1]),
        hovermode="closest", dragmode="pan", shapes=shapes, annotations=notes, showlegend=False,
        uirevision=None,
    )
    return traces, lay


def shared_yrange(*layouts: Layout, max_ratio: float = 2.5) -> tuple[float, float] | None:
    """One vertical range (pixels of the layouts) for side-by-side panes, when their heights are comparable.

    With one range, both panes are drawn at one scale from the top, so the eye can
    compare them. When one graph is much taller (ratio above ``max_ratio``), sharing would
    shrink the other: None, and each pane keeps its own range.
    """
    spans = [(lay.bounds[1] - _PAD, lay.bounds[3] + _PAD) for lay in layouts if len(lay)]
    heights = [b - a for a, b in spans]
    if len(spans) < 2 or max(heights) > max_ratio * max(1.0, min(heights)):
        return None
    return (min(a for a, _ in spans), max(b for _, b in spans))


def pane_height(*layouts: Layout, width: int = DEFAULT_WIDTH, yrange: tuple[float, float] | None = None) -> int:
    """The figure height that shows each of ``layouts`` whole at ``width`` (full size where it fits)."""
    return max((_frame(lay, width, None, yrange)[0] for lay in layouts), default=360)


def _frame(layout: Layout, width: int, height: int | None,
           yrange: tuple[float, float] | None) -> tuple[int, list[float], list[float], float]:
    """Height, x and y ranges and scale (figure pixels per layout pixel, at most 1, the same across and down)."""
    pw = width - _MARGIN["l"] - _MARGIN["r"]
    bx0, by0, bx1, by1 = layout.bounds if len(layout) else (0.0, 0.0, 1.0, 1.0)
    x0, x1 = bx0 - _PAD, bx1 + _PAD
    y0, y1 = (yrange[0], yrange[1]) if yrange is not None else (by0 - _PAD, by1 + _PAD)
    scale = min(1.0, pw / max(1e-9, x1 - x0))
    if height is None:
        height = int(min(MAX_HEIGHT, (y1 - y0) * scale + _MARGIN["t"] + _MARGIN["b"]))
    ph = height - _MARGIN["t"] - _MARGIN["b"]
    scale = min(scale, ph / max(1e-9, y1 - y0))
    cx = (x0 + x1) / 2
    return int(height), [cx - pw / scale / 2, cx + pw / scale / 2], [y0, y0 + ph / scale], scale


def _max_share(layout: Layout, latency: Mapping[str, float], total: float) -> float:
    best = 0.0
    for iid, kd in zip(layout.ids, layout.kinds):
        if kd == "group":
            ms = sum(latency.get(m, 0.0) or 0.0 for m in layout.members.get(iid, ()))
        else:
            ms = latency.get(iid, 0.0) or 0.0
        best = max(best, ms / total if total else 0.0)
    return best or 1.0


def graph_figure(layout: Layout, **kw):
    """A ``plotly.graph_objects.Figure`` of ``layout`` (see :func:`graph_spec` for options)."""
    import plotly.graph_objects as go

    traces, lay = graph_spec(layout, **kw)
    return go.Figure(data=traces, layout=lay)
