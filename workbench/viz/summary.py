"""The report's summary in words: the terminal's last lines after ``workbench report`` and the box on the
HTML report's first screen. Both come from :func:`workbench.report.data.summary` (plain facts) and say the same.
"""

from __future__ import annotations

import html

from ..measure.variants.labels import variant_label
from ..ort.answer_policy import TaskParity, random_weights_words, words

#: What each fusion engine is called on screen.
ENGINE_TITLES = {"ort": "ORT transformers optimizer", "onnxscript": "onnxscript rules"}
#: How each exporter is called on screen.
EXPORTER_TITLES = {"torchscript": "TorchScript", "dynamo": "dynamo"}


def ms(x: float | None) -> str:
    """Milliseconds with three or four figures: "135.6 ms", "1.18 ms"."""
    if x is None:
        return "?"
    return f"{x:.1f} ms" if x >= 100 else f"{x:.2f} ms" if x >= 1 else f"{x:.3f} ms"


def sci(x: float | None) -> str:
    """A small difference in two figures: 3.084540367126465e-06 → "3.1e-6"."""
    if x is None:
        return "?"
    if x == 0:
        return "0"
    m, e = f"{x:.1e}".split("e")
    return f"{m}e{int(e)}"


def export_words(exp: dict | None) -> str:
    """"TorchScript export, opset 17, eager attention"."""
    if not exp:
        return ""
    parts = [f"{EXPORTER_TITLES.get(exp.get('exporter'), exp.get('exporter') or '?')} export"]
    if exp.get("opset"):
        parts.append(f"opset {exp['opset']}")
    if exp.get("attention"):
        parts.append(f"{exp['attention']} attention")
    return ", ".join(parts)


def facts(s: dict) -> list[tuple[str, str]]:
    """(title, words) per fact of a :func:`workbench.report.data.summary`, in the order a user reads them."""
    out = [("model", s["model"] + (f", {export_words(s['export'])}" if s.get("export") else ""))]
    f = s.get("fusion")
    if f:
        ops = ", ".join(f"{op} {n}" for op, n in sorted(f["fused"].items(), key=lambda kv: -kv[1])[:5])
        engine = ENGINE_TITLES.get(f["engine"], f["engine"])
        out.append(("Fused", f"{f['attention_nodes']} attention node{'s' if f['attention_nodes'] != 1 else ''}, "
                             f"{f['nodes_before']} → {f['nodes_after']} nodes"
                    + (f", by the {engine}" if engine else "") + (f" ({ops})" if ops else "")))
    lat = s.get("latency")
    if lat:
        parts = []
        for name, t in lat["p50_ms"].items():
            x = lat["speedup"].get(name)
            parts.append(f"{variant_label(name)} {ms(t)}" + (f" ({faster(x)})" if x else ""))
        out.append((f"Latency (p50, {_shape(lat['config'])})", "; ".join(parts)))
    if s.get("fused_loses"):
        out.append(("Fusion loses here", s["fused_loses"]))
    if s.get("engine"):
        out.append(("Faster engine here", s["engine"]))
    if s.get("busy"):
        out.append(("warning", s["busy"]))
    if s.get("int8"):
        out.append(("int8 answers", int8_words(s["int8"])))
    for w, rec in (s.get("recommended") or {}).items():
        fig = (f"{rec['sentences_per_s']:,.0f} sentences/s" if rec.get("sentences_per_s") is not None
               else ms(rec["p50_ms"]) if rec.get("p50_ms") is not None else "")
        at = f" at batch {rec['batch']}" if rec.get("batch") and rec["batch"] != 1 else ""
        out.append((f"Recommended for {w}", f"{variant_label(rec['variant'])}" + (f", {fig}{at}" if fig else "")))
    return out


def faster(x: float) -> str:
    """A speed-up in words: "1.59x faster", "1.25x slower"."""
    return f"{x:.2f}x faster" if x >= 1 else f"{1 / x:.2f}x slower"


def _shape(cfg: dict) -> str:
    parts = [f"{cfg['text']}" if cfg.get("text") else ""]
    if not cfg.get("text") and cfg.get("batch"):
        parts.append(f"batch {cfg['batch']}, sequence {cfg.get('sequence', '?')}")
    if cfg.get("threads"):
        parts.append(f"{cfg['threads']} thread{'s' if cfg['threads'] != 1 else ''}")
    return ", ".join(p for p in parts if p)


def task_parity_words(tp) -> str:
    """One task parity check (``Snapshot.task_parity`` / ``VariantStats.task_parity``) in words: the one
    formatter, :meth:`workbench.ort.answer_policy.TaskParity.words` ("top-1 99.6%, Spearman 0.9990"); "" for None."""
    return words(tp)


