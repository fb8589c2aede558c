"""The report panel: save everything on screen as one self-contained HTML file."""

from __future__ import annotations

from ..panel import Panel, esc


class ReportPanel(Panel):
    """"Save report" button and where the last report went."""

    def __init__(self, state, controller):
        super().__init__(state, controller)
        import ipywidgets as W

        self.button = W.Button(description="Save report", icon="save", layout=W.Layout(width="120px"),
                               tooltip="write the model, every fusion step, the latency results and the answers "
                                       "checked so far to one HTML file in the notebook's folder")
        self.button.on_click(lambda _: self.act(self.controller.report.save_report))
        self.where = W.HTML()
        self.widget = W.HBox([self.button, self.where], layout=W.Layout(align_items="center"))
        self.watch("report_path", lambda: setattr(self.where, "value",
                                                  f"<span style='font-size:11px'>saved: {esc(self.state.report_path)}"
                                                  "</span>"))


__all__ = ["ReportPanel"]
