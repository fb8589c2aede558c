"""The graph panes (one class, used twice: before and after the selected step) and the view bar above them."""

from __future__ import annotations

from typing import Callable

from .base import Panel, sync_figure


class GraphPane(Panel):
    """One plotly graph of the selected step's pair, ``role`` "before" or "after".

    Draws ``state.pair.<role>`` at ``state.pane_width``; a click on a node calls ``on_click(item)``
    (set by :func:`workbench.ui.link.link_panes`). The box keeps the CSS class ``wb-graph-<role>``.
    """

    def __init__(self, state, controller, role: str):
        super().__init__(state, controller)
        import ipywidgets as W
        import plotly.graph_objects as go

        self.role = role
        self.on_click: Callable[[str], None] | None = None
        self._hooked = None
        pw = state.pane_width
        # Explicit widths from one value: a FigureWidget does not follow its flex box.
        self.fig = go.FigureWidget(layout=dict(height=360, width=pw, autosize=False, title=dict(text=role)))
        self.widget = W.Box([self.fig], layout=W.Layout(width=f"{pw + 4}px", overflow="hidden", flex="0 0 auto"))
        self.widget.add_class(f"wb-graph-{role}")
        self.watch("pair", self.draw)
        self.watch("pane_width", self.resize)
        self.draw()

    def draw(self) -> None:
        from ...viz.graph import update_graph_figure

        p = self.state.pair
        if p is None:
            return
        v = getattr(p, self.role)
        update_graph_figure(self.fig, v.layout, highlight=v.highlight, selected=v.selected, latency=v.latency,
                            width=self.state.pane_width, height=p.height, yrange=p.yrange, title=v.title)
        sync_figure(self.fig)
        self._hook()

    def _hook(self) -> None:
        # New traces need the click handler again.
        if len(self.fig.data) < 2 or self._hooked is self.fig.data[1]:
            return
        self.fig.data[1].on_click(lambda trace, points, state: self._clicked(points))
        self._hooked = self.fig.data[1]

    def _clicked(self, points) -> None:
        p = self.state.pair
        if not points.point_inds or p is None or self.on_click is None:
            return
        self.on_click(getattr(p, self.role).layout.ids[points.point_inds[0]])

    def resize(self) -> None:
        w = self.state.pane_width
        self.widget.layout.width = f"{w + 4}px"
        if self.state.pair is not None:
            self.draw()
        else:
            self.fig.layout.width = w
            sync_figure(self.fig)


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
        self.w_expand = W.Checkbox(value=s.expand_all, description="expand all layers", indent=False,
                                   layout=L(width="150px"))
        self.w_overlay = W.Checkbox(value=s.overlay, description="latency overlay", indent=False,
                                    layout=L(width="140px"))
        self.w_constants = W.Checkbox(value=s.constants, description="show constants", indent=False,
                                      layout=L(width="130px"),
                                      tooltip="draw Constant nodes and Identity nodes of weights too (hidden by "
                                              "default: they only hold values, and crowd the view)")
        for w, key in ((self.w_view, "view"), (self.w_layer, "layer"), (self.w_expand, "expand_all"),
                       (self.w_overlay, "overlay"), (self.w_constants, "constants")):
            w.observe(lambda ch, key=key: None if self._quiet else self.controller.set_view(**{key: ch["new"]}),
                      "value")
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