def answers_verdict(tp) -> bool | None:
    """Whether a check's answers hold by the one policy (``workbench.ort.answer_policy``); None when the text
    was too small to tell, or there was no check."""
    t = TaskParity.of(tp) if tp else None
    return None if t is None or t.too_small else t.holds()


def answers_gloss(tp: dict) -> str:
    """What a task parity measured, in words a newcomer reads once: "the nearest other sentence is the same for
    94.8% of them; their similarities rank alike at Spearman 0.9863" (:meth:`TaskParity.gloss`)."""
    return TaskParity.of(tp).gloss()


def int8_words(i: dict) -> str:
    """What int8's answer check measured and found, or what is known without one; with random weights, what
    the check would mean instead of a verdict."""
    tp = i.get("task_parity")
    if tp:
        n = tp.get("sentences") or (i.get("text") or {}).get("sentences")
        where = f"checked on {n} sentences" if n else "checked on the text"
        if i.get("random_weights"):
            return f"{where}: {answers_gloss(tp)}; {random_weights_words(tp.get('kind'))}"
        verdict = "int8 keeps the answers" if i.get("holds") else "int8 changes the answers"
        return f"{where}: {answers_gloss(tp)}: {verdict}"
    cos = i.get("cosine")
    ref = variant_label(i["reference"]) if i.get("reference") else "the reference"
    known = f" (its outputs' cosine to {ref}: {cos:.5f})" if cos is not None else ""
    # Without a text, int8 is checked on the built-in sentences whenever the model has a tokenizer here (a
    # BERT-vocabulary preset borrows the packaged real model's, which the [real] extra installs).
    return f"not checked on sentences: no tokenizer for this model here{known}; the [real] extra or a model folder " \
           f"with its tokenizer gives one"


def summary_lines(s: dict, path=None) -> list[str]:
    """The terminal's summary: one line per fact, then the report's path."""
    lines = [f"{title}: {text}" if title != "model" else text for title, text in facts(s)]
    lines += [f"error: {e}" for e in s.get("errors") or ()]
    if path:
        lines.append(f"report: {path}")
    return lines


def summary_box(s: dict, pictures: dict | None = None, random_weights: bool = False) -> str:
    """The HTML report's first screen: the facts beside one encoder layer before and after the fusions."""
    e = html.escape
    items = facts(s)
    lead = f"<p class='lead'>{e(items[0][1])}</p>"
    rows = "".join(f"<li><b>{e(t)}</b>: {e(x)}</li>" for t, x in items[1:])
    why = "".join(f"<p class='note'>{e(w)}: {e(r['why'])}</p>" for w, r in (s.get("recommended") or {}).items()
                  if r.get("why"))
    warn = ("<p class='warn'>Random weights: the fusions and the latency are the architecture's; "
            "its outputs mean nothing.</p>") if random_weights else ""
    errors = "".join(f"<p class='bad'>{e(x)}</p>" for x in s.get("errors") or ())
    pics = pictures or {}
    side = ""
    if pics.get("before") and pics.get("after"):  # SVG the workbench drew itself (labels escaped)
        side = (f"<div class='pics'><div class='cap'>One encoder layer before and after the fusions</div>"
                f"<div class='pair'>{pics['before']}{pics['after']}</div></div>")
    return (f"<div class='summary'><div class='facts'>{lead}<ul>{rows}</ul>{why}{warn}{errors}</div>{side}</div>")


CSS = """
.summary{display:flex;flex-wrap:wrap;gap:16px;align-items:flex-start;border:1px solid #d0d7de;border-radius:6px;
 padding:12px 16px;background:#f6f8fa}.summary .facts{flex:1 1 380px;min-width:320px}
.summary .lead{font-size:1.1rem;font-weight:600;margin:.2rem 0 .5rem}.summary ul{margin:0;padding-left:1.1rem}
.summary li{margin:.25rem 0}.summary .pics{flex:0 1 852px}
.summary .pair{display:flex;flex-wrap:wrap;gap:6px;align-items:flex-start}
.summary .pair svg{flex:none;background:#fff;border:1px solid #e1e4e8}
.summary .cap{font-size:.85rem;color:#555;margin-bottom:4px}
"""

__all__ = ["ENGINE_TITLES", "EXPORTER_TITLES", "facts", "summary_lines", "summary_box", "ms", "sci", "export_words",
           "int8_words", "answers_gloss", "faster", "task_parity_words", "CSS"]
