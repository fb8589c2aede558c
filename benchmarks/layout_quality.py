"""How readable the graph views are, measured on the picture a user gets (the scene the app draws).

Usage: python benchmarks/layout_quality.py [--width 520] [--json OUT]

For three views, laid out with :func:`workbench.graph.layout.layout_graph` and turned into the app's scene
(:func:`workbench.viz.graph.graph_scene`) at the app's default pane width (520 px), in pixels:

- ``crossings``: pairs of edge segments (of different edges) that cross;
- ``through``: edges whose drawn polyline passes through the box of a node that is not one of its ends
  (a node's box: its symbol and the label drawn beside it);
- ``cut``: items whose drawn label is shorter than their full label (op type, marker or group name);
- ``aspect``: the picture's height over its width;
- ``layout_s``: seconds :func:`layout_graph` took.

The views: bert-base (random weights, TorchScript export) layer 0 in the snapshot just before the ORT chain's
``attention`` step; the workshop's tiny ModernBERT (dynamo export) layer 1, the layer with the local window;
bert-base's whole-model view with its groups as boxes (the app's default: every group collapsed) and with
layer 0 opened inside its box.

Results of each run go to benchmarks/results/layout_quality.md (and --json).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

#: The app's default pane width (``workbench.ui.state.AppState.pane_width``).
APP_WIDTH = 520
#: Height of one line of label text, in pixels (the app draws labels at 9-10 px).
TEXT_PX = 11


def _table(sn):
    from workbench.graph.layout import node_table, without_constants

    layer_of = getattr(getattr(sn, "diff", None), "layer_of", None) or None
    return without_constants(node_table(getattr(sn, "skeleton", None) or sn.model, layer_of=layer_of))


def bert_base_tables():
    """bert-base's snapshot before the ORT chain's attention step (TorchScript export)."""
    from workbench.config import FusionPlan
    from workbench.export import export
    from workbench.fusion import Timeline
    from workbench.models import resolve

    src = resolve("bert-base")
    res = export(src)
    tl = Timeline(res.path, FusionPlan(engine="ort"), num_heads=src.num_heads, hidden_size=src.hidden_size,
                  num_layers=src.num_layers)
    snaps = tl.run()
    k = next(i for i, s in enumerate(snaps) if s.step == "attention")
    return _table(snaps[k - 1]), _table(snaps[0])


def modernbert_table():
    """The workshop's tiny ModernBERT exported by dynamo (layer 1 has the 16-token local window)."""
    import onnx

    from workbench.config import ExportConfig
    from workbench.export import export
    from workbench.models import resolve
    from test_workshop import save_tiny_modernbert

    src = resolve(save_tiny_modernbert(Path(tempfile.mkdtemp(prefix="wb-mb-"))))
    res = export(src, ExportConfig(exporter="dynamo", attention="sdpa"))
    from workbench.graph.layout import node_table, without_constants

    return without_constants(node_table(onnx.load(str(res.path))))


def picture(scene: dict) -> dict:
    """Node boxes and edge polylines of a scene, in pixels."""
    from workbench.viz.graph import CHAR_PX

    w, h, m = scene["width"], scene["height"], scene["margin"]
    (x0, x1), (y0, y1) = scene["xrange"], scene["yrange"]
    sx, sy = (w - m["l"] - m["r"]) / ((x1 - x0) or 1), (h - m["t"] - m["b"]) / ((y1 - y0) or 1)

    def px(x, y):
        return m["l"] + (x - x0) * sx, m["t"] + (y - y0) * sy

    n = scene["nodes"]
    boxes = []
    for k in range(len(n["x"])):
        x, y = px(n["x"][k], n["y"][k])
        r = n["size"][k] / 2
        bx = [x - r, y - r, x + r, y + r]
        tw = CHAR_PX * len(n["label"][k])
        if tw:
            pos = n["labelpos"][k]
            if pos == "r":
                bx[2] = x + r + 3 + tw
                bx[1], bx[3] = min(bx[1], y - TEXT_PX / 2), max(bx[3], y + TEXT_PX / 2)
            elif pos == "t":
                bx[0], bx[2], bx[1] = min(bx[0], x - tw / 2), max(bx[2], x + tw / 2), y - r - 3 - TEXT_PX
            else:
                bx[0], bx[2], bx[3] = min(bx[0], x - tw / 2), max(bx[2], x + tw / 2), y + r + 3 + TEXT_PX
        boxes.append(bx)
    e, routes = scene["edges"], scene.get("routes") or []
    lines = []
    for j in range(0, len(e), 2):
        u, v = e[j], e[j + 1]
        bends = routes[j // 2] if j // 2 < len(routes) else []
        pts = [(n["x"][u], n["y"][u])] + list(zip(bends[::2], bends[1::2])) + [(n["x"][v], n["y"][v])]
        lines.append((u, v, [px(a, b) for a, b in pts]))
    return dict(boxes=np.array(boxes, dtype=float).reshape(-1, 4), lines=lines, width=w, height=h)


def crossings(lines) -> int:
    """Pairs of segments of different edges that cross (touching at a shared end does not count)."""
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

    def cross(a, b):
        return a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0]

    den = cross(r, t)
    with np.errstate(divide="ignore", invalid="ignore"):
        tu = cross(q - p, t) / den
        tv = cross(q - p, r) / den
    eps = 1e-3
    hit = (np.abs(den) > 1e-9) & (tu > eps) & (tu < 1 - eps) & (tv > eps) & (tv < 1 - eps)
    hit &= o[:, None] < o[None, :]
    return int(hit.sum())


