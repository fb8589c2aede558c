"""Latency figures: per-run lines, distributions, percentile bars, op breakdowns.

Inputs are plain data: ``series`` is ``{variant: [ms, ms, ...]}`` in run
order; ``stats`` is ``{variant: {"p50": ms, "p90": ms, "p99": ms, "runs": n}}``;
op breakdowns are ``{variant: {op_type: ms}}``. Each ``*_figure`` returns a new
``go.Figure``; :func:`refresh` copies one into a live ``FigureWidget`` in
place, in one message.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from ..measure.variants.labels import variant_label

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf")
FLOOR_COLOUR = "#444444"


def colour(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def _base(title: str, height: int, **kw) -> dict:
    lay = dict(title=dict(text=title, font=dict(size=13), x=0.02), height=height,
               margin=dict(l=50, r=15, t=40, b=40), plot_bgcolor="white", paper_bgcolor="white",
               legend=dict(orientation="h", y=-0.2, font=dict(size=10)))
    lay.update(kw)
    return lay


def _waiting(fig, text: str):
    """An empty figure says what fills it, instead of showing bare axes."""
    if not any(len(t.x if t.x is not None else ()) or len(t.y if t.y is not None else ()) for t in fig.data):
        fig.update_layout(xaxis=dict(visible=False), yaxis=dict(visible=False), annotations=[dict(
            text=text, showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5, font=dict(size=12, color="#888"))])
    else:  # explicit, so a live widget that showed the empty state gets its axes back
        fig.update_layout(xaxis=dict(visible=True), yaxis=dict(visible=True))
    return fig


def percentiles(values: Sequence[float]) -> dict:
    """p50, p90, p99, mean and count of a list of milliseconds (empty → zeros)."""
    if not len(values):
        return {"p50": 0.0, "p90": 0.0, "p99": 0.0, "mean": 0.0, "runs": 0}
    a = np.asarray(values, dtype=float)
    p50, p90, p99 = np.percentile(a, [50, 90, 99])
    return {"p50": float(p50), "p90": float(p90), "p99": float(p99), "mean": float(a.mean()), "runs": int(a.size)}


def live_figure(series: Mapping[str, Sequence[float]], *, title: str = "latency per run",
                floor_ms: float | None = None, height: int = 300):
    """One line per variant: run index → milliseconds, growing while a benchmark runs."""
    import plotly.graph_objects as go

    data = [dict(type="scatter", mode="lines+markers", name=variant_label(name), x=list(range(1, len(v) + 1)),
                 y=list(v), line=dict(color=colour(i), width=1.5), marker=dict(size=4),
                 hovertemplate=f"{variant_label(name)}<br>run %{{x}}: %{{y:.2f}} ms<extra></extra>")
            for i, (name, v) in enumerate(series.items())]
    lay = _base(title, height, xaxis=dict(title="run", gridcolor="#eee"),
                yaxis=dict(title="ms", gridcolor="#eee", rangemode="tozero"))
    if floor_ms:
        lay["shapes"] = [_floor_line(floor_ms)]
        lay["annotations"] = [_floor_note(floor_ms)]
    return _waiting(go.Figure(data=data, layout=lay), "press Run: one line per variant grows here, run by run")


def _floor_line(ms: float) -> dict:
    return dict(type="line", xref="paper", x0=0, x1=1, y0=ms, y1=ms, line=dict(color=FLOOR_COLOUR, dash="dash", width=1.5))


def _floor_note(ms: float) -> dict:
    return dict(xref="paper", x=1, y=ms, yanchor="bottom", xanchor="right", showarrow=False,
                text=f"hardware floor {ms:.1f} ms", font=dict(size=10, color=FLOOR_COLOUR))


def distribution_figure(series: Mapping[str, Sequence[float]], *, kind: str = "box", title: str = "distribution per variant",
                        height: int = 300):
    """A box (or violin) per variant."""
    import plotly.graph_objects as go

    if kind not in ("box", "violin"):
        raise ValueError("kind must be 'box' or 'violin'")
    data = []
    for i, (name, v) in enumerate(series.items()):
        t = dict(type=kind, name=variant_label(name), y=list(v), marker=dict(color=colour(i)), showlegend=False)
        if kind == "box":
            t["boxpoints"] = "outliers"
        else:
            t.update(box=dict(visible=True), meanline=dict(visible=True), points=False)
        data.append(t)
    return _waiting(go.Figure(data=data, layout=_base(title, height, yaxis=dict(title="ms", gridcolor="#eee",
                                                                                  rangemode="tozero"))),
                    "the spread of each variant's runs")


def percentile_figure(stats: Mapping[str, Mapping[str, float]], *, floor_ms: float | None = None,
                      title: str = "p50 / p90 / p99", height: int = 320):
    """Grouped bars of p50, p90 and p99 per variant, with the hardware floor as a line."""
    import plotly.graph_objects as go

    names = list(stats)
    data = []
    for q, c in (("p50", "#1f77b4"), ("p90", "#6baed6"), ("p99", "#c6dbef")):
        ys = [float(stats[n].get(q, 0.0)) for n in names]
        data.append(dict(type="bar", name=q, x=[variant_label(n) for n in names], y=ys, marker=dict(color=c),
                         text=[f"{y:.1f}" for y in ys] if q == "p50" else None, textposition="outside",
                         hovertemplate=f"%{{x}}<br>{q}: %{{y:.2f}} ms<extra></extra>"))
    lay = _base(title, height, barmode="group", yaxis=dict(title="ms", gridcolor="#eee", rangemode="tozero"))
    if floor_ms:
        lay["shapes"] = [_floor_line(floor_ms)]
        lay["annotations"] = [_floor_note(floor_ms)]
    return _waiting(go.Figure(data=data, layout=lay), "p50, p90 and p99 per variant, against the hardware floor")


def op_breakdown_figure(ops: Mapping[str, Mapping[str, float]], *, top: int = 10, title: str = "time per op type",
                        height: int = 320):
    """Stacked horizontal bars: each variant's latency split by op type (the ``top`` largest, rest as "other")."""
    import plotly.graph_objects as go

    totals: dict[str, float] = {}
    for per in ops.values():
        for op, ms in per.items():
            totals[op] = totals.get(op, 0.0) + float(ms)
    keep = [op for op, _ in sorted(totals.items(), key=lambda kv: -kv[1])[:top]]
    names = list(ops)
    data = []
    for i, op in enumerate(keep + (["other"] if len(totals) > len(keep) else [])):
        xs = []
        for n in names:
            per = ops[n]
            xs.append(sum(float(v) for k, v in per.items() if k not in keep) if op == "other" else float(per.get(op, 0.0)))
        data.append(dict(type="bar", orientation="h", name=op, y=names, x=xs,
                         marker=dict(color="#c7c7c7" if op == "other" else colour(i)),
                         hovertemplate=f"{op}<br>%{{y}}: %{{x:.2f}} ms<extra></extra>"))
    # Legend on the right: below the bars it collides with the axis title.
    return _waiting(go.Figure(data=data, layout=_base(title, height, barmode="stack",
                                                      xaxis=dict(title="ms", gridcolor="#eee"), yaxis=dict(automargin=True),
                                                      legend=dict(orientation="v", x=1.02, y=1, font=dict(size=10)))),
                    "press Profile ops: time per op type, before and after the selected step")


