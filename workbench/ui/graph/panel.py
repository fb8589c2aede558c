"""The graph panes (one class, used twice: before and after the selected step) and the view bar above them."""

from __future__ import annotations

from typing import Callable

from ...viz.graph import graph_scene
from ..panel import Panel


class GraphPane(Panel):
    """One graph of the selected step's pair, ``role`` "before" or "after".

    Draws ``state.pair.<role>`` at ``state.pane_width`` with the app's own
    :class:`~workbench.viz.graph_widget.GraphWidget` (a few kB of script, where a plotly FigureWidget
    loads 4 MB per figure in the browser); a click on a node calls ``on_click(item)`` (set by
    :func:`workbench.ui.link.link_panes`). The box keeps the CSS class ``wb-graph-<role>``.
    """

    def __init__(self, state, controller, role: str):
        super().__init__(state, controller)
        import ipywidgets as W

        from ...viz.graph_widget import GraphWidget  # lazy: anywidget loads once compat has checked the front end

        self.role = role
        self.on_click: Callable[[str], None] | None = None
        pw = state.pane_width
        self.graph = GraphWidget()
        self.graph.on_click(self._clicked)
        self.widget = W.Box([self.graph], layout=W.Layout(width=f"{pw + 4}px", overflow="hidden", flex="0 0 auto"))
        self.widget.add_class(f"wb-graph-{role}")
        self.watch("pair", self.draw)
        self.watch("pane_width", self.resize)
        self.draw()

    def draw(self) -> None:
        p = self.state.pair
        if p is None:
            return
        v = getattr(p, self.role)
        self.graph.show(graph_scene(v.layout, highlight=v.highlight, selected=v.selected, latency=v.latency,
                                    width=self.state.pane_width, height=p.height, yrange=p.yrange, title=v.title,
                                    providers=v.providers))

    def _clicked(self, item: str) -> None:
        if self.state.pair is not None and self.on_click is not None:
            self.act(self.on_click, item)

    def resize(self) -> None:
        self.widget.layout.width = f"{self.state.pane_width + 4}px"
        self.draw()


class ViewBar(Panel):
    """What the panes show: one layer or the whole model, which layer, constants, latency overlay."""

    def __init__(self, state, controller):
        super().__init__(state, controller)
        import ipywidgets as W

        L, s = W.Layout, state
        self._quiet: list = []
        self.w_view = W.ToggleButtons(options=[("one layer", "layer"), ("whole model", "model")], value=s.view,
                                      style={"button_width": "110px"})
        self.w_layer = W.BoundedIntText(value=s.layer, min=0, max=max(0, s.layer_max), description="layer",
                                        layout=L(width="140px"))
        self.w_expand = W.Checkbox(value=s.expand_all, description="expand all groups", indent=False,
                                   layout=L(width="150px"),
                                   tooltip="open every box of the whole-model view (embeddings, mask, layers, head)")
        self.w_overlay = W.Checkbox(value=s.overlay, description="latency overlay", indent=False,
                                    layout=L(width="140px"))
        self.w_constants = W.Checkbox(value=s.constants, description="show constants", indent=False,
                                      layout=L(width="130px"),
                                      tooltip="draw Constant nodes and Identity nodes of weights too (hidden by "
                                              "default: they only hold values, and crowd the view)")
        for w, key in ((self.w_view, "view"), (self.w_layer, "layer"), (self.w_expand, "expand_all"),
                       (self.w_overlay, "overlay"), (self.w_constants, "constants")):
            w.observe(lambda ch, key=key: None if self._quiet else self.act(self.controller.set_view,
                                                                            **{key: ch["new"]}), "value")
        self.widget = W.HBox([self.w_view, self.w_layer, self.w_expand, self.w_overlay, self.w_constants],
                             layout=L(flex_flow="row wrap"))
        self.watch(["view", "layer", "expand_all", "overlay", "constants", "layer_max"], self.draw)

    def draw(self) -> None:
        s = self.state
        self._quiet.append(True)
        try:
            self.w_layer.max = max(0, s.layer_max, s.layer)
            for w, v in ((self.w_view, s.view), (self.w_layer, s.layer), (self.w_expand, s.expand_all),
                         (self.w_overlay, s.overlay), (self.w_constants, s.constants)):
                if w.value != v:
                    w.value = v
            self.w_layer.disabled = s.view != "layer"
        finally:
            self._quiet.pop()


__all__ = ["GraphPane", "ViewBar"]
