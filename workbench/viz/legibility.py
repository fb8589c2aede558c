"""How legible a drawn graph is, measured on its scene (:func:`workbench.viz.graph.graph_scene`), in pixels.

Four figures a reader notices: edges that cross, edges drawn through a node they do not
end at, labels drawn shorter than the full name, and how tall the picture is for its
width. ``benchmarks/layout_quality.py`` writes them for the views a newcomer opens first;
the layout's tests hold them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..graph.layout import Layout
from .graph import CHAR_PX, LABEL_FONT_PX

#: Height of one line of label text (9 px font), in pixels.
TEXT_PX = 12.0


@dataclass(frozen=True)
class Legibility:
    crossings: int  # pairs of segments of two edges that cross
    through: int  # edges whose line enters the box of a node it does not end at
    cut: int  # items whose label is drawn shorter than their full label (or not at all)
    aspect: float  # height over width of the picture
    overlaps: int  # pairs of node boxes (symbol and label) that overlap
    outside: int = 0  # items whose box (symbol and label), and edges whose line, reach past the figure's edges


def min_label_px(scene: dict, shown_width: float | None = None) -> float | None:
    """The font size (pixels on screen) of the scene's node labels when the picture is shown ``shown_width``
    pixels wide (default: its own width, as the app's pane and the report draw it); None without labels."""
    if not any(scene["nodes"]["label"]):
        return None
    return LABEL_FONT_PX * (shown_width or scene["width"]) / scene["width"]


def node_boxes(scene: dict) -> np.ndarray:
    """Each item's box in figure pixels (x0, y0, x1, y1): its symbol and the label drawn beside it."""
    px, py = _to_px(scene)
    n = scene["nodes"]
    boxes = []
    for k in range(len(n["x"])):
        x, y, r = px(n["x"][k]), py(n["y"][k]), n["size"][k] / 2
        box = [x - r, y - r, x + r, y + r]
        text = CHAR_PX * len(n["label"][k])
        if text and n["labelpos"][k] == "r":
            box = [box[0], min(box[1], y - TEXT_PX / 2), x + r + 3 + text, max(box[3], y + TEXT_PX / 2)]
        elif text and n["labelpos"][k] == "t":
            box = [min(box[0], x - text / 2), y - r - 3 - TEXT_PX, max(box[2], x + text / 2), box[3]]
        elif text:
            box = [min(box[0], x - text / 2), box[1], max(box[2], x + text / 2), y + r + 3 + TEXT_PX]
        boxes.append(box)
    return np.array(boxes, dtype=float).reshape(-1, 4)


def edge_lines(scene: dict) -> list[tuple[int, int, list[tuple[float, float]]]]:
    """Each edge as (source, target, its polyline in figure pixels), as the scene draws it."""
    px, py = _to_px(scene)
    n, e, routes = scene["nodes"], scene["edges"], scene.get("routes") or []
    out = []
    for j in range(0, len(e), 2):
        u, v = e[j], e[j + 1]
        bends = routes[j // 2] if j // 2 < len(routes) else []
        pts = [(n["x"][u], n["y"][u]), *zip(bends[0::2], bends[1::2]), (n["x"][v], n["y"][v])]
        out.append((u, v, [(px(a), py(b)) for a, b in pts]))
    return out


def crossings(lines: list[tuple[int, int, list[tuple[float, float]]]]) -> int:
    """Pairs of segments of two different edges that cross (touching at an end does not count)."""
    segs, owner = [], []
    for j, (_, _, pts) in enumerate(lines):
        for a, b in zip(pts, pts[1:]):
            segs.append((*a, *b))
            owner.append(j)
    if len(segs) < 2:
        return 0
    s, o = np.array(segs), np.array(owner)
    p, r = s[:, None, :2], s[:, None, 2:] - s[:, None, :2]
    q, t = s[None, :, :2], s[None, :, 2:] - s[None, :, :2]
    den = r[..., 0] * t[..., 1] - r[..., 1] * t[..., 0]
    qp = q - p
    with np.errstate(divide="ignore", invalid="ignore"):
        tu = (qp[..., 0] * t[..., 1] - qp[..., 1] * t[..., 0]) / den
        tv = (qp[..., 0] * r[..., 1] - qp[..., 1] * r[..., 0]) / den
    eps = 1e-3
    hit = (np.abs(den) > 1e-9) & (tu > eps) & (tu < 1 - eps) & (tv > eps) & (tv < 1 - eps)
    return int((hit & (o[:, None] < o[None, :])).sum())


def edges_through_nodes(boxes: np.ndarray, lines) -> int:
    """Edges whose polyline enters (by more than a pixel) the box of an item that is not one of its ends."""
    count = 0
    for u, v, pts in lines:
        keep = np.ones(len(boxes), bool)
        keep[[u, v]] = False
        b = boxes[keep] + np.array([1.0, 1.0, -1.0, -1.0])
        count += any(_segment_hits(b, a, c) for a, c in zip(pts, pts[1:]))
    return count


def legibility(layout: Layout, scene: dict) -> Legibility:
    """The four figures (and overlapping boxes) of ``scene``, drawn from ``layout``."""
    boxes, lines = node_boxes(scene), edge_lines(scene)
    cut = sum(1 for full, drawn in zip(layout.labels, scene["nodes"]["label"]) if drawn != full)
    ov = 0
    if len(boxes) > 1:
        a, b = boxes[:, None, :], boxes[None, :, :]
        inter = (np.minimum(a[..., 2], b[..., 2]) - np.maximum(a[..., 0], b[..., 0]) > 1) & \
                (np.minimum(a[..., 3], b[..., 3]) - np.maximum(a[..., 1], b[..., 1]) > 1)
        ov = int(np.triu(inter, 1).sum())
    w, h = scene["width"], scene["height"]
    out = int(((boxes[:, 0] < 0) | (boxes[:, 2] > w) | (boxes[:, 1] < 0) | (boxes[:, 3] > h)).sum())
    out += sum(1 for _, _, pts in lines if any(not (0 <= x <= w and 0 <= y <= h) for x, y in pts))
    return Legibility(crossings=crossings(lines), through=edges_through_nodes(boxes, lines), cut=cut,
                      aspect=round(scene["height"] / scene["width"], 3), overlaps=ov, outside=out)


def _segment_hits(b: np.ndarray, a: tuple[float, float], c: tuple[float, float]) -> bool:
    """Whether the segment a-c enters any of the boxes ``b`` (Liang-Barsky clipping, all boxes at once)."""
    dx, dy = c[0] - a[0], c[1] - a[1]
    t0, t1 = np.zeros(len(b)), np.ones(len(b))
    ok = np.ones(len(b), bool)
    for pd, qd in ((-dx, a[0] - b[:, 0]), (dx, b[:, 2] - a[0]), (-dy, a[1] - b[:, 1]), (dy, b[:, 3] - a[1])):
        if pd == 0:
            ok &= qd >= 0
        elif pd < 0:
            t0 = np.maximum(t0, qd / pd)
        else:
            t1 = np.minimum(t1, qd / pd)
    return bool(np.any(ok & (t0 < t1)))


def _to_px(scene: dict):
    w, h, m = scene["width"], scene["height"], scene["margin"]
    (x0, x1), (y0, y1) = scene["xrange"], scene["yrange"]
    sx, sy = (w - m["l"] - m["r"]) / ((x1 - x0) or 1), (h - m["t"] - m["b"]) / ((y1 - y0) or 1)
    return (lambda x: m["l"] + (x - x0) * sx), (lambda y: m["t"] + (y - y0) * sy)


__all__ = ["Legibility", "crossings", "edge_lines", "edges_through_nodes", "legibility", "min_label_px",
           "node_boxes"]
