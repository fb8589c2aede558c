"""The profile panel: benchmark settings and buttons, live latency plots, results, operator profile, ablation."""

from __future__ import annotations

from ...measure.harness.load import busy_warning
from ...measure.tune.engine_line import entries_of_tune, faster_engine
from ...measure.tune.rows import answers_note, plan_lines, same_as_mark
from ...measure.variants.labels import on_gpu, variant_label, workload_figure
from ...viz import latency as vl
from ...viz.summary import task_parity_words as words
from ..panel import Panel, badge, esc, sync_figure

_MEASURING = ("benchmark", "profile", "ablation", "tune", "answers", "sweep")
_FIGURES = ("live", "dist", "pct", "ops", "ablation")
_PLACEHOLDER = {"live": "latency per run: press Run", "dist": "distribution per variant: press Run",
                "pct": "p50 / p90 / p99 per variant: press Run", "ops": "time per op type: press Profile ops",
                "ablation": "what each fusion saves or costs here: press What each fusion buys"}


def _f(x) -> str:
    return f"{x:.2f}" if isinstance(x, (int, float)) else ""


def results_html(r, explanation=()) -> str:
    """The benchmark's table: each variant against the first, its own precision's floor and the MatMuls alone."""
    base = r.variants[0].p50_ms if r.variants else None
    rows = []
    for v in r.variants:
        par = v.parity or {}
        sp = f"{base / v.p50_ms:.2f}x" if base and v.p50_ms else ""
        ans = words(getattr(v, "task_parity", None))
        gpu = on_gpu(v.name)  # the floor is the CPU's MatMul rate: no GPU row is held against it
        rows.append(f"<tr><td>{esc(variant_label(v.name))}</td><td>{'GPU' if gpu else 'CPU'}</td>"
                    f"<td>{_f(v.p50_ms)}</td><td>{_f(v.p90_ms)}</td><td>{_f(v.p99_ms)}</td><td>{v.runs}</td>"
                    f"<td>{sp}</td>"
                    f"<td title='against the floor of its own precision ({esc(v.floor_precision or 'fp32')})'>"
                    f"{'' if gpu else _f(v.floor_ratio)} <span style='color:#888'>"
                    f"{'' if gpu else esc(v.floor_precision or '')}</span></td>"
                    f"<td>{'' if gpu else _f(v.bound_ratio)}</td>"
                    f"<td>{badge(par.get('ok'), 'ok' if par.get('ok') else ('—' if not par else 'diff'))}</td>"
                    f"<td>{esc(ans)}</td></tr>")
    floor = ""
    if r.floor_ms:
        bound = (f"; the MatMuls alone, weights read from memory: {r.matmul_bound_ms:.2f} ms (no fusion goes "
                 f"below this)") if r.matmul_bound_ms else ""
        floor = f"<div style='font-size:11px'>hardware floor {r.floor_ms:.2f} ms{bound}</div>"
    elif (r.floor or {}).get("floor_ms"):  # computed, but above a measured time: impossible, so unknown (its rate is measured again next time)
        floor = "<div style='font-size:11px'>hardware floor unknown (the rate probe was disturbed by other work)</div>"
    why = "".join(f"<div style='font-size:11px'>{esc(line)}</div>" for line in explanation)
    return ("<div class='wb-table'><table><tr><th>variant</th><th>device</th><th>p50 ms</th><th>p90 ms</th><th>p99 ms</th>"
            "<th>runs</th><th>speed-up</th><th>x floor</th><th>x MatMuls alone</th><th>parity</th>"
            "<th>answers</th></tr>" + "".join(rows) + "</table></div>" + floor + why)


def plans_html(plans: dict) -> str:
    """Each workload's checked plan: its ablation table, then what ships there and why."""
    parts = []
    for kind, p in plans.items():
        head = f"<div style='font-size:12px;font-weight:600'>{esc(kind)}: {esc(p.workload.get('words', ''))}</div>"
        parts.append(head + ablation_html(p.ablation_result())
                     + f"<div style='font-size:11px'>checked: {esc(p.words())}</div>"
                     + "".join(f"<div style='font-size:11px'>why, profiled: {esc(line)}</div>"
                               for line in p.kernel_lines()))
    return "".join(parts)


