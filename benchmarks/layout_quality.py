"""How readable the graph views are, measured on the picture a user gets (the scene the app draws).

Usage: python benchmarks/layout_quality.py [--width 520] [--json OUT]

For three views, laid out with :func:`workbench.graph.layout.layout_graph` and turned into the app's scene
(:func:`workbench.viz.graph.graph_scene`) at the app's default pane width (520 px), in pixels:

- ``crossings``: pairs of edge segments (of different edges) that cross;
- ``through``: edges whose drawn polyline passes through the box of a node that is not one of its ends
  (a node's box: its symbol and the label drawn beside it);
- ``cut``: items whose drawn label is shorter than their full label (op type, marker or group name);
- ``aspect``: the picture's height over its width;
- ``overlaps``: pairs of node boxes that overlap;
- ``layout_s``: seconds :func:`layout_graph` took (median of 3).

The figures are computed by :mod:`workbench.viz.legibility` from the scene's coordinates.

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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

#: The app's default pane width (``workbench.ui.state.AppState.pane_width``).
APP_WIDTH = 520


def _table(sn):
    from workbench.graph.nodes import node_table, without_constants

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
    from test_workshop import save_tiny_modernbert

    from workbench.config import ExportConfig
    from workbench.export import export
    from workbench.models import resolve

    src = resolve(save_tiny_modernbert(Path(tempfile.mkdtemp(prefix="wb-mb-"))))
    res = export(src, ExportConfig(exporter="dynamo", attention="sdpa"))
    from workbench.graph.nodes import node_table, without_constants

    return without_constants(node_table(onnx.load(str(res.path))))


def measure(name: str, make, width: int) -> dict:
    from workbench.viz.graph import graph_scene
    from workbench.viz.legibility import legibility

    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        lay = make()
        times.append(time.perf_counter() - t0)
    sc = graph_scene(lay, width=width)
    q = legibility(lay, sc)
    return dict(view=name, items=len(lay), edges=len(lay.edges), crossings=q.crossings, through=q.through,
                cut=q.cut, aspect=round(q.aspect, 2), overlaps=q.overlaps, size=f"{sc['width']}x{sc['height']}",
                layout_s=round(sorted(times)[1], 3))


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
    head = ("| view | items | edges | crossings | edges through a node | labels cut | aspect (h/w) | boxes overlapping "
            "| size px | layout s (median of 3) |")
    lines = [f"## {a.label or 'run'} ({time.strftime('%Y-%m-%d %H:%M')}, width {a.width} px, load {load[0]:.2f}"
             f" on {os.cpu_count()} cores)", "", head, "|" + "---|" * 10]
    for r in rows:
        lines.append(f"| {r['view']} | {r['items']} | {r['edges']} | {r['crossings']} | {r['through']} | {r['cut']} "
                     f"| {r['aspect']} | {r['overlaps']} | {r['size']} | {r['layout_s']} |")
    text = "\n".join(lines)
    print(text)
    out = ROOT / "benchmarks" / "results" / "layout_quality.md"
    with out.open("a", encoding="utf-8") as f:
        f.write(text + "\n\n")
    if a.json:
        Path(a.json).write_text(json.dumps(dict(width=a.width, load=load, views=rows), indent=1))


if __name__ == "__main__":
    main()
