"""The graph panes' script (workbench/viz/static/graph.js) in a real Chromium, on a real scene.

The widget's browser model is stood in for by a small Backbone-like object (get / set / on / off /
send), so the script's own behaviour is what is tested: drawing, rings, the order in which one
state message's change events arrive, clicks and zoom.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from browser.test_lab import ARGS, CHROMIUM

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"Chromium is not installed at {CHROMIUM}"),
]

SCRIPT = Path(__file__).resolve().parents[2] / "workbench" / "viz" / "static" / "graph.js"

#: A stand-in for the widget's browser model: state, change events in the order given, sent messages.
HARNESS = """
window.makeModel = (state) => {
  const handlers = {};
  const m = {
    state, sent: [],
    get: (k) => m.state[k],
    on: (ev, fn) => (handlers[ev] = handlers[ev] || []).push(fn),
    off: (ev, fn) => { handlers[ev] = (handlers[ev] || []).filter((f) => f !== fn); },
    send: (msg) => m.sent.push(msg),
    // One state message: every key set first, then one change event per key, in the given order.
    apply: (changes) => {
      for (const [k, v] of changes) m.state[k] = v;
      for (const [k] of changes) for (const fn of handlers["change:" + k] || []) fn();
    },
  };
  return m;
};
"""


@pytest.fixture(scope="module")
def page():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            pg = browser.new_page(viewport={"width": 900, "height": 700})
            errors: list[str] = []
            pg.on("pageerror", lambda e: errors.append(str(e)))
            pg.set_content("<html><body><div id='host'></div></body></html>")
            pg.add_script_tag(content=HARNESS)
            pg.add_style_tag(content=(SCRIPT.parent / "graph.css").read_text())  # what anywidget adds with _css
            pg.evaluate("""async (src) => {
                const url = URL.createObjectURL(new Blob([src], {type: 'text/javascript'}));
                window.graph = (await import(url)).default; }""", SCRIPT.read_text())
            pg.errors = errors
            yield pg
        finally:
            browser.close()


@pytest.fixture(scope="module")
def scenes(tiny_export):
    import onnx

    from workbench.graph.layout import layout_graph
    from workbench.graph.nodes import node_table
    from workbench.viz.graph import graph_scene

    table = node_table(onnx.load(str(tiny_export().path), load_external_data=False))
    one, two = layout_graph(table, layer=0), layout_graph(table, layer=1)
    ring = [i for i, k in zip(one.ids, one.kinds) if k == "node"][:3]
    return graph_scene(one, highlight=ring, width=500, title="layer 0"), graph_scene(two, width=500, title="layer 1")


def _mount(page, state: dict) -> None:
    page.evaluate("""(state) => {
        const host = document.getElementById('host');
        if (window.cleanup) window.cleanup();
        host.innerHTML = '';
        const el = document.createElement('div');
        host.append(el);
        window.model = window.makeModel(state);
        window.cleanup = window.graph.render({ model: window.model, el });
    }""", state)


def _split(scene: dict) -> tuple[dict, list, list]:
    s = dict(scene)
    return s, s.pop("highlight"), s.pop("selected")


def test_draws_every_node_label_and_ring_of_a_scene(page, scenes):
    sc, hl, sel = _split(scenes[0])
    _mount(page, {"scene": sc, "highlight": hl, "selected": sel})
    assert page.locator("#host .wb-gw-node").count() == len(sc["nodes"]["id"])
    assert page.locator("#host .wb-gw-highlight").count() == len(hl) == 3
    assert page.locator("#host .wb-gw-title").text_content() == "layer 0"
    drawn = page.locator("#host .wb-gw-label").all_text_contents()
    assert sorted(drawn) == sorted(t for t in sc["nodes"]["label"] if t)
    svg = page.locator("#host svg.wb-gw-svg").first.bounding_box()
    assert svg["width"] == 500 and svg["height"] == sc["height"]
    assert page.errors == []


def test_a_first_scene_arriving_after_its_rings_in_one_message_is_drawn(page, scenes):
    """The app shown before its graph exists; then one message brings scene and rings, rings first
    (the order the change events came in JupyterLab, which once left the pane empty)."""
    _mount(page, {"scene": {}, "highlight": [], "selected": []})
    assert page.locator("#host .wb-gw-node").count() == 0
    sc, hl, sel = _split(scenes[0])
    page.evaluate("(c) => window.model.apply(c)", [["highlight", hl], ["selected", sel], ["scene", sc]])
    assert page.locator("#host .wb-gw-node").count() == len(sc["nodes"]["id"])
    assert page.locator("#host .wb-gw-highlight").count() == 3
    # the next view, again rings first: drawn at its own whole view
    sc2, hl2, sel2 = _split(scenes[1])
    page.evaluate("(c) => window.model.apply(c)", [["highlight", hl2], ["scene", sc2]])
    assert page.locator("#host .wb-gw-title").text_content() == "layer 1"
    assert page.locator("#host .wb-gw-highlight").count() == 0
    assert page.errors == []


def test_click_sends_the_node_and_zoom_moves_nodes_apart(page, scenes):
    sc, hl, sel = _split(scenes[0])
    _mount(page, {"scene": sc, "highlight": hl, "selected": sel})
    node = page.locator("#host .wb-gw-node").nth(4)
    node.click()
    sent = page.evaluate("() => window.model.sent")
    assert sent == [{"type": "click", "index": 4, "id": sc["nodes"]["id"][4]}]
    node.hover()
    assert page.locator("#host .wb-gw-tip").is_visible()
    spread = lambda: page.evaluate("""() => { const ys = [...document.querySelectorAll('#host .wb-gw-node')]
        .map(e => e.getBoundingClientRect().y); return Math.max(...ys) - Math.min(...ys); }""")
    home = spread()
    page.locator("#host .wb-gw-tools button").first.click()
    page.wait_for_timeout(100)
    assert spread() > 1.3 * home
    page.locator("#host .wb-gw-canvas").dblclick(position={"x": 5, "y": 5})
    page.wait_for_timeout(100)
    assert abs(spread() - home) < 1
    # a drag pans, and is not a click
    box = page.locator("#host .wb-gw-canvas").bounding_box()
    page.mouse.move(box["x"] + 50, box["y"] + 200)
    page.mouse.down()
    page.mouse.move(box["x"] + 150, box["y"] + 260, steps=5)
    page.mouse.up()
    page.wait_for_timeout(100)
    assert len(page.evaluate("() => window.model.sent")) == 1
    assert page.errors == []


def test_edges_are_drawn_along_their_bends_and_labels_in_full(page, scenes):
    """Long edges bend around the nodes they pass (the scene's routes); every label is the full op name."""
    sc, hl, sel = _split(scenes[0])
    _mount(page, {"scene": sc, "highlight": hl, "selected": sel})
    d = page.locator("#host .wb-gw-edges").get_attribute("d")
    assert d.count("M") == len(sc["edges"]) // 2
    assert d.count("L") == sum(len(r) // 2 + 1 for r in sc["routes"])  # every bend point, then the target
    assert any(len(r) > 4 for r in sc["routes"])  # some edge skips a rank
    drawn = page.locator("#host .wb-gw-label").all_text_contents()
    assert sorted(drawn) == sorted(sc["nodes"]["label"]) and "" not in drawn
    assert page.errors == []


def test_one_state_message_draws_the_picture_once_before_the_next_frame(page, scenes):
    """A toggle's message brings scene and rings together: the pane is drawn once for it, within the
    message's own task (so the next frame painted shows it), not once per changed key."""
    sc, hl, sel = _split(scenes[0])
    _mount(page, {"scene": sc, "highlight": hl, "selected": sel})
    sc2, hl2, sel2 = _split(scenes[1])
    drawn = page.evaluate("""(c) => new Promise((done) => {
        const canvas = document.querySelector('#host .wb-gw-canvas');
        let svgs = 0;
        const obs = new MutationObserver((recs) => {
            for (const r of recs) for (const n of r.addedNodes) if (n.nodeName === 'svg') svgs++; });
        obs.observe(canvas, { childList: true });
        window.model.apply(c);
        // before any frame: a task queued now runs after the message's task and its microtasks
        setTimeout(() => { obs.disconnect();
            done({ svgs, title: canvas.querySelector('.wb-gw-title').textContent,
                   rings: canvas.querySelectorAll('.wb-gw-selected').length }); }, 0);
    })""", [["highlight", hl2], ["selected", [0]], ["scene", {**sc2, "title": "again"}]])
    assert drawn == {"svgs": 1, "title": "again", "rings": 1}
    assert page.errors == []


def test_labels_are_9px_and_a_provider_overlay_outlines_nodes(page, tiny_export):
    """At the app's pane width every node label is drawn at 9 px; a provider mapping outlines each node in its
    provider's colour and names the providers in a legend line, moving no label."""
    import onnx

    from workbench.graph.layout import layout_graph
    from workbench.graph.nodes import node_table, without_constants
    from workbench.viz.graph import graph_scene

    lay = layout_graph(without_constants(node_table(onnx.load(str(tiny_export().path)))), layer=0)
    nodes = [i for i, k in zip(lay.ids, lay.kinds) if k == "node"]
    providers = {i: ("OpenVINO" if j % 2 else "CPU") for j, i in enumerate(nodes)}
    sc, hl, sel = _split(graph_scene(lay, width=520, providers=providers))
    _mount(page, {"scene": sc, "highlight": hl, "selected": sel})
    sizes = page.evaluate("""() => [...document.querySelectorAll('#host .wb-gw-label')].map(
        (t) => t.getBoundingClientRect().height > 0 && parseFloat(getComputedStyle(t).fontSize))""")
    assert sizes and min(sizes) >= 9
    assert page.locator("#host .wb-gw-legend-label").all_text_contents() == ["CPU", "OpenVINO"]
    colours = dict(sc["legend"])
    k = lay.ids.index(nodes[1])
    stroke = page.locator(f"#host .wb-gw-node[data-i='{k}']").evaluate("(e) => getComputedStyle(e).stroke")
    r, g, b = (int(colours["OpenVINO"][i:i + 2], 16) for i in (1, 3, 5))
    assert stroke == f"rgb({r}, {g}, {b})"
    drawn = page.locator("#host .wb-gw-label").all_text_contents()
    assert sorted(drawn) == sorted(t for t in sc["nodes"]["label"] if t)  # the overlay moved no label
    assert page.errors == []
