"""How readable the graph views are, measured on the picture a user gets (the scene the app draws).

Usage: python benchmarks/layout_quality.py [--width 520] [--json OUT] [--no-anchors]

For each view, laid out with :func:`workbench.graph.layout.layout_graph` and turned into the app's scene
(:func:`workbench.viz.graph.graph_scene`) at the app's default pane width (520 px), and the same items (the
same label-sized boxes, the same edges) laid out by the anchors, ELK layered (elkjs 0.12.1: DOWN, defaults,
orthogonal edges) and dagre (@dagrejs/dagre 3.1.3 with Netron's options: nodesep 20, ranksep 20, top to
bottom), drawn at their own full size (an opened group is a compound node for ELK, a flat set for dagre),
in pixels:

- ``crossings``: pairs of edge segments (of different edges) that cross;
- ``through``: edges whose drawn polyline passes through the box of a node that is not one of its ends
  (a node's box: its symbol and the label drawn beside it);
- ``cut``: items whose drawn label is shorter than their full label (op type, marker or group name);
- ``aspect``: the picture's height over its width;
- ``overlaps``: pairs of node boxes that overlap;
- ``outside``: items whose box reaches past the figure;
- ``area``: the picture's width x height at full size (before it is fitted into the pane);
- ``layout_s``: seconds the layout took (ours: :func:`layout_graph`, median of 3; the anchors: the call in node).

The anchors run with node (when ``node`` and ``npm`` are on the path; a line says they were skipped
otherwise): the npm packages are installed once into ``benchmarks/.layout-anchors/`` (git-ignored) by
``npm install --prefix benchmarks/.layout-anchors elkjs@0.12.1 @dagrejs/dagre@3.1.3``.

The figures are computed by :mod:`workbench.viz.legibility` from the scene's coordinates. Ours takes the
exact order from HiGHS where ``highspy`` (a dependency) is installed, else the heuristic's.

The views: bert-tiny's layer 0 as exported (the report's first picture); bert-base (random weights, TorchScript
export) layer 0 in the snapshot just before the ORT chain's
``attention`` step; the workshop's tiny ModernBERT (dynamo export) layer 1, the layer with the local window;
bert-base's whole-model view with its groups as boxes (the app's default: every group collapsed) and with
layer 0 opened inside its box.

Results of each run go to benchmarks/results/layout_quality.md (and --json).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import shutil
import subprocess
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


def tiny_table():
    """bert-tiny as exported (TorchScript): the report's first layer picture."""
    import onnx

    from workbench.export import export
    from workbench.graph.nodes import node_table, without_constants

    return without_constants(node_table(onnx.load(str(export("bert-tiny").path))))


