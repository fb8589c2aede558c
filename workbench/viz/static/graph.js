// The graph pane's drawing: one SVG from the scene Python computed (workbench.viz.graph.graph_scene).
// Python sends positions, colours, labels and hovers; this file only maps them to pixels, draws,
// pans (drag), zooms (wheel; double-click resets), shows hovers and sends clicks back.
const NS = "http://www.w3.org/2000/svg";
const RING = { highlight: ["#d62728", 20, 2.5], selected: ["#111111", 26, 2] };

function esc(s) {
  return String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
}

// Hover texts come as plotly-style HTML (already escaped by Python): keep <b>, <i>, <br> only.
function hoverHtml(s) {
  return String(s).replace(/<(?!\/?(b|i)>|br\s*\/?>)/g, "&lt;");
}

function symbol(kind, x, y, size) {
  const r = size / 2;
  const f = (v) => v.toFixed(1);
  switch (kind) {
    case "square":
      return `<rect x="${f(x - r)}" y="${f(y - r)}" width="${f(size)}" height="${f(size)}"`;
    case "diamond":
      return `<path d="M${f(x)},${f(y - r)}L${f(x + r)},${f(y)}L${f(x)},${f(y + r)}L${f(x - r)},${f(y)}Z"`;
    case "triangle-down":
      return `<path d="M${f(x - r)},${f(y - r * 0.6)}L${f(x + r)},${f(y - r * 0.6)}L${f(x)},${f(y + r * 0.8)}Z"`;
    case "triangle-up":
      return `<path d="M${f(x - r)},${f(y + r * 0.6)}L${f(x + r)},${f(y + r * 0.6)}L${f(x)},${f(y - r * 0.8)}Z"`;
    default:
      return `<circle cx="${f(x)}" cy="${f(y)}" r="${f(r)}"`;
  }
}

