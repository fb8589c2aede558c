"""The Netron panel: a button that serves the selected snapshot in Netron, and the embedded viewer."""

from __future__ import annotations

from ..panel import Panel


class NetronPanel(Panel):
    """"Netron" button and the iframe it opens (``state.netron_html``)."""

    def __init__(self, state, controller):
        super().__init__(state, controller)
        import ipywidgets as W

        self.button = W.Button(description="Netron", icon="external-link", tooltip="open this snapshot in Netron",
                               layout=W.Layout(width="100px"))
        self.button.on_click(lambda _: self.controller.graph_tools.open_netron())
        self.out = W.HTML()
        self.out.add_class("wb-netron")
        self.widget = self.out
        self.watch("netron_html", lambda: setattr(self.out, "value", self.state.netron_html))


__all__ = ["NetronPanel"]
