"""Time the graph views on bert-base: node table, layout, figure, and the draw in Chromium.

Usage: python benchmarks/graph_render.py [MODEL] [--no-browser]

Prints, for the unfused TorchScript export (1000+ nodes) and its fused form:
node table, layout and figure build times in Python, and the time plotly.js
takes to draw the figure in headless Chromium (Plotly.newPlot to the first
'plotly_afterplot'), for the whole model expanded, the whole model with
layers collapsed, and one encoder layer.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--no-first-run"]


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def browser_draw_ms(page, fig, repeats: int = 3) -> float:
    """Median ms from Plotly.newPlot to the plot drawn, in the page."""
    spec = fig.to_plotly_json()
    times = []
    for _ in range(repeats):
        ms = page.evaluate(
            """async (spec) => {
                const div = document.getElementById('g'); Plotly.purge(div);
                const t0 = performance.now();
                await Plotly.newPlot(div, spec.data, spec.layout);
                await new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
                return performance.now() - t0; }""", json.loads(json.dumps(spec, default=str)))
        times.append(ms)
    return sorted(times)[len(times) // 2]


def main(argv: list[str]) -> None:
    import onnx
    import plotly.offline

    from workbench.config import FusionPlan
    from workbench.export import export
    from workbench.fusion import Timeline
    from workbench.graph.layout import layout_graph
    from workbench.graph.nodes import node_table
    from workbench.models import resolve
    from workbench.viz.graph import graph_figure

    name = next((a for a in argv if not a.startswith("-")), "bert-base")
    use_browser = "--no-browser" not in argv and Path(CHROMIUM).exists()
    src = resolve(name)
    res = export(src)
    model = onnx.load(str(res.path), load_external_data=False)
    tl = Timeline(res.path, FusionPlan(engine="ort"), num_heads=src.num_heads, hidden_size=src.hidden_size,
                  num_layers=src.num_layers)
    fused = tl.run()[-1]
    cases = []
    for label, proto in (("unfused", model), ("fused", fused.skeleton)):
        tab, t_tab = timed(lambda: node_table(proto))
        for view, kw in (("whole model, expanded", dict(collapsed=set())), ("whole model, layers collapsed", {}),
                         ("one encoder layer", dict(layer=0))):
            lay, t_lay = timed(lambda: layout_graph(tab, **kw))
            fig, t_fig = timed(lambda: graph_figure(lay))
            cases.append([label, view, len(lay), t_tab, t_lay, t_fig, fig])
    draws = {}
    if use_browser:
        from playwright.sync_api import sync_playwright

        with sync_playwright() as p:
            b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            page = b.new_page(viewport={"width": 1400, "height": 900})
            page.set_content(f"<html><body><div id='g' style='width:1300px'></div>"
                             f"<script>{plotly.offline.get_plotlyjs()}</script></body></html>")
            for c in cases:
                draws[(c[0], c[1])] = browser_draw_ms(page, c[6])
            b.close()
    import platform
    print(f"{src.label}, TorchScript export: {len(model.graph.node)} nodes unfused, {fused.nodes} fused; "
          f"python {platform.python_version()}, {platform.processor() or platform.machine()}")
    print(f"{'graph':8} {'view':30} {'items':>6} {'table s':>8} {'layout s':>9} {'figure s':>9} {'browser draw s':>15}")
    for label, view, n, t_tab, t_lay, t_fig, _ in cases:
        d = draws.get((label, view))
        print(f"{label:8} {view:30} {n:6d} {t_tab:8.3f} {t_lay:9.3f} {t_fig:9.3f} "
              f"{(f'{d / 1e3:.3f}' if d is not None else 'n/a'):>15}")


if __name__ == "__main__":
    main(sys.argv[1:])
