"""The graph panes' widget: draws a scene from :func:`workbench.viz.graph.graph_scene` as one SVG.

Why not plotly's FigureWidget here: in the browser every FigureWidget loads plotly's 4 MB widget
script anew; with two graph panes that was most of the app's first-graph time (a cell with one
empty FigureWidget took 13 s to draw in headless Chromium on 2 cores) and a toggle's redraw took
0.5-1 s (traces deleted, added and relaid out per pane). This widget's script is a few kB: it maps the
scene's coordinates to pixels, pans (drag), zooms (wheel; double-click resets), shows a node's
hover and sends clicks back. What to draw (labels that fit, colours, rings) is computed in Python.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import anywidget
import traitlets

_STATIC = Path(__file__).with_name("static")


class GraphWidget(anywidget.AnyWidget):
    """One graph pane's picture.

    ``scene`` is a :func:`~workbench.viz.graph.graph_scene` without its rings; ``highlight`` and
    ``selected`` are the ringed item indices, apart so a click moves rings without resending the graph.
    """

    _esm = (_STATIC / "graph.js").read_text(encoding="utf-8")
    _css = (_STATIC / "graph.css").read_text(encoding="utf-8")
    scene = traitlets.Dict().tag(sync=True)
    highlight = traitlets.List(traitlets.Int()).tag(sync=True)
    selected = traitlets.List(traitlets.Int()).tag(sync=True)

    def __init__(self, **kw):
        super().__init__(**kw)
        self._click_handlers: list[Callable[[str], None]] = []
        self.on_msg(self._on_msg)

    def show(self, scene: dict) -> bool:
        """Draw ``scene``; only the rings are sent when the rest is what is drawn already.

        Returns:
            True when the picture itself changed (not only its rings).
        """
        scene = dict(scene)
        highlight, selected = scene.pop("highlight", []), scene.pop("selected", [])
        changed = scene != self.scene
        with self.hold_sync():
            if changed:
                self.scene = scene
            self.highlight = list(highlight)
            self.selected = list(selected)
        return changed

    def on_click(self, fn: Callable[[str], None]) -> None:
        """Call ``fn(item_id)`` when a node is clicked in the browser."""
        self._click_handlers.append(fn)

    def click(self, item: str) -> None:
        """Act as if ``item`` was clicked (what the browser's click does; tests use it)."""
        for fn in list(self._click_handlers):
            fn(item)

    def _on_msg(self, _widget, content, _buffers) -> None:
        if not isinstance(content, dict) or content.get("type") != "click":
            return
        ids = (self.scene.get("nodes") or {}).get("id") or []
        k = content.get("index")
        if isinstance(k, int) and 0 <= k < len(ids) and ids[k] == content.get("id"):
            self.click(ids[k])

    # What tests and notebooks read.
    @property
    def ids(self) -> list[str]:
        return list((self.scene.get("nodes") or {}).get("id") or [])

    @property
    def labels(self) -> list[str]:
        return list((self.scene.get("nodes") or {}).get("label") or [])

    @property
    def title(self) -> str:
        return str(self.scene.get("title", ""))


__all__ = ["GraphWidget"]
