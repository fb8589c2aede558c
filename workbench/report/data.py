"""The main job, headless: export → fusion timeline → benchmark → report data, and its summary.

Plain data out; :mod:`workbench.report.html` renders it. Each stage that
fails adds its one-line error to ``errors`` and the report still gets
written with what succeeded. :func:`summary` picks the few facts a user
wants first (what was fused, what it bought, what to ship) out of that data,
for the terminal and the report's first screen.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable

from .. import __version__
from ..config import BenchConfig, ExportConfig, FusionPlan
from ..errors import WorkbenchError
from ..export import export
from ..fusion import run_fusion
from ..fusion.catalog import BY_NAME
from ..measure.harness.bench import benchmark
from ..measure.harness.load import busy_words
from ..measure.tune.engine_line import entries_of_bench, entries_of_tune, faster_engine
from ..measure.tune.kernels import fused_loses
from ..measure.tune.run import tune as run_tune
from ..measure.variants import build_variants, default_variants
from ..measure.variants.build import summary_peers
from ..measure.variants.answers import builtin_answers_text, int8_report
from ..models import ModelSource, resolve
from ..ort.answer_policy import holds
from ..text import text_batches
from ..viz.layer_svg import layer_picture

Progress = Callable[[str, float], None]

#: Ops that are one attention node per layer after a fusion (or as the dynamo exporter writes them at opset 23).
ATTENTION_OPS = ("Attention", "MultiHeadAttention", "GroupQueryAttention")


def collect(source: ModelSource | str | None = None, export_cfg: ExportConfig | None = None,
            plan: FusionPlan | None = None, bench_cfg: BenchConfig | None = None, *,
            bench: bool = True, progress: Progress | None = None, text=None, tune: bool = False) -> dict:
    """Run the main job and return the report's data.

    Args:
        text: real text for answer-level parity: a ``workbench.text.TextBatches``
            or a list of sentences (tokenized here with the model's tokenizer).
            With it every fusion step gets ``task_parity`` on the text, and
            the benchmark cycles through the text's batches (a length mix, so
            no single hardware floor) and gives each variant ``task_parity``.
            ``data["text"]`` then describes the text (sentences, batches,
            bucket mix, padding share).
        tune: also run :func:`workbench.measure.tune.run.tune` (the recommendation against PyTorch,
            torch.compile and OpenVINO); the report then leads with it (``data["tune"]``).

    Raises:
        ModelSourceError: ``text`` given for a model without a tokenizer.
        ConfigError: no sentences.
    """
    progress = progress or (lambda stage, f: None)
    src = source if isinstance(source, ModelSource) else resolve(source)
    export_cfg = export_cfg or ExportConfig()
    plan = plan or FusionPlan()
    if text is not None and not hasattr(text, "batches"):
        text = text_batches(src, list(text))  # before the export: no tokenizer fails in a moment
    data: dict = {"version": __version__, "created": time.strftime("%Y-%m-%d %H:%M:%S"),
                  "model": src.describe(), "errors": []}
    if text is not None:
        data["text"] = text.describe()

    progress("export", 0.0)
    result = export(src, export_cfg, progress=lambda s, f: progress(f"export: {s}", 0.3 * f))
    data["export"] = result.to_dict()
    progress("fusion", 0.3)
    _fusion_stage(data, src, result.path, plan, text)
    if bench:
        progress("benchmark", 0.6)
        _bench_stage(data, src, export_cfg, plan, bench_cfg, text,
                     lambda s, f: progress(f"benchmark: {s}", 0.6 + 0.1 * f))
    if tune:
        progress("tune", 0.8)
        try:
            res = run_tune(src, text=text, cfg=bench_cfg or BenchConfig(runs=20), plan=plan,
                        exporter=export_cfg.exporter, attention=export_cfg.attention,
                        progress=lambda s, f: progress(f"tune: {s}", 0.8 + 0.2 * f))
            data["tune"] = res.to_json(drop=("paths", "ablation", "saved"))  # the report's tune saves nothing
        except WorkbenchError as e:
            data["errors"].append(f"tune: {e}")
    progress("done", 1.0)
    return data


def _fusion_stage(data: dict, src: ModelSource, path, plan: FusionPlan, text) -> None:
    """The fusion timeline, its parity (on the text too, after every step, when there is text) and the layer
    pictures, into ``data["fusion"]`` and ``data["layer_pictures"]``."""
    try:
        tl = run_fusion(path, plan, **src.timeline_args())
        if text is not None:  # the answers on the text after every step, as `workbench fuse --text` checks them
            tl.use_text(text)
            for i in range(1, len(tl.snapshots)):
                tl.check_parity(i)
        else:
            tl.check_parity(len(tl.snapshots) - 1)
        data["fusion"] = {**tl.to_dict(), "engine_note": tl.engine_note}
    except WorkbenchError as e:
        data["errors"].append(f"fusion: {e}")
        return
    try:  # one encoder layer before and after, as pictures (a report without them is still a report)

        data["layer_pictures"] = {"before": layer_picture(tl.snapshots[0], 0, title="layer 0, exported"),
                                  "after": layer_picture(tl.final, 0, title="layer 0, after the fusions")}
    except Exception as e:  # noqa: BLE001
        data["errors"].append(f"layer pictures: {e}")


def _bench_stage(data: dict, src: ModelSource, export_cfg: ExportConfig, plan: FusionPlan,
                 bench_cfg: BenchConfig | None, text, progress: Progress) -> None:
    """The standard variants timed in one worker, into ``data["bench"]``."""
    try:
        cfg = bench_cfg or BenchConfig(runs=20)
        if text is not None:  # the shape the sessions are sized for: the text's largest batch and bucket
            cfg = dataclasses.replace(cfg, batch=max(int(b["input_ids"].shape[0]) for b in text.batches),
                                      seq=max(text.lengths))
        names, _ = default_variants(src, cfg.provider)  # an ONNX file: no PyTorch
        # One quick peer where installed (OpenVINO at its default precision), so the summary can name a faster engine.
        names += [n for n in summary_peers(src, cfg.provider) if n not in names]
        # The fused variant is the graph the fusion table shows: same exporter, opset and plan.
        variants = build_variants(src, names, provider=cfg.provider, attention=export_cfg.attention,
                                     exporter=export_cfg.exporter, opset=export_cfg.opset, plan=plan,
                                     progress=progress)
        # One floor means one shape; a length mix has many, so with text there is none (as in `bench --text`).
        # Without text, int8's answers are still checked, on the built-in sentences (cheap).

        answers = builtin_answers_text(src) if text is None and cfg.provider == "cpu" else None
        res = benchmark(variants, cfg, text=text or answers, text_answers_only=text is None, floor=text is None)
        t = data.get("text") or {}
        shape = ({"text": f"{plural(t['sentences'], 'sentence')} in {plural(t['batches'], 'batch')}"}
                 if text is not None else {"batch": cfg.batch, "sequence": cfg.seq})
        # First: without a text it clears the variants' own task parity.
        checked = int8_report(res, text, random_weights=src.random_weights)
        data["bench"] = {**res.to_dict(samples=False), **checked,
                         "config": {"provider": cfg.provider, **shape, "threads": cfg.threads, "runs": cfg.runs}}
    except WorkbenchError as e:
        data["errors"].append(f"benchmark: {e}")
        return
    try:  # where the fused graph lost to the unfused one, ONNX Runtime's profiler names the kernels behind it
        data["bench"]["fused_loses"] = fused_loses(src, variants, res, cfg, text)
    except WorkbenchError as e:
        data["errors"].append(f"profile of the fused graph: {e}")


def plural(count: int, noun: str) -> str:
    """"1 batch", "2 batches", "8 sentences"."""
    return f"{count} {noun}" + ("" if count == 1 else ("es" if noun.endswith(("ch", "sh", "s", "x")) else "s"))


def not_applicable(step: dict) -> str:
    """Why a fusion step cannot apply to this model's graph, or "" when it can.

    ``step`` is a step's dict (``Snapshot.to_dict``, or a row with ``name``, ``skipped`` and ``changed``).
    A step applies unless the engine's own skip test found none of its anchor ops in the graph
    (``Snapshot.skipped``), or the catalog marks it as a pattern BERT encoders lack (``in_bert`` False), it
    changed nothing and its diagnostic says there was nothing to fuse (the steps without a skip test yet).
    A step that could apply but fused nothing applies: its reason is the "why not fused".
    """
    if step.get("skipped"):
        return str(step["skipped"])
    changed = step.get("changed")
    if changed is None:
        changed = bool(step.get("removed") or step.get("added"))
    if changed:
        return ""

    cat = BY_NAME.get(step.get("name") or step.get("step") or "")
    why = step.get("diagnostic") or ""
    if cat is not None and not cat.in_bert and (not why or why.startswith("nothing to fuse")):
        return why or f"{cat.title or cat.name}: a pattern this model does not contain"
    return ""  # e.g. a prerequisite switched off: the step could apply, its row says why it did not


def summary(data: dict) -> dict:
    """The few facts a user wants first, from :func:`collect`'s data (or the app's ``report_data``).

    Returns ``{"model", "export", "fusion", "latency", "int8", "recommended", "engine", "fused_loses", "busy",
    "errors"}``; a part whose
    stage did not run (or failed) is None. ``fusion``: engine, attention nodes, nodes before and after;
    ``latency``: the shape and, for the reference (PyTorch eager, else ONNX Runtime unfused), ``fused`` and
    ``int8`` where timed, the p50 and the speed-up against the reference; ``int8``: whether its
    answers on text held (``holds`` None when no text check ran), its task parity, its outputs' cosine, and
    whether the weights are random (then the check is no verdict); ``busy``: the sentence saying the machine was
    busy while the benchmark or the tune measured (:class:`~workbench.measure.harness.load.MachineLoad`), "" when quiet.
    """
    model = data.get("model") or {}
    exp = data.get("export") or {}
    settings = dict(exp.get("export") or {})
    if exp.get("opset"):  # the opset the file has (the settings say None for the exporter's default)
        settings["opset"] = exp["opset"]
    return {"model": model.get("label") or model.get("name") or "model",
            "export": settings or None,
            "fusion": _fusion_summary(data),
            "latency": _latency_summary(data),
            "int8": _int8_summary(data),
            "recommended": _recommended(data),
            "engine": _engine(data),
            "fused_loses": ((data.get("bench") or {}).get("fused_loses") or {}).get("words", ""),
            "busy": _busy(data),
            "errors": list(data.get("errors") or [])}


def _engine(data: dict) -> str:
    """One line when another engine kept the answers faster than ONNX Runtime's fastest here: from the tune's rows
    (its latency workload) when it ran, else from the benchmark's variants (with its quick peer); "" otherwise."""
    model = (data.get("model") or {}).get("name") or "MODEL"
    tune = data.get("tune") or {}
    random = bool((data.get("model") or {}).get("random_weights"))
    if tune.get("variants"):
        for w in tune.get("workloads") or ["latency"]:
            line = faster_engine(entries_of_tune(tune["variants"], w), tune.get("machine") or {}, model, w, random)
            if line:
                return line
        return ""
    bench = data.get("bench") or {}
    if (bench.get("config") or {}).get("provider", "cpu") != "cpu":
        return ""
    return faster_engine(entries_of_bench(bench.get("variants") or [], random), bench.get("machine") or {}, model,
                         random_weights=random)