ANCHORS = ROOT / "benchmarks" / ".layout-anchors"
#: The anchors' npm packages, pinned (the versions the tests' hard-coded ELK figures came from).
PACKAGES = ("elkjs@0.12.1", "@dagrejs/dagre@3.1.3")
RUNNER = r"""
const fs = require("fs");
const req = JSON.parse(fs.readFileSync(0, "utf8"));
const boxOf = (g) => g.nodes.map((n, k) => ({ id: "n" + k, width: n.w, height: n.h }));
async function elk(g) {
  const ELK = require("elkjs/lib/elk.bundled.js");
  // An opened group is a compound node holding its members, laid out with the rest (coordinates absolute).
  const top = [], groups = {};
  boxOf(g).forEach((n, k) => {
    const name = (g.groups || [])[k];
    if (name == null) return top.push(n);
    if (!groups[name]) top.push(groups[name] = { id: "g" + Object.keys(groups).length, children: [] });
    groups[name].children.push(n);
  });
  const graph = { id: "root", layoutOptions: { "elk.algorithm": "layered", "elk.direction": "DOWN",
      "elk.hierarchyHandling": "INCLUDE_CHILDREN", "elk.json.edgeCoords": "ROOT", "elk.json.shapeCoords": "ROOT" },
    children: top, edges: g.edges.map(([u, v], j) => ({ id: "e" + j, sources: ["n" + u], targets: ["n" + v] })) };
  const t0 = performance.now();
  const out = await new ELK().layout(graph);
  const ms = performance.now() - t0, pos = {};
  const walk = (cs) => { for (const c of cs || []) { pos[c.id] = [c.x, c.y]; walk(c.children); } };
  walk(out.children);
  const routes = out.edges.map((e) => {
    const s = e.sections[0];
    return [s.startPoint, ...(s.bendPoints || []), s.endPoint].flatMap((p) => [p.x, p.y]);
  });
  return { boxes: g.nodes.map((_, k) => pos["n" + k]), routes, ms };
}
function dagre(g) {
  const d = require("@dagrejs/dagre");
  const G = new d.graphlib.Graph({ multigraph: true });
  G.setGraph({ rankdir: "TB", nodesep: 20, ranksep: 20 });
  G.setDefaultEdgeLabel(() => ({}));
  g.nodes.forEach((n, k) => G.setNode("n" + k, { width: n.w, height: n.h }));
  g.edges.forEach(([u, v], j) => G.setEdge("n" + u, "n" + v, {}, "e" + j));
  const t0 = performance.now();
  d.layout(G);
  const ms = performance.now() - t0;
  const boxes = g.nodes.map((n, k) => { const p = G.node("n" + k); return [p.x - n.w / 2, p.y - n.h / 2]; });
  const routes = g.edges.map(([u, v], j) => G.edge({ v: "n" + u, w: "n" + v, name: "e" + j }).points.flatMap((p) => [p.x, p.y]));
  return { boxes, routes, ms };
}
(async () => {
  const res = [];
  for (const g of req.graphs) res.push(req.engine === "elk" ? await elk(g) : dagre(g));
  process.stdout.write(JSON.stringify(res));
})();
"""


def anchors_ready() -> str:
    """"" when node can run the anchors (installing the npm packages once), else why not, in one line."""
    if not shutil.which("node") or not shutil.which("npm"):
        return "ELK and dagre skipped: node and npm are not on the path"
    if not (ANCHORS / "node_modules" / "elkjs").exists() or not (ANCHORS / "node_modules" / "@dagrejs").exists():
        ANCHORS.mkdir(parents=True, exist_ok=True)
        r = subprocess.run(["npm", "install", "--silent", "--no-audit", "--no-fund", "--prefix", str(ANCHORS),
                            *PACKAGES], capture_output=True, text=True)
        if r.returncode:
            return f"ELK and dagre skipped: npm install failed ({r.stderr.strip().splitlines()[-1:]})"
    (ANCHORS / "anchors.cjs").write_text(RUNNER, encoding="utf-8")
    return ""


def anchor_layouts(layouts: list, engine: str, groups: list | None = None) -> list:
    """``layouts`` laid out again by ``engine`` ("elk" or "dagre") on the same boxes and edges, as Layouts
    (each item's anchor where ours would be in its box), with the seconds each call took. ``groups``: per
    layout, each item's opened group (or None), which ELK lays out as a compound node holding its members."""
    from workbench.graph.layout import item_size

    graphs, sizes = [], []
    for j, lay in enumerate(layouts):
        sz = [item_size(k, label) for k, label in zip(lay.kinds, lay.labels)]
        sizes.append(sz)
        graphs.append(dict(nodes=[dict(w=s.left + s.right, h=s.half + s.down) for s in sz], edges=lay.edges,
                           groups=(groups or [None] * len(layouts))[j]))
    r = subprocess.run(["node", str(ANCHORS / "anchors.cjs")], input=json.dumps(dict(engine=engine, graphs=graphs)),
                       capture_output=True, text=True, check=True)
    out = []
    for lay, sz, got in zip(layouts, sizes, json.loads(r.stdout)):
        a = copy.copy(lay)
        a.x = [b[0] + s.left for b, s in zip(got["boxes"], sz)]
        a.y = [b[1] + s.half for b, s in zip(got["boxes"], sz)]
        a.routes, a.boxes = got["routes"], []
        a.bounds = (min(x - s.left for x, s in zip(a.x, sz)), min(y - s.half for y, s in zip(a.y, sz)),
                    max(x + s.right for x, s in zip(a.x, sz)), max(y + s.down for y, s in zip(a.y, sz)))
        out.append((a, got["ms"] / 1000))
    return out