def ablation_html(res) -> str:
    rows = "".join(
        f"<tr><td>{esc(r.step)}</td><td>{esc(', '.join(f'{k} {v}' for k, v in sorted(r.fused_here.items())))}</td>"
        f"<td>{r.p50_without_ms:.2f}</td><td>{r.saves_ms:+.2f} ({r.saves_pct:+.1f}%)</td>"
        f"<td>{badge(r.verdict == 'helps' if r.verdict != 'within noise' else None, r.verdict)}</td></tr>"
        for r in res.rows)
    t = res.tuned_plan
    tail = (f"full plan p50 {res.full_p50_ms:.2f} ms, noise band ±{res.noise_pct:.1f}%; "
            + (f"tuned plan: switch off {esc(', '.join(sorted(t.disabled)))}" if t.disabled
               else "no step measured harmful"))
    return ("<div class='wb-table'><table><tr><th>step left out</th><th>what it fuses</th><th>p50 without (ms)</th>"
            "<th>the step saves (ms)</th><th>verdict</th></tr>" + rows + "</table></div>"
            f"<div style='font-size:11px'>{tail}</div>"
            + "".join(f"<div style='font-size:11px'>{esc(w)}</div>" for w in [busy_warning(res.machine_load)] if w))


class ProfilePanel(Panel):
    """Benchmark bar (provider, shape, threads, runs, variants), Run/Stop, Profile ops, What each fusion buys,
    and their figures; ``extra`` widgets (the report button) sit with the buttons."""

    def __init__(self, state, controller, extra=()):
        super().__init__(state, controller)
        import ipywidgets as W

        self._vl = vl
        L, s = W.Layout, state
        self._quiet: list = []
        self.w_provider = W.Dropdown(options=list(s.providers), value=s.provider, description="provider",
                                     layout=L(width="170px"))
        self.w_batch = W.BoundedIntText(value=s.batch, min=1, max=4096, description="batch", layout=L(width="130px"))
        self.w_seq = W.BoundedIntText(value=s.seq, min=1, max=4096, description="sequence", layout=L(width="150px"))
        self.w_threads = W.BoundedIntText(value=s.threads, min=1, max=256, description="threads",
                                          layout=L(width="140px"))
        self.w_runs = W.BoundedIntText(value=s.runs, min=1, max=100000, description="runs", layout=L(width="130px"))
        self.w_variants = W.SelectMultiple(options=[], description="variants", rows=4, layout=L(width="330px"))
        self.w_int8 = W.Checkbox(value=s.int8, description="+ int8 (dynamic quantization)", indent=False)
        self._settings = {"provider": self.w_provider, "batch": self.w_batch, "seq": self.w_seq,
                          "threads": self.w_threads, "runs": self.w_runs, "int8": self.w_int8}
        for key, w in self._settings.items():
            w.observe(lambda ch, key=key: None if self._quiet else self.controller.configure(**{key: ch["new"]}),
                      "value")
        self.w_variants.observe(lambda ch: None if self._quiet else self.controller.configure(
            variants=list(ch["new"])), "value")
        self._buttons(W, L)
        # The five plots are made when a measurement first needs them: in the browser every plotly
        # FigureWidget loads plotly's widget script anew (about 2 s each in headless Chromium here), and
        # a user who only looks at fusions should not wait for plots of measurements not taken.
        self._figures: dict[str, object] = {}
        self.boxes = []
        for name in _FIGURES:
            box = W.Box([W.HTML(f"<div style='font-size:11px;color:#888;padding:8px'>{_PLACEHOLDER[name]}</div>")],
                        layout=L(width=f"{s.pane_width + 4}px", overflow="hidden", flex="0 0 auto"))
            self.boxes.append(box)
        self.boxes[0].add_class("wb-live-plot")
        self.w_results = W.HTML().add_class("wb-results")
        self._wire_gpu(W)
        self.w_ablation = W.HTML().add_class("wb-ablation")
        row = lambda *kids: W.HBox(list(kids), layout=L(flex_flow="row wrap"))  # noqa: E731
        self.widget = W.VBox([
            W.HTML("<div class='wb-section'>Latency (measured in a worker process, variants interleaved, "
                   "thread spinning off)</div>"),
            row(self.w_provider, self.w_batch, self.w_seq, self.w_threads, self.w_runs), self.w_gpu,
            W.HBox([self.w_variants, W.VBox([self.w_int8, row(self.w_run, self.w_stop, self.w_profile, *extra),
                                             self.w_ablate, self.w_tune])]),
            row(self.boxes[0], self.boxes[1]), row(self.boxes[2], self.boxes[3]), self.w_results, self.w_kernels,
            row(self.boxes[4], self.w_ablation), self.w_tune_result])
        self.widget.add_class("wb-profile-panel")
        self.watch("series", self.draw_live)
        self.watch("bench_result", self.draw_result)
        self.watch("op_breakdown", lambda: self._show(self.fig_ops, vl.op_breakdown_figure(dict(self.state.op_breakdown))))
        self.watch("ablation", self.draw_ablation)
        self.watch("tune", self.draw_tune)
        self.watch("jobs", self.draw_buttons)
        self.watch("snapshots", self.draw_variants)
        self.watch(["provider", "batch", "seq", "threads", "runs", "int8", "providers"], self.draw_settings)
        self.watch("pane_width", self.resize)
        if s.snapshots:
            self.draw_variants()

    def _buttons(self, W, L) -> None:
        """Run, Stop, Profile ops, What each fusion buys, Tune, each wired to its controller action."""
        self.w_run = W.Button(description="Run", button_style="success", icon="play", layout=L(width="80px"))
        self.w_stop = W.Button(description="Stop", button_style="danger", icon="stop", disabled=True,
                               layout=L(width="80px"))
        self.w_run.on_click(lambda _: self.controller.measuring.run_benchmark())
        self.w_stop.on_click(lambda _: self.controller.measuring.stop_benchmark())
        self.w_profile = W.Button(description="Profile ops", icon="tachometer-alt", layout=L(width="120px"),
                                  tooltip="profile the operators of the selected step's before and after graphs: "
                                          "time per op type, and nodes coloured by their share of latency")
        self.w_profile.on_click(lambda _: self.controller.measuring.profile())
        self.w_ablate = W.Button(description="What each fusion buys", icon="balance-scale", layout=L(width="190px"),
                                 tooltip="fuse again without each fusion step in turn and time every plan "
                                         "interleaved with the full plan (twice, for the noise): what each step "
                                         "saves or costs on this machine")
        self.w_ablate.on_click(lambda _: self.controller.tuning.ablate())
        self.w_tune = W.Button(description="Tune for this machine", icon="trophy", layout=L(width="190px"),
                               tooltip="this machine's plan, answer-guarded int8, and every variant against "
                                       "PyTorch, torch.compile and OpenVINO in one worker: the fastest whose "
                                       "answers hold (workbench tune)")
        self.w_tune.on_click(lambda _: self.controller.tuning.tune())
        self.w_tune_result = W.HTML()
        self.w_tune_result.add_class("wb-tune")

    def figure(self, name: str):
        """The plot ``name`` (live, dist, pct, ops, ablation), made and placed on first use."""
        fig = self._figures.get(name)
        if fig is None:
            import plotly.graph_objects as go

            vl = self._vl
            empty = {"live": vl.live_figure({}), "dist": vl.distribution_figure({}), "pct": vl.percentile_figure({}),
                     "ops": vl.op_breakdown_figure({}), "ablation": vl.ablation_figure([])}[name]
            fig = go.FigureWidget(empty)
            fig.layout.width, fig.layout.autosize = self.state.pane_width, False  # never wider than its box
            sync_figure(fig)
            self._figures[name] = fig
            self.boxes[_FIGURES.index(name)].children = [fig]
        return fig

    fig_live = property(lambda self: self.figure("live"))
    fig_dist = property(lambda self: self.figure("dist"))
    fig_pct = property(lambda self: self.figure("pct"))
    fig_ops = property(lambda self: self.figure("ops"))
    fig_ablation = property(lambda self: self.figure("ablation"))

    @property
    def figures(self) -> tuple:
        return tuple(self.figure(n) for n in _FIGURES)

    def _show(self, fig, source) -> None:
        self._vl.refresh(fig, source)
        sync_figure(fig)

    def draw_live(self) -> None:
        vl = self._vl
        series = {k: list(v) for k, v in self.state.series.items()}
        self._show(self.fig_live, vl.live_figure(series))
        self._show(self.fig_dist, vl.distribution_figure(series))
        if self.state.bench_result is None:
            self._show(self.fig_pct, vl.percentile_figure({k: vl.percentiles(v) for k, v in series.items() if v}))

    def draw_result(self) -> None:
        vl, r = self._vl, self.state.bench_result
        if r is None:
            self.w_results.value = ""
            return
        series = {k: list(v) for k, v in self.state.series.items()}
        self._show(self.fig_live, vl.live_figure(series, floor_ms=r.floor_ms))
        stats = {v.name: {"p50": v.p50_ms or 0, "p90": v.p90_ms or 0, "p99": v.p99_ms or 0} for v in r.variants}
        self._show(self.fig_pct, vl.percentile_figure(stats, floor_ms=r.floor_ms))
        self.w_results.value = results_html(r, self.state.explanation)

    def _wire_gpu(self, W) -> None:
        """The GPU column's line (what it times, or why there is none), asked of the controller now and whenever
        the provider or the text changes; and a CUDA profile's GPU kernels."""
        self.w_gpu = W.HTML().add_class("wb-gpu-note")
        self.w_kernels = W.HTML().add_class("wb-kernels")
        self.watch("kernels", lambda: setattr(self.w_kernels, "value", kernels_html(self.state.kernels)))
        self.watch("gpu_note", self.draw_gpu_note)
        self.watch(["provider", "bench_on_text"], lambda: self.controller.measuring.gpu_column())
        self.controller.measuring.gpu_column()
        self.draw_gpu_note()

    def draw_gpu_note(self) -> None:
        note = self.state.gpu_note
        self.w_gpu.value = f"<div style='font-size:11px;color:#666'>{esc(note)}</div>" if note else ""

    def draw_ablation(self) -> None:
        res = self.state.ablation
        if res is None:
            return
        self._show(self.fig_ablation, self._vl.ablation_figure([r.__dict__ for r in res.rows], res.noise_pct))
        self.w_ablation.value = plans_html(self.state.plans) if self.state.plans else ablation_html(res)

    def draw_tune(self) -> None:
        if self.state.tune is not None:
            self.w_tune_result.value = tune_html(self.state.tune)

    def draw_buttons(self) -> None:
        jobs = self.state.jobs
        busy = {n for n in _MEASURING if n in jobs and jobs[n].running}
        self.w_run.disabled = bool(busy)
        self.w_stop.disabled = "benchmark" not in busy
        self.w_profile.disabled = bool(busy)
        self.w_ablate.disabled = bool(busy)
        self.w_tune.disabled = bool(busy)

    def draw_variants(self) -> None:
        choices = self.controller.measuring.variant_choices()
        keys = [k for _, k in choices]
        if not keys:
            return
        snaps = keys[:len(self.state.snapshots)] or keys  # the snapshots first, then the app's recipes
        chosen = tuple(k for k in self.state.variants if k in keys) or tuple(dict.fromkeys([snaps[0], snaps[-1]]))
        self._quiet.append(True)
        try:
            # Options and selection in one message: sent apart, the browser re-applies the old selection to
            # a shorter option list ("Cannot set properties of undefined (setting 'selected')").
            with self.w_variants.hold_sync():
                if list(self.w_variants.options) != choices:
                    self.w_variants.value = ()
                    self.w_variants.options = choices
                if tuple(self.w_variants.value) != chosen:
                    self.w_variants.value = chosen
        finally:
            self._quiet.pop()

    def draw_settings(self) -> None:
        s = self.state
        self._quiet.append(True)
        try:
            if list(self.w_provider.options) != list(s.providers):
                self.w_provider.options = list(s.providers)
            for key, w in self._settings.items():
                if w.value != getattr(s, key):
                    w.value = getattr(s, key)
        finally:
            self._quiet.pop()

    def resize(self) -> None:
        w = self.state.pane_width
        for box, name in zip(self.boxes, _FIGURES):
            box.layout.width = f"{w + 4}px"
            f = self._figures.get(name)
            if f is not None:
                f.layout.width = w
                sync_figure(f)