def _busy(data: dict) -> str:
    """The busy sentence of the benchmark's or the tune's machine load ("" when both were quiet)."""
    return next((w for part in ("bench", "tune") if (w := busy_words((data.get(part) or {}).get("machine_load")))), "")


def _fusion_summary(data: dict) -> dict | None:
    fusion = data.get("fusion") or {}
    steps = [s for s in fusion.get("steps") or [] if (s.get("name") or s.get("step")) != "export"]
    if not steps:
        return None
    first = fusion.get("input") or next((s for s in fusion.get("steps") or [] if s.get("name") == "export"), None)
    before = (first or {}).get("nodes") or (data.get("export") or {}).get("nodes")
    final = fusion.get("final") or steps[-1]
    fused = final.get("fused") or {}
    attention = final.get("attention_nodes")
    if attention is None:
        attention = sum(int(fused.get(op, 0)) for op in ATTENTION_OPS)
    return {"engine": fusion.get("engine") or "", "attention_nodes": int(attention), "nodes_before": before,
            "nodes_after": final.get("nodes"), "fused": {op: n for op, n in fused.items() if n}}


def _latency_summary(data: dict) -> dict | None:
    bench = data.get("bench") or {}
    p50 = {v["name"]: v["p50_ms"] for v in bench.get("variants") or [] if v.get("p50_ms")}
    ref = "torch" if "torch" in p50 else ("unfused" if "unfused" in p50 else None)
    shown = {n: p50[n] for n in (ref, "fused", "int8") if n in p50}
    if not shown:
        return None
    speedup = {n: shown[ref] / ms for n, ms in shown.items() if ref and n != ref}
    return {"config": dict(bench.get("config") or {}), "p50_ms": shown, "reference": ref, "speedup": speedup}


