"""The model bar: title, status line, progress, and what to load (model, exporter, opset, attention, engine)."""

from __future__ import annotations

from typing import Callable

from ..panel import Panel, esc

_COLOURS = {"info": "#333", "error": "#cf222e", "ok": "#1a7f37", "busy": "#0969da"}
_ICONS = {"info": "", "error": "✖ ", "ok": "✔ ", "busy": "⏳ "}


class ModelBar(Panel):
    """Title, status line and model bar.

    Args:
        choices: ``{"presets", "exporters", "opsets", "attentions", "engines"}`` for the menus.
        css: the app's style sheet, sent once with the title.
        on_side: what the "Side panel" button does (the app opens itself in JupyterLab's right area).
    """

    def __init__(self, state, controller, *, choices: dict, css: str = "", on_side: Callable[[], None] | None = None):
        super().__init__(state, controller)
        import ipywidgets as W

        L, s = W.Layout, state
        self._quiet: list = []
        self.title = W.HTML(css + "<div class='wb-title'>BERT Fusion Workbench</div>")
        self.status = W.HTML("<div class='wb-status'>ready</div>")
        self.status.add_class("wb-status-line")
        self.progress = W.FloatProgress(value=0, min=0, max=1, layout=L(width="200px", visibility="hidden"))
        presets = list(choices.get("presets", ()))
        self.w_source = W.Combobox(value=s.source, options=presets + ([s.source] if s.source not in presets else []),
                                   description="model", ensure_option=False, layout=L(width="260px"),
                                   tooltip="preset, model folder, hub id or .onnx file")
        self.w_exporter = W.Dropdown(options=choices["exporters"], value=s.exporter, description="exporter",
                                     layout=L(width="200px"))
        # 0 stands for the exporter's default opset (a Dropdown shows nothing for a None value).
        self.w_opset = W.Dropdown(options=[("default", 0)] + [(str(o), o) for o in choices["opsets"]],
                                  value=s.opset or 0, description="opset", layout=L(width="150px"))
        self.w_attention = W.Dropdown(options=choices["attentions"], value=s.attention, description="attention",
                                      layout=L(width="180px"))
        self.w_engine = W.Dropdown(options=choices["engines"], value=s.engine, description="engine",
                                   layout=L(width="170px"),
                                   tooltip="fusion engine: ONNX Runtime's optimizer, onnxscript's rules, or both (auto)")
        self.w_load = W.Button(description="Load", button_style="primary", icon="refresh", layout=L(width="90px"))
        self.w_load.on_click(lambda _: self._load())
        for w in (self.w_exporter, self.w_opset, self.w_attention, self.w_engine):
            w.observe(lambda _ch: None if self._quiet else self._load(), "value")
        self.w_side = W.Button(description="Side panel", icon="columns", layout=L(width="110px"),
                               tooltip="open the app in JupyterLab's right-hand area, beside the notebook")
        if on_side is not None:
            self.w_side.on_click(lambda _: on_side())
        self.w_engine_note = W.HTML()
        self.w_engine_note.add_class("wb-engine-note")
        bar = W.HBox([self.w_source, self.w_exporter, self.w_opset, self.w_attention, self.w_engine, self.w_load,
                      self.w_side, self.progress, self.w_engine_note], layout=L(flex_flow="row wrap"))
        bar.add_class("wb-model-bar")
        self.widget = W.VBox([self.title, W.HBox([self.status]), bar])
        self.watch("status", self.draw_status)
        self.watch("jobs", self.draw_progress)
        self.watch(["engine_line", "engine_note"], self.draw_engine)
        self.watch(["source", "exporter", "opset", "attention", "engine"], self.draw_settings)

    def _load(self) -> None:
        self.controller.load_model(source=self.w_source.value.strip() or self.state.source,
                                   exporter=self.w_exporter.value, opset=self.w_opset.value or None,
                                   attention=self.w_attention.value, engine=self.w_engine.value)

    def draw_status(self) -> None:
        st = self.state.status
        self.status.value = (f"<div class='wb-status' style='color:{_COLOURS.get(st.kind, '#333')}'>"
                             f"{_ICONS.get(st.kind, '')}{esc(st.text)}</div>")

    def draw_progress(self) -> None:
        # The model's own work (load, toggles) and measurements show a bar; background upkeep does not.
        shown = [j for n, j in self.state.jobs.items() if j.running and n not in ("parity", "warm")]
        if not shown:
            self.progress.layout.visibility = "hidden"
            return
        self.progress.layout.visibility = "visible"
        self.progress.value = shown[-1].progress or 0.0

    def draw_engine(self) -> None:
        self.w_engine_note.value = (f"<span title='{esc(self.state.engine_note)}'>{esc(self.state.engine_line)}"
                                    "</span>")

    def draw_settings(self) -> None:
        s = self.state
        self._quiet.append(True)
        try:
            if s.source not in self.w_source.options:
                self.w_source.options = tuple(self.w_source.options) + (s.source,)
            for w, v in ((self.w_source, s.source), (self.w_exporter, s.exporter), (self.w_opset, s.opset or 0),
                         (self.w_attention, s.attention), (self.w_engine, s.engine)):
                if w.value != v:
                    w.value = v
        finally:
            self._quiet.pop()


__all__ = ["ModelBar"]