def kernels_html(kernels: dict, top: int = 12) -> str:
    """A CUDA profile's GPU kernels, slowest first, per profiled snapshot ("" when every profile ran on the CPU)."""
    out = []
    for label, k in kernels.items():
        rows = "".join(f"<tr><td style='font-family:monospace'>{esc(name)}</td><td>{ms * 1e3:.1f}</td></tr>"
                       for name, ms in sorted(k["ms"].items(), key=lambda kv: -kv[1])[:top])
        table = (f"<table><tr><th>GPU kernel</th><th>µs per run</th></tr>{rows}</table>" if rows else "")
        out.append(f"<div class='wb-section'>{esc(label)}: {esc(k['note'])}</div>{table}")
    return f"<div class='wb-table'>{''.join(out)}</div>" if out else ""


def tune_html(res) -> str:
    """The tune's recommendation per workload, the peers, and each variant's figures and answers
    (``res``: a :class:`workbench.measure.tune.result.TuneResult`)."""
    heads = "".join(
        f"<div class='wb-section'>{esc(w.capitalize())}: {esc(variant_label(rec.variant))}, "
        f"{esc(workload_figure(w, rec.figure))} (batch {rec.batch})</div>"
        f"<div>{esc(rec.why)}</div>" for w, rec in res.recommended.items())
    rows = "".join(
        f"<tr><td>{esc(variant_label(r.name) + same_as_mark(r))}</td><td>{_f(r.p50_ms)}</td>"
        f"<td>{_f(r.sentences_per_s)}</td><td>{r.batch or ''}</td>"
        f"<td>{'reference' if r.parity is None else esc(words(r.task_parity))}</td>"
        f"<td>{'-' if res.random_weights and r.parity is not None else 'yes' if r.holds else 'no'}</td></tr>"
        for r in res.variants)
    note = answers_note(res)  # random weights: no verdict, one sentence why
    engines = [faster_engine(entries_of_tune(res.variants, w), res.machine, res.source, w, res.random_weights)
               for w in res.recommended]
    plans = "".join(f"<div style='font-size:11px'>{esc(line)}</div>" for line in [*filter(None, engines[:1]),
                                                                                   *plan_lines(res)])
    skipped = plans + "".join(f"<div>{esc(k.name)} skipped: {esc(k.why)}</div>" for k in res.skipped)
    saved = res.saved
    where = f"<div>saved to {esc(saved['dir'])}</div>" if saved else ""
    return (f"{heads}<table><tr><th>variant</th><th>p50 ms</th><th>sentences/s</th><th>batch</th><th>answers</th>"
            f"<th>holds</th></tr>{rows}</table>{f'<div>{esc(note)}</div>' if note else ''}{skipped}{where}")


__all__ = ["ProfilePanel", "results_html", "ablation_html", "plans_html", "kernels_html", "tune_html"]
