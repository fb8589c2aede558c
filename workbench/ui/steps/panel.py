"""The fusion steps panel: one row per step (switch, name, nodes, what it fused, parity, answers), the step
slider, the session layer, and the op counts before and after the selected step."""

from __future__ import annotations

from ..panel import Panel, badge, esc

_HELP = ("(tick to switch a step on or off; click a name to see its before and after; parity: grey not checked "
         "yet, green same outputs as the export, red different)")


def counts_table_html(before: dict[str, int], after: dict[str, int], *, top: int = 14) -> str:
    """An HTML table of op counts before and after a step, changed ops first."""
    ops = set(before) | set(after)
    changed = sorted((o for o in ops if before.get(o, 0) != after.get(o, 0)),
                     key=lambda o: (-abs(after.get(o, 0) - before.get(o, 0)), o))
    same = sorted((o for o in ops if before.get(o, 0) == after.get(o, 0)), key=lambda o: -after.get(o, 0))
    rows = []
    for o in (changed + same)[:top]:
        b, a = before.get(o, 0), after.get(o, 0)
        d = a - b
        cls = "wb-up" if d > 0 else ("wb-down" if d < 0 else "")
        rows.append(f"<tr><td>{esc(o)}</td><td>{b}</td><td>{a}</td>"
                    f"<td class='{cls}'>{'+' if d > 0 else ''}{d if d else ''}</td></tr>")
    tb, ta = sum(before.values()), sum(after.values())
    rows.append(f"<tr><th>all nodes</th><th>{tb}</th><th>{ta}</th><th>{ta - tb:+d}</th></tr>")
    return ("<div class='wb-table wb-counts'><table><tr><th>op</th><th>before</th><th>after</th><th>change</th></tr>"
            + "".join(rows) + "</table></div>")