function draw(el, sc, view, rings) {
  const w = sc.width, h = sc.height, m = sc.margin;
  const [x0, x1] = view.x, [y0, y1] = view.y;
  const sx = (w - m.l - m.r) / ((x1 - x0) || 1), sy = (h - m.t - m.b) / ((y1 - y0) || 1);
  const px = (x) => m.l + (x - x0) * sx, py = (y) => m.t + (y - y0) * sy;
  const n = sc.nodes, out = [];
  out.push(`<svg xmlns="${NS}" class="wb-gw-svg" width="${w}" height="${h}" viewBox="0 0 ${w} ${h}">`);
  out.push(`<rect class="wb-gw-bg" x="0" y="0" width="${w}" height="${h}" fill="white"/>`);
  out.push(`<text class="wb-gw-title" x="${(0.02 * w).toFixed(1)}" y="22">${esc(sc.title || "")}</text>`);
  let lx = 0.02 * w;
  for (const [name, colour] of sc.legend || []) {
    out.push(`<circle class="wb-gw-legend" cx="${(lx + 4).toFixed(1)}" cy="30" r="4" stroke="${colour}"/>` +
      `<text class="wb-gw-legend-label" x="${(lx + 11).toFixed(1)}" y="30" dominant-baseline="central">${esc(name)}</text>`);
    lx += 20 + 5.6 * String(name).length;
  }
  out.push(`<svg x="${m.l}" y="${m.t}" width="${w - m.l - m.r}" height="${h - m.t - m.b}" overflow="hidden">`);
  out.push(`<g transform="translate(${-m.l},${-m.t})">`);
  for (const [bx0, by0, bx1, by1, group] of sc.boxes) {
    const a = px(bx0), b = py(Math.min(by0, by1)), c = px(bx1), d = py(Math.max(by0, by1));
    out.push(`<rect class="wb-gw-box" x="${a.toFixed(1)}" y="${b.toFixed(1)}" width="${(c - a).toFixed(1)}" ` +
      `height="${(d - b).toFixed(1)}"/><text class="wb-gw-boxlabel" x="${(a + 2).toFixed(1)}" ` +
      `y="${(py(by0) - 3).toFixed(1)}">${esc(group)}</text>`);
  }
  // Each edge from its source through its bend points (around the boxes it passes) to its target.
  let d = "";
  const e = sc.edges, routes = sc.routes || [];
  for (let k = 0; k + 1 < e.length; k += 2) {
    d += `M${px(n.x[e[k]]).toFixed(1)},${py(n.y[e[k]]).toFixed(1)}`;
    const r = routes[k / 2] || [];
    for (let j = 0; j + 1 < r.length; j += 2) d += `L${px(r[j]).toFixed(1)},${py(r[j + 1]).toFixed(1)}`;
    d += `L${px(n.x[e[k + 1]]).toFixed(1)},${py(n.y[e[k + 1]]).toFixed(1)}`;
  }
  out.push(`<path class="wb-gw-edges" d="${d}"/>`);
  // A provider overlay (scene.legend and nodes.outline, when Python was given one) outlines each node.
  const outline = n.outline || [];
  for (let k = 0; k < n.x.length; k++) {
    const x = px(n.x[k]), y = py(n.y[k]);
    const stroke = outline[k] ? ` style="stroke:${outline[k]};stroke-width:2"` : "";
    out.push(`${symbol(n.symbol[k], x, y, n.size[k])} class="wb-gw-node" data-i="${k}" data-op="${esc(n.op[k])}" ` +
      `fill="${n.color[k]}"${stroke}/>`);
  }
  // A ringed node's label starts past its ring, or the ring hides its first letters.
  const ringed = {};
  for (const [name, ks] of [["highlight", rings.highlight], ["selected", rings.selected]]) {
    for (const k of ks) ringed[k] = Math.max(ringed[k] || 0, RING[name][1] / 2);
  }
  for (let k = 0; k < n.x.length; k++) {
    const t = n.label[k];
    if (!t) continue;
    const x = px(n.x[k]), y = py(n.y[k]), pos = n.labelpos[k];
    const r = pos === "r" && ringed[k] ? Math.max(n.size[k] / 2, ringed[k]) : n.size[k] / 2;
    const [tx, ty, anchor, base] = pos === "t" ? [x, y - r - 3, "middle", "auto"]
      : pos === "b" ? [x, y + r + 3, "middle", "hanging"] : [x + r + 3, y, "start", "central"];
    out.push(`<text class="wb-gw-label" x="${tx.toFixed(1)}" y="${ty.toFixed(1)}" text-anchor="${anchor}" ` +
      `dominant-baseline="${base}" pointer-events="none">${esc(t)}</text>`);
  }
  for (const [name, ks] of [["highlight", rings.highlight], ["selected", rings.selected]]) {
    const [colour, size, width] = RING[name];
    for (const k of ks) {
      if (k < 0 || k >= n.x.length) continue;
      out.push(`<circle class="wb-gw-ring wb-gw-${name}" cx="${px(n.x[k]).toFixed(1)}" ` +
        `cy="${py(n.y[k]).toFixed(1)}" r="${size / 2}" stroke="${colour}" stroke-width="${width}" fill="none" ` +
        `pointer-events="none"/>`);
    }
  }
  out.push("</g></svg></svg>");
  el.innerHTML = out.join("");
}