def sweep_figure(rows: Sequence[Mapping], *, x: str = "seq", y: str = "p50", by: str = "variant",
                 share: str | None = "attention_share", title: str = "latency against sequence length", height: int = 340):
    """Lines of ``y`` against ``x`` per ``by``; with ``share``, a dotted second axis for that fraction."""
    import plotly.graph_objects as go

    groups: dict[str, list] = {}
    for r in rows:
        groups.setdefault(str(r[by]), []).append(r)
    data = []
    for i, (name, rs) in enumerate(groups.items()):
        rs = sorted(rs, key=lambda r: r[x])
        data.append(dict(type="scatter", mode="lines+markers", name=name, x=[r[x] for r in rs], y=[r[y] for r in rs],
                         line=dict(color=colour(i))))
        if share and all(share in r and r[share] is not None for r in rs):
            data.append(dict(type="scatter", mode="lines", name=f"{name}: attention share", yaxis="y2",
                             x=[r[x] for r in rs], y=[100 * r[share] for r in rs], line=dict(color=colour(i), dash="dot")))
    lay = _base(title, height, xaxis=dict(title=x, type="log", gridcolor="#eee"),
                yaxis=dict(title=f"{y} ms", gridcolor="#eee", rangemode="tozero"))
    if any(d.get("yaxis") == "y2" for d in data):
        lay["yaxis2"] = dict(title="attention share %", overlaying="y", side="right", range=[0, 100], showgrid=False)
    return go.Figure(data=data, layout=lay)


VERDICT_COLOUR = {"helps": "#2ca02c", "hurts": "#d62728", "within noise": "#9e9e9e"}


def ablation_figure(rows: Sequence[Mapping], noise_pct: float = 0.0, *, title: str = "what each fusion saves here",
                    height: int = 300):
    """Horizontal bars: per step, the percent of the full plan's p50 it saves (negative: it costs).

    ``rows`` are :class:`workbench.measure.tune.ablation.AblationRow` dicts
    (``step``, ``saves_pct``, ``saves_ms``, ``verdict``); the grey band is
    the measured noise, inside which no verdict is given.
    """
    import plotly.graph_objects as go

    steps = [r["step"] for r in rows]
    fig = go.Figure(go.Bar(
        y=steps, x=[r["saves_pct"] for r in rows], orientation="h", name="saves",
        marker_color=[VERDICT_COLOUR.get(r["verdict"], "#9e9e9e") for r in rows],
        customdata=[[r["saves_ms"], r["verdict"]] for r in rows],
        hovertemplate="%{y}: %{x:+.1f}% (%{customdata[0]:+.2f} ms), %{customdata[1]}<extra></extra>"))
    lay = _base(title, height, xaxis=dict(title="% of the full plan's p50 saved (negative: the step costs time)",
                                          zeroline=True, zerolinecolor="#444"),
                yaxis=dict(autorange="reversed"), showlegend=False)
    if noise_pct and rows:
        lay["shapes"] = [dict(type="rect", xref="x", yref="paper", x0=-noise_pct, x1=noise_pct, y0=0, y1=1,
                              fillcolor="rgba(150,150,150,0.15)", line=dict(width=0), layer="below")]
    fig.update_layout(**lay)
    return _waiting(fig, "leave each fusion out in turn: press 'What each fusion buys'")


def refresh(target, source) -> None:
    """Make ``target`` (a FigureWidget) show ``source`` (a Figure), in one message.

    Traces are updated where the count and types match, so the plot keeps its
    zoom and the front-end does not rebuild it; otherwise they are replaced.
    """
    with target.batch_update():
        if len(target.data) == len(source.data) and all(a.type == b.type for a, b in zip(target.data, source.data)):
            for a, b in zip(target.data, source.data):
                a.update(b.to_plotly_json(), overwrite=True)
        else:
            target.data = []
            target.add_traces(list(source.data))
        target.layout.shapes = source.layout.shapes
        target.layout.annotations = source.layout.annotations
        target.update_layout(source.layout.to_plotly_json())
