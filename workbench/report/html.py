"""The HTML report: one self-contained file a person can open offline.

Pure rendering: a plain dict in (see :func:`workbench.report.data.collect`), an
HTML file out, written atomically and never over an existing file.
"""

from __future__ import annotations

import html
import os
from pathlib import Path

from ..cache.atomic import atomic_write_text
from ..errors import WorkbenchError
from ..graph.summary import FUSED_OPS
from ..measure.harness.explain import explain
from ..measure.harness.load import busy_words
from ..measure.tune.rows import answers_note
from ..measure.variants import is_quantized
from ..measure.variants.labels import variant_label
from ..measure.variants.labels import workload_figure as fig
from ..ort.answer_policy import TaskParity, random_weights_words
from ..ort.assignment import counts_words
from ..ort.machine import machine_line
from ..viz.summary import CSS as SUMMARY_CSS
from ..viz.summary import ENGINE_TITLES, export_words, ms, sci, summary_box, task_parity_words
from .data import not_applicable, plural, summary

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:1100px;color:#222}
h1{font-size:1.6rem}h2{font-size:1.2rem;margin-top:2rem;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.5rem 0;font-size:.9rem}td,th{border:1px solid #ddd;padding:.25rem .6rem;text-align:left}
th{background:#f4f4f4}td.n{text-align:right}.note{color:#666;font-size:.85rem}
table.kv td{text-align:left}details{margin:.4rem 0}details summary{cursor:pointer;color:#444}
.ok{color:#1a7f37;font-weight:600}.bad{color:#cf222e;font-weight:600}.warn{background:#fff8c5;padding:.4rem .6rem}
"""


def _e(x) -> str:
    return html.escape(str(x))


def _table(rows: list[dict], columns: list[str] | None = None) -> str:
    if not rows:
        return "<p class='note'>(nothing)</p>"
    cols = columns or list(rows[0].keys())
    head = "".join(f"<th>{_e(c)}</th>" for c in cols)
    body = []
    for r in rows:
        cells = []
        for c in cols:
            v = r.get(c, "")
            if isinstance(v, _Cell):
                cells.append(f"<td class='{v.css}'>{_e(v)}</td>" if v.css else f"<td>{_e(v)}</td>")
            elif isinstance(v, bool) and c == "parity":
                cells.append(f"<td class='{'ok' if v else 'bad'}'>{'ok' if v else 'NOT OK'}</td>")
            elif isinstance(v, bool):
                cells.append(f"<td>{'yes' if v else 'no'}</td>")
            elif isinstance(v, float):
                cells.append(f"<td class='n'>{v:.4g}</td>")
            elif isinstance(v, int):
                cells.append(f"<td class='n'>{v}</td>")
            else:
                cells.append(f"<td>{_e(v if v is not None else '')}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


#: What each answer-level check compares, in words (``ort.task_parity`` kinds).
TASK_KINDS = {
    "embedding": "sentence embeddings: each sentence's nearest other sentence (top-1 agreement) and the "
                 "Spearman correlation of all pairwise similarities",
    "masked_lm": "masked language model: the top-1 word and the top-5 words at the masked positions",
    "classification": "classifier: the label of each answer, and the largest change of any class probability",
}
_KIND_SHORT = {"embedding": "sentence embeddings", "masked_lm": "masked LM", "classification": "classification"}


def _answers_changed(tp: dict | None) -> bool:
    """True when some answer differs from the reference's (top-1 word, nearest sentence or label)."""
    return bool(tp) and TaskParity.of(tp).changed()


class _Cell(str):
    """A pre-formatted table cell with a CSS class."""

    css = ""


def _task_cell(tp: dict | None, empty: str = "", judged: bool = True) -> "_Cell":
    """A task parity in a cell, red where answers changed and green where they held (uncoloured when not
    ``judged``: random weights' answers mean nothing)."""
    c = _Cell(task_parity_words(tp) or empty)
    c.css = "" if not judged else "bad" if _answers_changed(tp) else ("ok" if tp else "")
    return c


def _task_column(items: list[dict]) -> str | None:
    """The column header for the task parity of ``items`` (kind named), or None when none has any."""
    kinds = [TaskParity.of(it["task_parity"]).kind for it in items if it.get("task_parity")]
    if not kinds:
        return None
    return f"answers on the text ({_KIND_SHORT.get(kinds[0], kinds[0])})"


def _text_note(data: dict, items: list[dict], reference: str) -> str:
    kinds = [TaskParity.of(it["task_parity"]).kind for it in items if it.get("task_parity")]
    t = data.get("text") or {}
    where = (f"{plural(t['sentences'], 'sentence')} in {plural(t['batches'], 'padded batch')}" if t.get("sentences")
             else "the text")
    return (f"<p class='note'>Task parity on {_e(where)}, against {_e(reference)}: "
            f"{_e(TASK_KINDS.get(kinds[0], kinds[0]))}. 100% means every answer is the same.</p>")


def words(v) -> str:
    """A value as words for a table cell: no braces, quotes or brackets (``{"a": 1}`` → "a 1")."""
    if isinstance(v, dict):
        return "; ".join(f"{k} {words(x)}" for k, x in v.items() if x not in (None, "", [], {})) or "none"
    if isinstance(v, (list, tuple)):
        return ", ".join(words(x) for x in v) or "none"
    if isinstance(v, bool):
        return "yes" if v else "no"
    return "" if v is None else str(v)


def _kv(d: dict) -> str:
    return _table([{"field": k.replace("_", " "), "value": words(v) if isinstance(v, (dict, list, tuple, bool)) else v}
                   for k, v in d.items()])


def _int8_notes(bench: dict, random_weights: bool = False) -> list[str]:
    """int8's answers on the built-in sentences (checked wherever int8 is timed), and a warning where they break;
    with random weights, what the check would mean instead of a warning."""
    ref = variant_label((bench.get("variants") or [{"name": "the first variant"}])[0]["name"])
    out = [f"<p class='note'>{_e(variant_label(name))}'s answers on the built-in sentences, against {_e(ref)}: "
           f"{_e(task_parity_words(tp))}</p>" for name, tp in (bench.get("int8_answers") or {}).items()]
    kinds = [TaskParity.of(tp).kind for tp in (bench.get("int8_answers") or {}).values() if tp]
    kinds += [TaskParity.of(v["task_parity"]).kind for v in bench.get("variants") or () if is_quantized(v["name"])
              and v.get("task_parity")]
    if random_weights and kinds:
        out.append(f"<p class='note'>{_e(random_weights_words(kinds[0]))}</p>")
    return out + [f"<p class='note bad'>warning: {_e(line)}</p>" for line in bench.get("int8_flags") or ()]


def tune_section(t: dict) -> str:
    """The tune's recommendation first, then every variant against PyTorch with its answers, and the peers skipped."""
    base = next((r["p50_ms"] for r in t["variants"] if r["name"] == "torch"), None)
    rand = bool(t.get("random_weights"))  # the answers mean nothing: no verdict (answers_note says so once)
    rows = [{"variant": variant_label(r["name"]), "p50 ms": r["p50_ms"], "p90 ms": r.get("p90_ms"),
             "vs PyTorch": f"{base / r['p50_ms']:.2f}x" if base and r["p50_ms"] else "",
             "sentences/s": r.get("sentences_per_s"), "batch": r.get("batch"),
             "answers": _task_cell(r.get("task_parity"), "reference" if r.get("parity") is None else "", not rand),
             "answers hold": "-" if rand and r.get("parity") is not None else "yes" if r["holds"] else "no"}
            for r in t["variants"]]
    s = [f"<h2>Recommended here: {_e(variant_label(rec['variant']))} for {w}, "
         f"{_e(fig(w, rec.get('p50_ms' if w == 'latency' else 'sentences_per_s')))}</h2><p>{_e(rec['why'])}</p>"
         for w, rec in t["recommended"].items()] + [_table(rows)]
    s += [f"<p class='warn'>{_e(w)}</p>" for w in [busy_words(t.get("machine_load"))] if w]
    s += [f"<p class='note'>{_e(n[0].upper() + n[1:])}.</p>" for n in [answers_note(t)] if n]
    for sk in t.get("skipped") or ():
        s.append(f"<p class='note'>{_e(variant_label(sk['name']))} not measured: {_e(sk['why'])}</p>")
    g = t.get("int8_search")
    if g:
        kept = g.get("kept_fp32") or []
        s.append(f"<p class='note'>answer-guarded int8: {_e(g['chosen'])}; {len(kept)} MatMul(s) kept in fp32 "
                 f"({g['kept_fp32_share']:.0%} of the weights); {len(g['candidates'])} candidates tried.</p>")
    if t.get("saved"):
        s.append(f"<p class='note'>saved to {_e(t['saved']['dir'])} (model.onnx, tokenizer, README.md)</p>")
    return "\n".join(s)


def _figures(data: dict) -> str:
    """Latency and node-count charts, inline (no network needed to view)."""
    try:
        import plotly.graph_objects as go
        import plotly.io as pio
    except ImportError:
        return ""

    parts = []
    steps = [st for st in (data.get("fusion") or {}).get("steps") or [] if not not_applicable(st)]
    if steps:
        fig = go.Figure(go.Bar(x=[s["name"] for s in steps], y=[s["nodes"] for s in steps], marker_color="#4C72B0"))
        fig.update_layout(title="Node count after each fusion step", height=340, margin=dict(l=40, r=10, t=40, b=90))
        parts.append(fig)
    variants = (data.get("bench") or {}).get("variants") or []
    if variants:
        fig = go.Figure()
        for key, color in (("p50_ms", "#4C72B0"), ("p90_ms", "#DD8452"), ("p99_ms", "#C44E52")):
            fig.add_bar(name=key.split("_")[0], x=[variant_label(v["name"]) for v in variants],
                        y=[v.get(key) for v in variants],
                        marker_color=color)
        floor = data["bench"].get("floor_ms")
        if floor:
            fig.add_hline(y=floor, line_dash="dash", annotation_text=f"hardware floor {floor:.1f} ms")
        fig.update_layout(title="Latency per variant (ms, lower is better)", barmode="group", height=380,
                          margin=dict(l=40, r=10, t=40, b=40))
        parts.append(fig)
    out = []
    for i, fig in enumerate(parts):
        out.append(pio.to_html(fig, full_html=False, include_plotlyjs="inline" if i == 0 else False))
    return "\n".join(out)


def render(data: dict) -> str:
    """The report's HTML: the summary first (the facts beside one layer before and after), then the
    recommendation of a tune, latency, the fusion steps, model and export settings, the machine, the ablation."""
    model = data.get("model", {})
    title = f"BERT Fusion Workbench report: {model.get('label', model.get('name', 'model'))}"
    s = [f"<!doctype html><html><head><meta charset='utf-8'><title>{_e(title)}</title>"
         f"<style>{_CSS}{SUMMARY_CSS}</style></head><body>",
         f"<h1>{_e(title)}</h1>", f"<p class='note'>generated {_e(data.get('created', ''))}"
         f" by workbench {_e(data.get('version', ''))}</p>",
         summary_box(summary(data), data.get("layer_pictures"), bool(model.get("random_weights")))]
    if data.get("tune"):
        s.append(tune_section(data["tune"]))
    if data.get("bench"):
        s.append(_latency_section(data))
    if data.get("fusion"):
        s.append(_fusion_section(data))
    s.append(_settings_section(data))
    if (data.get("bench") or {}).get("machine"):
        s.append(_machine_section(data["bench"]["machine"]))
    if data.get("plans"):  # the app's "what each fusion buys", per workload, each with its check
        s += [_ablation_section(p["ablation"], p["check"], p.get("kernels")) for p in data["plans"].values()]
    elif data.get("ablation"):
        s.append(_ablation_section(data["ablation"]))
    s.append(_figures(data))
    s.append("</body></html>")
    return "\n".join(s)


def _latency_section(data: dict) -> str:
    bench = data["bench"]
    s = ["<h2>Latency</h2>"]
    cfg = bench.get("config", {})
    if cfg:
        s.append(f"<p>{_e(', '.join(f'{k} {words(v)}' for k, v in cfg.items() if v is not None))}; variants "
                 "measured interleaved in one worker process, thread spinning off.</p>")
    rows = []
    variants = bench.get("variants", [])
    task_col = _task_column(variants)
    for v in variants:
        par = v.get("parity") or {}
        row = {"variant": variant_label(v["name"]), "p50 ms": v.get("p50_ms"), "p90 ms": v.get("p90_ms"),
               "p99 ms": v.get("p99_ms"), "runs": v.get("runs"), "floor": v.get("floor_precision"),
               "x floor": v.get("floor_ratio"), "x MatMuls alone": v.get("bound_ratio"),
               "max abs diff": sci(par["max_abs_diff"]) if par.get("max_abs_diff") is not None else "",
               "cosine": f"{par['cosine']:.6f}" if par.get("cosine") is not None else "",
               "nodes per provider": counts_words((v.get("assignment") or {}).get("counts"))}
        if task_col:
            row[task_col] = _task_cell(v.get("task_parity"), "reference" if not par else "",
                                       judged=not (data.get("model") or {}).get("random_weights"))
        rows.append(row)
    s.append(_table(_drop_empty_columns(rows)))
    if task_col:
        ref = next((variant_label(v["name"]) for v in variants if not v.get("parity")), "the first variant")
        s.append(_text_note(data, variants, ref))
    s += _int8_notes(bench, bool((data.get("model") or {}).get("random_weights")))
    s += [f"<p class='note'>{_e(variant_label(v['name']))}: {_e(f['words'])}</p>"
          for v in variants for f in (v.get("assignment") or {}).get("fallbacks") or ()]
    if busy_words(bench.get("machine_load")):
        s.append(f"<p class='warn'>{_e(busy_words(bench['machine_load']))}</p>")
    if bench.get("floor_ms"):
        bound = (f"; the MatMuls alone with weights read from memory: {ms(bench['matmul_bound_ms'])} "
                 f"(what no fusion can remove)") if bench.get("matmul_bound_ms") else ""
        s.append(f"<p class='note'>hardware floor: {ms(bench['floor_ms'])} (model FLOPs / measured "
                 f"matrix-multiply rate of this machine){bound}</p>")

    for line in explain(bench.get("rates") or {}, bench.get("machine") or {}):
        s.append(f"<p class='note'>{_e(line)}</p>")
    return "\n".join(s)


def _fusion_section(data: dict) -> str:
    """The steps that apply, each with what it fused or why not; the steps that cannot apply folded in one line."""
    fusion = data["fusion"]
    s = [f"<h2>Fusion timeline ({_e(ENGINE_TITLES.get(fusion.get('engine'), fusion.get('engine')))})</h2>"]
    if fusion.get("engine_note"):
        s.append(f"<p>{_e(fusion['engine_note'])}</p>")
    steps = [st for st in fusion.get("steps", []) if st.get("name") != "export"]
    applies = [st for st in steps if not not_applicable(st)]
    task_col = _task_column(steps)
    rows = []
    for st in applies:
        par = st.get("parity") or {}
        here = {op: n for op, n in (st.get("fused_here") or {}).items() if n}
        here = {op: n for op, n in here.items() if op in FUSED_OPS} or here  # not the Cast a fusion adds for its mask
        row = {"step": st["name"], "nodes": st["nodes"], "fused here": ", ".join(f"{k} {v}" for k, v in here.items()),
               "seconds": f"{st['elapsed_s']:.2f}" if st.get("elapsed_s") is not None else "",
               "parity": par.get("ok") if par else ""}
        if task_col:
            row[task_col] = _task_cell(st.get("task_parity"))
        row["why not fused"] = st.get("diagnostic") or ""
        rows.append(row)
    s.append(_table(rows))
    na = [st for st in steps if not_applicable(st)]
    if na:
        items = "".join(f"<tr><td>{_e(st['name'])}</td><td>{_e(not_applicable(st))}</td></tr>" for st in na)
        s.append(f"<details class='na'><summary>not applicable to this model ({len(na)})</summary>"
                 f"<table><tr><th>step</th><th>why it cannot apply</th></tr>{items}</table></details>")
    if task_col:
        s.append(_text_note(data, steps, "the unfused export"))
    return "\n".join(s)


def _settings_section(data: dict) -> str:
    """The model and its export in words: rows with nothing to say are left out."""
    m, ex = data.get("model") or {}, data.get("export") or {}
    rows = [("model", m.get("label") or m.get("name")),
            ("architecture", ", ".join(x for x in (
                m.get("model_type"), f"{m['layers']} layers" if m.get("layers") else "",
                f"hidden size {m['hidden']}" if m.get("hidden") else "", f"{m['heads']} heads" if m.get("heads") else "")
                if x)),
            ("task", m.get("task")), ("folder", m.get("path")),
            ("untested", f"{m['untested']}" if m.get("untested") else ""), ("notes", "; ".join(m.get("notes") or []))]
    if ex:
        cfg = {**(ex.get("export") or {}), "opset": ex.get("opset")}
        extra = ["dynamic batch and sequence" if cfg.get("dynamic_axes") else "fixed shapes"]
        if cfg.get("seed") is not None and m.get("random_weights"):
            extra.append(f"weights seeded with {cfg['seed']}")
        par = ex.get("parity") or {}
        rows += [("export", f"{export_words(cfg)}, {', '.join(extra)}"),
                 ("exported graph", f"{ex.get('nodes')} nodes; " + ("read from the cache" if ex.get("cached")
                                                                 else f"exported in {ex.get('export_s', 0):.1f} s")),
                 ("against PyTorch", (f"{'same outputs' if par.get('ok') else 'DIFFERENT outputs'}: max abs diff "
                                      f"{sci(par.get('max_abs_diff'))}, cosine {par.get('cosine', 0):.6f}")
                  if par else ""),
                 ("file", ex.get("path"))]
    body = "".join(f"<tr><td>{_e(k)}</td><td>{_e(v)}</td></tr>" for k, v in rows if v not in (None, "", [], {}))
    return f"<h2>Model</h2><table class='kv'>{body}</table>"


def _machine_section(machine: dict) -> str:
    return (f"<h2>Machine</h2><p>{_e(machine_line(machine))}</p><details><summary>every detail</summary>"
            f"{_kv({k: v for k, v in machine.items() if v not in (None, '', [], {})})}</details>")


def _ablation_section(ab: dict, check: dict | None = None, kernels: list | None = None) -> str:
    on = (ab.get("workload") or {}).get("words")
    s = [f"<h2>What each fusion buys here{_e(': ' + on) if on else ''}</h2>",
         f"<p>The full plan (p50 {ab['full_p50_ms']:.2f} ms) against the plan without each step, interleaved, "
         f"the full plan measured twice: noise band ±{ab['noise_pct']:.1f}%.</p>",
         _table([{"step left out": r["step"],
                  "what it fuses": ", ".join(f"{k} {v}" for k, v in sorted(r["fused_here"].items())),
                  "p50 without (ms)": r["p50_without_ms"], "saves (ms)": r["saves_ms"],
                  "saves (%)": r["saves_pct"], "verdict": r["verdict"]} for r in ab.get("rows", [])])]
    off = ab.get("tuned_plan", {}).get("disabled") or []
    s.append(f"<p class='note'>the ablation's plan for this machine: "
             f"{_e('switch off ' + ', '.join(off)) if off else 'the full plan'}</p>")
    if check:
        s.append(f"<p class='note'>checked: {_e(check['words'])}</p>")
    s += [f"<p class='note'>why, profiled: {_e(k['words'])}</p>" for k in kernels or ()]
    return "\n".join(s)


def _drop_empty_columns(rows: list[dict]) -> list[dict]:
    """The rows without the columns that are empty in every row (a length mix has no floor)."""
    keep = [c for c in (rows[0] if rows else {}) if any(r.get(c) not in (None, "") for r in rows)]
    return [{c: r.get(c) for c in keep} for r in rows]


def write_report(data: dict, path: str | os.PathLike) -> Path:
    """Render ``data`` and write it to ``path`` (atomic; refuses to overwrite)."""
    dest = Path(path).expanduser()
    if dest.exists():
        raise WorkbenchError(f"{dest} already exists; the workbench never overwrites a file")
    return atomic_write_text(dest, render(data))