function render({ model, el }) {
  el.classList.add("wb-gw");
  const canvas = document.createElement("div");
  canvas.className = "wb-gw-canvas";
  const tip = document.createElement("div");
  tip.className = "wb-gw-tip";
  el.append(canvas, tip);
  let view = null, frame = 0, shown = null, drag = null, moved = false;

  const home = () => {
    const sc = model.get("scene");
    view = sc && sc.nodes ? { x: [...sc.xrange], y: [...sc.yrange] } : null;
    shown = sc;
  };
  const redraw = () => {
    frame = 0;
    const sc = model.get("scene");
    if (!sc || !sc.nodes) {
      canvas.innerHTML = "";
      return;
    }
    // A new scene starts at its whole view, whichever change event (scene or rings) arrives first.
    if (sc !== shown || !view) home();
    if (!drag) tip.style.display = "none";
    el.style.width = `${sc.width}px`;
    el.style.height = `${sc.height}px`;
    draw(canvas, sc, view, { highlight: model.get("highlight"), selected: model.get("selected") });
    el.dataset.nodes = String(sc.nodes.x.length);
  };
  const later = () => {
    if (!frame) frame = requestAnimationFrame(redraw);
  };
  // One state message fires a change event per key (scene, highlight, selected): draw once, after the
  // last of them, in the same task (before the browser paints), not once per key.
  let queued = false;
  const changed = () => {
    if (queued) return;
    queued = true;
    queueMicrotask(() => {
      queued = false;
      if (frame) cancelAnimationFrame(frame);
      redraw();
    });
  };

  redraw();
  model.on("change:scene", changed);
  model.on("change:highlight", changed);
  model.on("change:selected", changed);

  const nodeAt = (target) => {
    const node = target && target.closest ? target.closest(".wb-gw-node") : null;
    return node ? Number(node.dataset.i) : -1;
  };
  canvas.addEventListener("pointerdown", (ev) => {
    if (!view || ev.button !== 0) return;
    drag = { x: ev.clientX, y: ev.clientY, view: { x: [...view.x], y: [...view.y] } };
    moved = false;
  });
  const onMove = (ev) => {
    if (!drag) return;
    const sc = model.get("scene"), m = sc.margin;
    const dx = ev.clientX - drag.x, dy = ev.clientY - drag.y;
    if (Math.abs(dx) + Math.abs(dy) < 3 && !moved) return;
    moved = true;
    tip.style.display = "none";
    const kx = (drag.view.x[1] - drag.view.x[0]) / (sc.width - m.l - m.r);
    const ky = (drag.view.y[1] - drag.view.y[0]) / (sc.height - m.t - m.b);
    view = { x: drag.view.x.map((v) => v - dx * kx), y: drag.view.y.map((v) => v - dy * ky) };
    later();
  };
  const onUp = () => {
    drag = null;
  };
  window.addEventListener("pointermove", onMove);
  window.addEventListener("pointerup", onUp);
  canvas.addEventListener("click", (ev) => {
    if (moved) return;
    const k = nodeAt(ev.target);
    if (k >= 0) model.send({ type: "click", index: k, id: model.get("scene").nodes.id[k] });
  });
  // Zoom by factor f around the fractions (fx, fy) of the plot area.
  const zoomAt = (f, fx, fy) => {
    const zoom = (r, t) => {
      const c = r[0] + t * (r[1] - r[0]);
      return [c - (c - r[0]) * f, c + (r[1] - c) * f];
    };
    view = { x: zoom(view.x, fx), y: zoom(view.y, fy) };
    later();
  };
  // A plain wheel scrolls the notebook; Ctrl (or Cmd) + wheel, or a trackpad pinch, zooms the graph.
  canvas.addEventListener("wheel", (ev) => {
    if (!view || !(ev.ctrlKey || ev.metaKey)) return;
    ev.preventDefault();
    const sc = model.get("scene"), m = sc.margin, box = canvas.getBoundingClientRect();
    zoomAt(Math.exp(Math.max(-0.5, Math.min(0.5, ev.deltaY * 0.004))),
      (ev.clientX - box.left - m.l) / (sc.width - m.l - m.r), (ev.clientY - box.top - m.t) / (sc.height - m.t - m.b));
  }, { passive: false });
  canvas.addEventListener("dblclick", () => {
    home();
    redraw();
  });
  const tools = document.createElement("div");
  tools.className = "wb-gw-tools";
  for (const [text, title, act] of [
    ["+", "zoom in (or Ctrl + wheel)", () => zoomAt(0.7, 0.5, 0.5)],
    ["\u2212", "zoom out (or Ctrl + wheel)", () => zoomAt(1 / 0.7, 0.5, 0.5)],
    ["\u21ba", "whole view (or double-click); drag to pan", () => { home(); redraw(); }],
  ]) {
    const b = document.createElement("button");
    b.textContent = text;
    b.title = title;
    b.addEventListener("click", (ev) => {
      ev.stopPropagation();
      if (view) act();
    });
    tools.append(b);
  }
  el.append(tools);
  canvas.addEventListener("mouseover", (ev) => {
    const k = nodeAt(ev.target);
    if (k < 0 || drag) return;
    const sc = model.get("scene"), box = el.getBoundingClientRect(), r = ev.target.getBoundingClientRect();
    tip.innerHTML = hoverHtml(sc.nodes.hover[k]);
    tip.style.display = "block";
    const left = r.right - box.left + 6, top = r.top - box.top;
    tip.style.left = `${Math.max(0, Math.min(left, sc.width - tip.offsetWidth - 2))}px`;
    tip.style.top = `${Math.max(0, Math.min(top, sc.height - tip.offsetHeight - 2))}px`;
    if (left > sc.width - tip.offsetWidth - 2) {  // no room on the right: put it left of the node
      tip.style.left = `${Math.max(0, r.left - box.left - tip.offsetWidth - 6)}px`;
    }
  });
  canvas.addEventListener("mouseout", (ev) => {
    if (nodeAt(ev.target) >= 0) tip.style.display = "none";
  });
  return () => {
    window.removeEventListener("pointermove", onMove);
    window.removeEventListener("pointerup", onUp);
    model.off("change:scene", changed);
    model.off("change:highlight", changed);
    model.off("change:selected", changed);
  };
}

export default { render };