def through(boxes: np.ndarray, lines) -> int:
    """Edges whose polyline enters the box of a node other than its two ends (1 px inside the box)."""
    count = 0
    for u, v, pts in lines:
        others = np.ones(len(boxes), bool)
        others[[u, v]] = False
        b = boxes[others] + np.array([1, 1, -1, -1])
        hit = False
        for (ax, ay), (bx, by) in zip(pts, pts[1:]):
            # Liang-Barsky clip of the segment against every box at once.
            dx, dy = bx - ax, by - ay
            t0, t1 = np.zeros(len(b)), np.ones(len(b))
            ok = np.ones(len(b), bool)
            for pd, qd in ((-dx, ax - b[:, 0]), (dx, b[:, 2] - ax), (-dy, ay - b[:, 1]), (dy, b[:, 3] - ay)):
                if pd == 0:
                    ok &= qd >= 0
                    continue
                rr = qd / pd
                if pd < 0:
                    t0 = np.maximum(t0, rr)
                else:
                    t1 = np.minimum(t1, rr)
            if np.any(ok & (t0 < t1)):
                hit = True
                break
        count += hit
    return count


def measure(name: str, make, width: int) -> dict:
    from workbench.viz.graph import graph_scene

    t0 = time.perf_counter()
    lay = make()
    t_lay = time.perf_counter() - t0
    sc = graph_scene(lay, width=width)
    pic = picture(sc)
    cut = sum(1 for full, drawn in zip(lay.labels, sc["nodes"]["label"]) if drawn != full)
    return dict(view=name, items=len(lay), edges=len(lay.edges), crossings=crossings(pic["lines"]),
                through=through(pic["boxes"], pic["lines"]), cut=cut,
                aspect=round(sc["height"] / sc["width"], 2), size=f"{sc['width']}x{sc['height']}",
                layout_s=round(t_lay, 3))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--width", type=int, default=APP_WIDTH)
    ap.add_argument("--json", default=None)
    ap.add_argument("--label", default="", help="a name for this run in the results file (e.g. before, after)")
    a = ap.parse_args()
    os.environ.setdefault("WORKBENCH_CACHE", str(Path(tempfile.gettempdir()) / "wb-layout-quality"))
    from workbench.graph.groups import view_groups
    from workbench.graph.layout import layout_graph

    before_attention, export_tab = bert_base_tables()
    mb = modernbert_table()
    views = [
        ("bert-base layer 0, before attention", lambda: layout_graph(before_attention, layer=0)),
        ("tiny ModernBERT layer 1 (local window)", lambda: layout_graph(mb, layer=1)),
        ("bert-base whole model (groups)", lambda: layout_graph(export_tab)),
        ("bert-base whole model, layer 0 open", lambda: layout_graph(
            export_tab, collapsed=set(view_groups(export_tab).values()) - {"layer 0"})),
    ]
    rows = [measure(name, make, a.width) for name, make in views]
    load = os.getloadavg()
    head = "| view | items | edges | crossings | edges through a node | labels cut | aspect (h/w) | size px | layout s |"
    lines = [f"## {a.label or 'run'} ({time.strftime('%Y-%m-%d %H:%M')}, width {a.width} px, load {load[0]:.2f}"
             f" on {os.cpu_count()} cores)", "", head, "|" + "---|" * 9]
    for r in rows:
        lines.append(f"| {r['view']} | {r['items']} | {r['edges']} | {r['crossings']} | {r['through']} | {r['cut']} "
                     f"| {r['aspect']} | {r['size']} | {r['layout_s']} |")
    text = "\n".join(lines)
    print(text)
    out = ROOT / "benchmarks" / "results" / "layout_quality.md"
    with out.open("a", encoding="utf-8") as f:
        f.write(text + "\n\n")
    if a.json:
        Path(a.json).write_text(json.dumps(dict(width=a.width, load=load, views=rows), indent=1))


if __name__ == "__main__":
    main()
