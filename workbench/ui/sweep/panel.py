"""The sweep panel: a fleet sweep's spec, its progress and its table (``workbench.measure.fleet.run``)."""

from __future__ import annotations

from ...measure.fleet.rows import plan_line
from ..panel import Panel, esc

DEFAULT_SPEC = """models: [{model}]
plans: [default, ablation]
seq: [16, 128]
threads: [2]
runs: 10
"""


def sweep_html(result: dict | None, limit: int = 40) -> str:
    """The sweep's rows (config, node, p50, p90) and the tuned plan per machine type."""
    if not result:
        return ""
    rows = result.get("rows") or []
    head = ("<div class='wb-table wb-sweep'><table><tr><th>config</th><th>node</th><th>p50 ms</th><th>p90 ms</th>"
            "<th>runs</th></tr>")
    body = []
    for r in rows[-limit:]:
        cfg = r.get("config", {})
        keys = ("model", "plan", "seq", "batch", "threads", "provider", "precision")
        label = ", ".join(f"{k} {cfg[k]}" for k in keys if k in cfg)
        if r.get("error"):
            body.append(f"<tr><td>{esc(label)}</td><td>{esc(r.get('node', ''))}</td>"
                        f"<td colspan='3' style='color:#cf222e'>{esc(r['error'])}</td></tr>")
            continue
        body.append(f"<tr><td>{esc(label)}</td><td>{esc(str(r.get('node', ''))[:12])}</td>"
                    f"<td>{r.get('p50_ms', 0):.2f}</td><td>{r.get('p90_ms', 0):.2f}</td><td>{r.get('runs', '')}</td></tr>")
    tail = f"<div style='font-size:11px'>{len(rows)} of {result.get('total', len(rows))} rows</div>"
    plans = result.get("tuned_plans") or {}
    if plans and not result.get("running"):
        tail += "".join(f"<div style='font-size:11px'>{esc(plan_line(m, p))}</div>"
                        for m, p in plans.items() if isinstance(p, dict))
    return head + "".join(body) + "</table></div>" + tail


class SweepPanel(Panel):
    """A YAML spec box, executor (local or Ray) and address, Run / Stop, and the result table."""

    def __init__(self, state, controller):
        super().__init__(state, controller)
        import ipywidgets as W

        L = W.Layout
        self.w_spec = W.Textarea(value=DEFAULT_SPEC.format(model=state.source), rows=5, layout=L(width="98%"))
        self.w_executor = W.Dropdown(options=[("this machine", "local"), ("Ray cluster", "ray")], value="local",
                                     description="executor", layout=L(width="230px"))
        self.w_address = W.Text(value="", placeholder="auto, host:port, or empty: a local Ray",
                                description="address", layout=L(width="320px"))
        self.w_run = W.Button(description="Run sweep", icon="play", layout=L(width="120px"))
        self.w_stop = W.Button(description="Stop", icon="stop", disabled=True, layout=L(width="80px"))
        self.w_run.on_click(lambda _: self.act(self.controller.sweep.run_sweep, self.w_spec.value,
                                               self.w_executor.value, address=self.w_address.value.strip() or None))
        self.w_stop.on_click(lambda _: self.controller.sweep.stop_sweep())
        self.w_table = W.HTML()
        self.widget = W.VBox([
            W.HTML("<div class='wb-section'>Fleet sweep <span style='font-weight:normal;font-size:11px'>"
                   "(models × plans × shapes × threads × providers, one measurement per machine at a time; "
                   "see README, Fleet sweeps)</span></div>"),
            self.w_spec, W.HBox([self.w_executor, self.w_address, self.w_run, self.w_stop],
                                layout=L(flex_flow="row wrap")), self.w_table])
        self.widget.add_class("wb-sweep-panel")
        self.watch("sweep", lambda: setattr(self.w_table, "value", sweep_html(self.state.sweep)))
        self.watch("jobs", self.draw_busy)

    def draw_busy(self) -> None:
        j = self.state.jobs.get("sweep")
        running = bool(j and j.running)
        self.w_run.disabled, self.w_stop.disabled = running, not running


__all__ = ["SweepPanel", "sweep_html", "DEFAULT_SPEC"]
