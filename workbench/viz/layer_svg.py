"""One encoder layer before and after the fusions as static SVG pictures (for the HTML report).

Draws :func:`workbench.viz.graph.graph_scene` (the same scene the app's graph pane draws) as plain
SVG: edges as polylines (bent around the nodes they pass), nodes as circles (fused operators as
diamonds) in the app's colours, and the labels that fit. No plotly, no script: the picture shows in
any browser and in a saved file.
"""

from __future__ import annotations

import html
from typing import Mapping

from ..graph.nodes import node_table, without_constants
from ..graph.layout import CHAR_PX, layout_graph
from .graph import LABEL_FONT_PX, graph_scene
from .providers import OUTLINE_PX


def scene_svg(scene: dict) -> str:
    """An ``<svg>`` element for a graph scene."""
    w, h, m = scene["width"], scene["height"], scene["margin"]
    (x0, x1), (ytop, ybot) = scene["xrange"], scene["yrange"]
    pw, ph = w - m["l"] - m["r"], h - m["t"] - m["b"]

    def px(x: float) -> float:
        return m["l"] + (x - x0) / ((x1 - x0) or 1) * pw

    def py(y: float) -> float:
        return m["t"] + (y - ytop) / ((ybot - ytop) or 1) * ph

    n = scene["nodes"]
    xs, ys = [px(x) for x in n["x"]], [py(y) for y in n["y"]]
    out = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{w}' height='{h}' viewBox='0 0 {w} {h}' "
           f"font-family='sans-serif' font-size='{LABEL_FONT_PX}'>",
           f"<text x='{w / 2:.0f}' y='14' text-anchor='middle' font-size='12'>{html.escape(scene['title'] or '')}</text>"]
    e, routes = scene["edges"], scene.get("routes") or []
    for i in range(0, len(e), 2):
        u, v = e[i], e[i + 1]
        r = routes[i // 2] if i // 2 < len(routes) else []
        pts = [(xs[u], ys[u])] + [(px(a), py(b)) for a, b in zip(r[0::2], r[1::2])] + [(xs[v], ys[v])]
        path = " ".join(f"{a:.1f},{b:.1f}" for a, b in pts)
        out.append(f"<polyline points='{path}' fill='none' stroke='#bbb'/>")
    outline = n.get("outline") or [""] * len(xs)
    for k in range(len(xs)):
        r = max(3.0, n["size"][k] / 2.0)
        colour, x, y = n["color"][k], xs[k], ys[k]
        stroke = f" stroke='{outline[k]}' stroke-width='{OUTLINE_PX}'" if outline[k] else ""
        if n["symbol"][k] == "diamond":
            out.append(f"<polygon points='{x:.1f},{y - r:.1f} {x + r:.1f},{y:.1f} {x:.1f},{y + r:.1f} "
                       f"{x - r:.1f},{y:.1f}' fill='{colour}' stroke='#333'{stroke}/>")
        else:
            out.append(f"<circle cx='{x:.1f}' cy='{y:.1f}' r='{r:.1f}' fill='{colour}'{stroke}/>")
        label, pos = n["label"][k], n["labelpos"][k]
        if label:  # where the scene's labels were fitted: right of the node, or centred above / below a marker
            tx, ty, anchor = ((x, y - r - 3, "middle") if pos == "t" else (x, y + r + 3 + 8, "middle") if pos == "b"
                              else (x + r + 3, y + 3, "start"))
            out.append(f"<text x='{tx:.1f}' y='{ty:.1f}' text-anchor='{anchor}'>{html.escape(label)}</text>")
    x = 6.0
    for name, colour in scene.get("legend") or ():  # one line under the title: a dot per provider
        out.append(f"<circle cx='{x + 4:.1f}' cy='26' r='4' fill='none' stroke='{colour}' stroke-width='2'/>"
                   f"<text x='{x + 11:.1f}' y='29'>{html.escape(name)}</text>")
        x += 20 + CHAR_PX * len(name)
    out.append("</svg>")
    return "".join(out)


def layer_picture(snapshot, layer: int = 0, *, width: int = 420, title: str = "",
                  providers: Mapping[str, str] | None = None) -> str:
    """SVG of one encoder layer of a timeline snapshot ("" when the graph has no such layer); ``providers``
    (node id → execution provider) outlines each node in its provider's colour, with a legend line."""
    layer_of = getattr(getattr(snapshot, "diff", None), "layer_of", None) or None
    tab = without_constants(node_table(getattr(snapshot, "skeleton", None) or snapshot.model, layer_of=layer_of))
    if layer not in tab.layers:
        return ""
    return scene_svg(graph_scene(layout_graph(tab, layer=layer, width=width - 20), width=width, title=title,
                                 providers=providers))


__all__ = ["scene_svg", "layer_picture"]