def _int8_summary(data: dict) -> dict | None:
    tune_row = next((r for r in (data.get("tune") or {}).get("variants") or [] if r.get("name") == "int8"), None)
    row = next((v for v in (data.get("bench") or {}).get("variants") or [] if v.get("name") == "int8"), None)
    if row is None and tune_row is None:
        return None
    builtin = ((data.get("bench") or {}).get("int8_answers") or {}).get("int8")  # the built-in sentences' check
    tp = (row or {}).get("task_parity") or builtin or (tune_row or {}).get("task_parity")
    cosine = ((row or tune_row).get("parity") or {}).get("cosine")
    variants = (data.get("bench") or {}).get("variants") or []
    ref = next((v["name"] for v in variants if v.get("parity") is None), None)
    return {"holds": holds(tp) if tp else None, "task_parity": tp, "cosine": cosine, "reference": ref,
            "text": data.get("text") or ((data.get("tune") or {}).get("config") or {}).get("answers_text"),
            "random_weights": bool((data.get("model") or {}).get("random_weights"))}


def _recommended(data: dict) -> dict | None:
    """The tune's recommendation per workload: ``{workload: {"variant", "p50_ms" | "sentences_per_s", "batch",
    "why"}}``, None without a tune."""
    recs = (data.get("tune") or {}).get("recommended")
    if not recs:
        return None
    return {w: {k: rec.get(k) for k in ("variant", "p50_ms", "sentences_per_s", "batch")} | {"why": rec.get("why", "")}
            for w, rec in recs.items()}


__all__ = ["collect", "summary", "not_applicable", "plural", "ATTENTION_OPS"]