def figures(who: str, name: str, lay, width: int | None, layout_s: float) -> dict:
    """The legibility figures of ``lay`` drawn ``width`` px wide (None: at its own full size)."""
    from workbench.viz.graph import graph_scene
    from workbench.viz.legibility import legibility

    x0, y0, x1, y1 = lay.bounds
    full = width is None
    sc = graph_scene(lay, width=int(x1 - x0 + 30) if full else width, height=int(y1 - y0 + 56) if full else None)
    q = legibility(lay, sc)
    return dict(view=name, layout=who, items=len(lay), edges=len(lay.edges), crossings=q.crossings,
                through=q.through, cut=q.cut, outside=q.outside, aspect=round(q.aspect, 2), overlaps=q.overlaps,
                size=f"{sc['width']}x{sc['height']}", area=f"{x1 - x0:.0f}x{y1 - y0:.0f}",
                layout_s=round(layout_s, 3))


def measure(name: str, make, width: int) -> tuple[dict, object]:
    times, lay = [], None
    for _ in range(3):
        t0 = time.perf_counter()
        lay = make()
        times.append(time.perf_counter() - t0)
    return figures("ours", name, lay, width, sorted(times)[1]), lay


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--width", type=int, default=APP_WIDTH)
    ap.add_argument("--json", default=None)
    ap.add_argument("--label", default="", help="a name for this run in the results file (e.g. before, after)")
    ap.add_argument("--no-anchors", action="store_true", help="measure our layout only")
    a = ap.parse_args()
    os.environ.setdefault("WORKBENCH_CACHE", str(Path(tempfile.gettempdir()) / "wb-layout-quality"))
    from workbench.graph.groups import view_groups
    from workbench.graph.layout import layout_graph

    tiny = tiny_table()
    before_attention, export_tab = bert_base_tables()
    mb = modernbert_table()
    views = [
        ("bert-tiny layer 0, exported", lambda: layout_graph(tiny, layer=0)),
        ("bert-base layer 0, before attention", lambda: layout_graph(before_attention, layer=0)),
        ("tiny ModernBERT layer 1 (local window)", lambda: layout_graph(mb, layer=1)),
        ("bert-base whole model (groups)", lambda: layout_graph(export_tab)),
        ("bert-base whole model, layer 0 open", lambda: layout_graph(
            export_tab, collapsed=set(view_groups(export_tab).values()) - {"layer 0"})),
    ]
    measured = [measure(name, make, a.width) for name, make in views]
    rows = [r for r, _ in measured]
    why = "ELK and dagre skipped (--no-anchors)" if a.no_anchors else anchors_ready()
    if not why:
        vg = view_groups(export_tab)
        opened = [[vg.get(i) if vg.get(i) in {b.group for b in lay.boxes} else None for i in lay.ids]
                  for _, lay in measured]
        for engine in ("elk", "dagre"):
            laid = anchor_layouts([lay for _, lay in measured], engine, opened)
            for (name, _), (lay, secs) in zip(views, laid):
                rows.append(figures(engine, name, lay, None, secs))
    rows.sort(key=lambda r: [v for v, _ in views].index(r["view"]))
    load = os.getloadavg()
    cols = ("layout", "items", "edges", "crossings", "through", "cut", "outside", "aspect", "overlaps", "area", "size",
            "layout_s")
    lines = [f"## {a.label or 'run'} ({time.strftime('%Y-%m-%d %H:%M')}, width {a.width} px, load {load[0]:.2f}"
             f" on {os.cpu_count()} cores)", "",
             "| view | " + " | ".join(cols) + " |", "|" + "---|" * (len(cols) + 1)]
    lines += [f"| {r['view']} | " + " | ".join(str(r[c]) for c in cols) + " |" for r in rows]
    if why:
        lines += ["", why]
    text = "\n".join(lines)
    print(text)
    out = ROOT / "benchmarks" / "results" / "layout_quality.md"
    with out.open("a", encoding="utf-8") as f:
        f.write(text + "\n\n")
    if a.json:
        Path(a.json).write_text(json.dumps(dict(width=a.width, load=load, views=rows), indent=1))


if __name__ == "__main__":
    main()