class FusionPanel(Panel):
    """Rows of fusion steps, the step slider, the session-layer button, counts and diagnostics."""

    def __init__(self, state, controller):
        super().__init__(state, controller)
        import ipywidgets as W
        from ipywidgets.widgets.widget_bool import CheckboxStyle
        from ipywidgets.widgets.widget_string import HTMLStyle

        L = W.Layout
        self._W = W
        self._quiet: list = []
        #: name → (row, checkbox, name button, info); "__export__" → (row, info).
        self.rows: dict[str, tuple] = {}
        self.toggles: dict[str, object] = {}
        # Every row shares these layout and style models: each widget would otherwise bring two or three
        # of its own, about 150 more models for the browser to make before bert-base's first graph.
        self._shared = {"cb": L(width="20px", flex="0 0 auto"), "name": L(width="215px", flex="0 0 auto"),
                        "info": L(flex="1 1 auto"), "row": L(width="100%", flex="0 0 auto"), "cb_style": CheckboxStyle(),
                        "name_style": W.ButtonStyle(), "info_style": HTMLStyle(),
                        "head": L(flex="0 0 auto")}
        self._heads: dict[tuple, object] = {}  # the column heads and group titles, made once
        self._shape = None
        self._make_fold(W)
        self.w_rows = W.VBox([W.HTML("<div class='wb-why' style='color:#666;padding:4px'>the steps appear after "
                                     "the first run</div>")])
        self.w_rows.add_class("wb-rows")
        self.w_step = W.SelectionSlider(options=[("export", 0)], value=0, description="step",
                                        continuous_update=False, layout=L(width="98%"))
        self.w_step.add_class("wb-step-slider")
        self.w_step.observe(lambda ch: None if self._quiet else self.act(self.controller.select_step, ch["new"]), "value")
        self.w_session = W.Button(description="Session layer", icon="layer-group", layout=L(width="130px"),
                                  tooltip="what ONNX Runtime's own session-time fusion (ORT_ENABLE_ALL) adds on top "
                                          "of the selected snapshot")
        self.w_session.on_click(lambda _: self.controller.graph_tools.show_session_layer())
        self.w_session_out = W.HTML()
        self.w_warm = W.HTML()
        self.w_warm.add_class("wb-warm")
        self.w_counts = W.HTML()
        self.w_counts.add_class("wb-counts-box")
        self.w_diag = W.HTML()
        self.w_diag.add_class("wb-diagnostics")
        left = W.VBox([W.HTML(f"<div class='wb-section'>Fusion steps <span style='font-weight:normal;font-size:11px'>"
                              f"{_HELP}</span></div>"),
                       self.w_rows, self.w_na_toggle, self.w_na_box, self.w_step, W.HBox([self.w_session, self.w_warm], layout=L(align_items="center")),
                       self.w_session_out], layout=L(width="58%", min_width="360px"))
        right = W.VBox([W.HTML("<div class='wb-section'>Op counts before → after the selected step</div>"),
                        self.w_diag, self.w_counts], layout=L(width="40%", min_width="280px"))
        self.widget = W.HBox([left, right], layout=L(width="100%", flex_flow="row wrap",
                                                     justify_content="space-between"))
        self.widget.add_class("wb-fusion-panel")
        self.watch("rows", self.draw_rows)
        self.watch(["snapshots", "step", "rows"], self.draw_slider)
        self.watch("pair", self.draw_pair)
        self.watch("session_line", lambda: setattr(self.w_session_out, "value",
                                                   f"<div style='font-size:12px'>{esc(self.state.session_line)}</div>"
                                                   if self.state.session_line else ""))
        self.watch("warm", lambda: setattr(self.w_warm, "value", f"<span style='font-size:11px;color:#57606a'>"
                                                                  f"{esc(self.state.warm)}</span>"))
        self.draw_slider()  # a panel made after a load shows what is there
        self.draw_pair()
        self.draw_rows()

    def _make_fold(self, W) -> None:
        """Steps that cannot apply to this model (none of their anchors in the graph) fold under one line."""
        L = W.Layout
        self.w_na_toggle = W.Button(description="not applicable to this model", icon="caret-right",
                                    layout=L(width="auto", align_self="flex-start", flex="0 0 auto", display="none"),
                                    style=W.ButtonStyle(button_color="transparent"),
                                    tooltip="steps whose anchor ops this model's graph lacks: the engine did not "
                                            "run them; click to show them")
        self.w_na_toggle.add_class("wb-na-toggle")
        self.w_na_box = W.VBox(layout=L(display="none", flex="0 0 auto", border="1px solid #e3e3e3"))
        self.w_na_box.add_class("wb-na-rows")
        self.w_na_toggle.on_click(lambda _: self._fold(self.w_na_box.layout.display == "none"))

    # ----------------------------------------------------------------- rows
    def _row(self, r: dict):
        W, sh = self._W, self._shared
        name = r["name"]
        if name in self.rows:
            return self.rows[name]
        cb = W.Checkbox(value=bool(r["on"]), indent=False, description="", tooltip=r["tip"],
                        layout=sh["cb"], style=sh["cb_style"])
        cb.add_class("wb-step-cb")
        cb.observe(lambda ch, name=name: None if self._quiet else self.act(self.controller.toggle, name, ch["new"]),
                   "value")
        btn = W.Button(description=r["title"], tooltip=f"{r['title']}: show the graph before and after this step",
                       layout=sh["name"], style=sh["name_style"])
        btn.add_class("wb-row-name")
        btn.on_click(lambda _, name=name: self.controller.select_row(name))
        info = W.HTML(layout=sh["info"], style=sh["info_style"])
        row = W.HBox([cb, btn, info], layout=sh["row"])
        row.add_class("wb-row")
        row.add_class(f"wb-step-{name.lower().replace('_', '-')}")
        self.rows[name] = (row, cb, btn, info)
        self.toggles[name] = cb
        return self.rows[name]

    def _export_row(self):
        W, sh = self._W, self._shared
        if "__export__" not in self.rows:
            spacer = W.HTML("", layout=sh["cb"], style=sh["info_style"])
            btn = W.Button(description="export (no fusion)", tooltip="the model as exported: the reference for parity",
                           layout=sh["name"], style=sh["name_style"])
            btn.add_class("wb-row-name")
            btn.on_click(lambda _: self.act(self.controller.select_step, 0))
            info = W.HTML(layout=sh["info"], style=sh["info_style"])
            row = W.HBox([spacer, btn, info], layout=sh["row"])
            row.add_class("wb-row")
            row.add_class("wb-step-export")
            self.rows["__export__"] = (row, info)
        return self.rows["__export__"][0]

    def _header(self, label: str, answers: bool = False):
        """The column heads or a group's title: made once and reused (a toggle that moves a row between the
        list and the folded steps sends the containers' new children, never new widgets)."""
        key = (label, answers)
        if key not in self._heads:
            W = self._W
            html = (f"<div class='wb-sub' style='padding:0 4px'>{label}</div>" if label != "head" else
                    "<div class='wb-head'><span style='width:20px'>on</span><span style='width:215px'>step"
                    "</span><span style='width:44px;text-align:right'>nodes</span><span style='width:120px'>"
                    "fused here</span><span style='width:56px'>parity</span>"
                    + ("<span>answers</span>" if answers else "") + "</div>")
            self._heads[key] = W.HTML(html, layout=self._shared["head"], style=self._shared["info_style"])
        return self._heads[key]

    def draw_rows(self) -> None:
        """Fill the rows from ``state.rows``: the row widgets are reused, and only values that changed are sent,
        in one batch per widget (a warm toggle sends what it changed, nothing more)."""
        rows, snaps = self.state.rows, self.state.snapshots
        if not rows or not snaps:
            return
        answers = any(r.get("answers") for r in rows)
        shape = (tuple((r["name"], r.get("applies", True)) for r in rows), answers)
        if self._shape != shape:
            kids = [self._header("head", answers), self._export_row()]
            for kind, label in (("fusion", "Fusions"), ("cleanup", "Graph clean-ups")):
                group = [r for r in rows if r["kind"] == kind and r.get("applies", True)]
                if group:
                    kids.append(self._header(label))
                    kids += [self._row(r)[0] for r in group]
            # Under the list (not inside its scroll area), so what opens shows where the user clicked.
            na = [r for r in rows if not r.get("applies", True)]
            self.w_na_box.children = [self._row(r)[0] for r in na]
            self.w_na_toggle.description = f"not applicable to this model ({len(na)})"
            self.w_na_toggle.layout.display = "flex" if na else "none"
            if not na:
                self._fold(False)
            self.w_rows.children = kids
            self._shape = shape
        sel = self.state.pair.index if self.state.pair is not None else -1
        ex_row, ex_info = self.rows["__export__"]
        ex_info.value = (f"<div class='wb-cells'><span class='wb-n'>{snaps[0].nodes}</span>"
                         f"<span class='wb-h' style='color:#666'>the model as exported</span></div>")
        (ex_row.add_class if sel == 0 else ex_row.remove_class)("wb-row-sel")
        for r in rows:
            row, cb, btn, info = self._row(r)
            self.silently(cb, "value", bool(r["on"]), self._quiet)
            btn.disabled = r["index"] is None
            info.value = self._cells(r, answers)  # (traitlets sends nothing when the value is the same)
            with row.hold_sync():  # both classes in one message
                (row.add_class if r["index"] is not None and r["index"] == sel else row.remove_class)("wb-row-sel")
                (row.remove_class if r["on"] else row.add_class)("wb-row-off")

    @staticmethod
    def _cells(r: dict, answers: bool) -> str:
        """A row's cells as HTML: nodes, what it fused, parity, answers, nodes per provider, what it buys on each
        workload measured (the profile's words in its hover), why it fell short."""
        why = r["why"] or r.get("na_why", "")
        short = why if len(why) <= 170 else why[:169] + "…"
        ran = r["index"] is not None
        if not r.get("applies", True):  # folded: what a user needs is why it cannot apply
            return f"<div class='wb-why' title='{esc(why)}'>{esc(short)}</div>"
        why_html = f"<div class='wb-why' title='{esc(why)}'>{esc(short)}</div>" if why and ran else ""
        par = "" if not ran else badge(r["parity"], "ok" if r["parity"] else
                                       ("differs" if r["parity"] is False else "…"), r["parity_tip"])
        ans = (f"<span class='wb-ans' title='{esc(r.get('answers_tip', ''))}'>"
               f"{esc(r.get('answers', ''))}</span>" if answers and ran else "")
        prov = (f"<span class='wb-prov' title='{esc(r['providers_tip'])}'>{esc(r['providers'])}</span>"
                if r.get("providers") and ran else "")
        prov += (f"<span class='wb-buys' title='{esc(r['buys_tip'])}'>{esc(r['buys'])}</span>"
                 if r.get("buys") and ran else "")
        return (f"<div class='wb-cells'><span class='wb-n'>{r['nodes'] if ran else 'off'}</span>"
                f"<span class='wb-h' title='{esc(r['here'])}'>{esc(r['here'])}</span>"
                f"<span class='wb-p'>{par}</span>{ans}{prov}</div>{why_html}")

    def _fold(self, open_: bool) -> None:
        """Show or hide the steps that cannot apply (what the one line folds)."""
        self.w_na_box.layout.display = "flex" if open_ else "none"
        self.w_na_toggle.icon = "caret-down" if open_ else "caret-right"

    # ----------------------------------------------------------------- slider, counts, diagnostics
    def draw_slider(self) -> None:
        snaps = self.state.snapshots
        if not snaps:
            return
        step = self.state.step if 0 <= self.state.step < len(snaps) else len(snaps) - 1
        na = {r["index"] for r in self.state.rows or () if not r.get("applies", True)} - {step}  # folded away
        opts = [(f"{i}: {getattr(sn.step, 'name', sn.step) or 'export'}", i) for i, sn in enumerate(snaps)
                if i not in na]
        if list(self.w_step.options) == opts and self.w_step.value == step:
            return  # nothing changed: nothing to send
        self._quiet.append(True)
        try:
            with self.w_step.hold_sync():  # new options and the step in one message, not three
                if list(self.w_step.options) != opts:
                    self.w_step.options = opts
                if self.w_step.value != step:
                    self.w_step.value = step
        finally:
            self._quiet.pop()

    def draw_pair(self) -> None:
        p = self.state.pair
        if p is None:
            return
        self.w_counts.value = counts_table_html(p.counts_before, p.counts_after)
        lines = [esc(line) for line in p.diag]
        if lines:
            lines[0] = f"<b>{lines[0].split(' (', 1)[0]}</b> (" + lines[0].split(" (", 1)[1] if " (" in lines[0] \
                else lines[0]
        if p.diag_warning:
            lines.append(f"<span style='color:#9a6700'>{esc(p.diag_warning)}</span>")
        self.w_diag.value = "<div style='font-size:12px'>" + "<br>".join(lines) + "</div>"
        if self.state.rows:
            self.draw_rows()  # the selected row follows the pair


__all__ = ["FusionPanel", "counts_table_html"]
