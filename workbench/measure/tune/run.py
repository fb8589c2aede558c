"""``tune``: the fastest model that keeps its answers on this machine, for the workload it will serve.

One run: this machine's fusion plan (a short ablation → ``tuned``), the answer-guarded int8 models
(``int8-guarded`` for ONNX Runtime, ``openvino-int8-guarded`` through NNCF's accuracy control), the
calibrated static int8 models (``int8-static``, ``openvino-int8``: sentence-transformers' recipe),
then every variant measured twice:

* **interleaved** in one benchmark worker, thread spinning off (the workbench's own comparison,
  and where the answers come from): ``latency`` one sentence at a time, ``throughput`` the corpus in
  padded batches at each variant's own batch size (:mod:`.workload`, :mod:`.serve`);
* **as shipped**, each variant in a process of its own, in alternating time slices (:mod:`.slices`):
  the figures that decide, and each variant's peak resident memory.

The text is split into a search part (what the int8 recipes tune and calibrate on) and a check part;
the answers that decide are the check part's, at batch 1 and in the padded batches the variant is
served in, both against PyTorch eager (or the unfused export for an ONNX file). The recommendation
per workload is the fastest variant whose answers hold (:data:`workbench.ort.answer_policy.THRESHOLDS`), with
one sentence why. The result is typed (:class:`.tune_result.TuneResult`, ``to_json()`` for ``--json``);
:mod:`.tune_save` writes the deployable folder.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable

import onnx

from ...config import BenchConfig, ExportConfig, FusionPlan
from ...errors import BenchmarkError, WorkbenchError
from ...export import export
from ...models import ModelSource, resolve
from .. import variants as registry
from ..harness.bench import benchmark, throughput
from ..harness.load import LoadSampler
from ..variants.extra import guard_text
from ..variants.labels import VARIANT_LABELS as LABELS
from ..variants.split import one_at_a_time, split
from .result import SessionSpec, Skipped, TuneResult
from .rows import recommend, row, why
from .slices import shipped as as_shipped
from .tuned import TunedGraphs, fill_row, final_checks, machine_plans
from .workload import latency_text, pad_id_of, serve_job, workloads

#: What the tune measures, in display order (the recipes with ``tune`` set).
ORDER = registry.names(tune=True)
Progress = Callable[[str, float], None]


def _noop(stage: str, fraction: float) -> None:
    pass


def size_mb(v, export_path: Path) -> float | None:
    """The variant's model on disk: the ONNX file and its external data, an OpenVINO IR's .xml + .bin, or,
    for PyTorch, its fp32 weights (the export's size: the same tensors)."""
    opts = v.options or {}
    if opts.get("ir"):
        xml = Path(opts["ir"])
        return sum(p.stat().st_size for p in (xml, xml.with_suffix(".bin")) if p.is_file()) / 1e6
    path = Path(v.model) if v.model is not None and not isinstance(v.model, bytes) else Path(export_path)
    if path.is_dir():  # an engine's own model folder (CTranslate2's)
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e6
    try:
        proto = onnx.load(str(path), load_external_data=False)
    except Exception:  # noqa: BLE001 - a size is a courtesy, never a failure
        return None
    files = {e.value for t in proto.graph.initializer for e in t.external_data if e.key == "location"}
    return (path.stat().st_size + sum((path.parent / f).stat().st_size for f in files
                                      if (path.parent / f).is_file())) / 1e6


def _texts(src, text):
    """The split, the latency text (batch 1, both parts) and its parts; no tokenizer: ``(split, None, None)``."""
    sentences = None if text is None else list(getattr(text, "sentences", text))
    parts = split(sentences)
    try:
        lat, idx = latency_text(src, parts)
    except WorkbenchError:
        if text is not None:
            raise
        return parts, None, None
    return parts, lat, idx


def _build(src, exp, plan, cfg, names, exporter, attention, ablation_runs, lat, parts, loads, say):
    """This machine's checked plan per workload, the variants, and the tuned graph per workload."""
    sentences = list(parts.search) + list(parts.check)
    plans = (machine_plans(src, exp.path, plan, cfg, loads, sentences, lat is not None, ablation_runs, exporter,
                           attention, say) if "tuned" in names else {})
    search = one_at_a_time(src, parts.search) if lat is not None else guard_text(src)
    say("building the variants", 0.25)
    kw = dict(plan=plan, exporter=exporter, attention=attention)
    extra = {"text": search, "search_text": search, "threads": cfg.threads}
    vs = registry.build_variants(src, [n for n in names if n != "tuned"], **kw, extra=extra,
                                 progress=lambda s, f: say(s, 0.25 + 0.2 * f))
    tuned = {w: registry.build_variants(src, ["tuned"], **kw, extra={**extra, "tuned_plan": p.shipped()})[0]
             for w, p in plans.items()}
    return vs, plans, TunedGraphs.of(tuned, vs)


def _interleaved(vs, tg, cfg, ref, lat, idx, loads, src, answers, timeout, say) -> tuple:
    """The latency run (always: it gives the batch-1 answers) and the throughput run, interleaved, each with the
    tuned graph of its workload; then the final check of those graphs on these runs."""
    say("measuring: latency, interleaved", 0.45)
    runs = cfg.runs if "latency" in loads else max(3, min(cfg.runs, len(lat.batches) if lat else 3))
    lat_vs = tg.for_workload(vs, "latency")
    res = benchmark(lat_vs, dataclasses.replace(cfg, runs=runs), reference=ref, text=lat if lat is not None else answers,
                    text_answers_only=lat is None, text_parts=idx, floor=lat is None, timeout=timeout)
    thr, serve = {}, None
    if "throughput" in loads and lat is not None:
        say("measuring: throughput (batch-size search, then passes), interleaved", 0.55)
        serve = serve_job(lat, idx, pad_id_of(src))
        thr_vs = tg.for_workload(vs, "throughput")
        batch1 = {v.name: 1e3 / res[v.name].mean_ms for v in thr_vs  # the same sentences, one by one
                  if v.name in {s.name for s in res.variants} and res[v.name].mean_ms and v in lat_vs}
        thr, _ = throughput(thr_vs, cfg, serve, reference=ref, timeout=timeout, batch1=batch1)
    return res, thr, serve


def _measure(vs, tg, plans, cfg, ref, lat, idx, loads, src, answers, shipped, timeout, say) -> tuple:
    """Interleaved, the final check of the tuned graphs, then as shipped; and how busy the machine was over all
    of it (sampled until their workers are joined)."""
    sampler = LoadSampler(cfg.threads).start()
    res, thr, serve = _interleaved(vs, tg, cfg, ref, lat, idx, loads, src, answers, timeout, say)
    final_checks(tg, plans, {v.name: v.samples_ms for v in res.variants} if "latency" in loads else {},
                 {k: v.get("samples_ms") for k, v in thr.items()})
    ship = {}
    if shipped:
        say("measuring: as shipped, alternating time slices", 0.75)
        ship = as_shipped(tg.for_workload(vs, "latency"), cfg.threads, latency=lat if "latency" in loads else None,
                          serve=serve, batches={k: v.get("batch") for k, v in thr.items()}, runs=cfg.runs, passes=3,
                          slices=3, timeout=timeout or 900, progress=lambda s, f: say(s, 0.75 + 0.2 * f),
                          throughput_variants=tg.for_workload(vs, "throughput"))
    return res, thr, ship, sampler.stop().with_spread(res.variants)


def _recommend(rows: list, loads, res, random_weights: bool = False) -> dict:
    """The recommendation per workload, each with its one sentence why; none at all is an error."""
    recs = {}
    for w in loads:
        rec = recommend(rows, w)
        if rec is not None:
            rec.why = why(rec, rows, w, res.machine, res.rates, random_weights)
            recs[w] = rec
    if not recs:
        raise BenchmarkError("no variant kept its answers and was timed")
    return recs


def _variant_facts(vs, tg=None) -> dict:
    """The recipes' build reports (the int8 searches'), and each variant's model path and session (the tuned graph
    saved is the throughput workload's where it has one of its own, as the saved folder prefers that workload)."""
    by = {v.name: v for v in vs}
    if tg is not None:
        for w in ("throughput", "latency"):
            if w in tg.variants and not tg.dropped(w):
                by["tuned"] = tg.variants[w]
                break
        vs = list(by.values())
    return {**{r.report_key: r.report(by[r.name]) if r.name in by else None for r in registry.RECIPES if r.report_key},
            "paths": {v.name: str(v.model) for v in vs if v.model is not None and not isinstance(v.model, bytes)},
            "sessions": {v.name: SessionSpec(v.kind, v.level, list(v.disabled_optimizers), dict(v.options or {}))
                         for v in vs}}


def tune(model="bert-base", *, text=None, cfg: BenchConfig | None = None, plan=None, exporter: str = "torchscript",
         attention: str = "eager", workload: str | None = None, shipped: bool = True, ablation_runs: int = 12,
         progress: Progress | None = None, timeout: float | None = 3600) -> TuneResult:
    """Measure every variant and recommend, per workload, the fastest whose answers hold (see the module doc).

    Args:
        model: preset, real model, folder or .onnx file (no PyTorch variants then).
        text: sentences (a list, or TextBatches whose sentences are taken) to split, serve and check the
            answers on; None: the built-in sentences (latency then timed at ``cfg``'s one shape only
            for a model without a tokenizer).
        workload: "latency", "throughput" or "both" (default: both with a text, latency without).
        shipped: also measure each variant as shipped (the decisive figures and the peak memory).

    Returns:
        A :class:`.tune_result.TuneResult` (the recommendation per workload, one row per variant, what it
        ran on); its ``to_json()`` is ``--json``.
    """
    say = progress or _noop
    cfg, plan = cfg or BenchConfig(), plan or FusionPlan()
    src = model if isinstance(model, ModelSource) else resolve(model)
    loads = workloads(workload, text is not None)
    parts, lat, idx = _texts(src, text)
    say("export", 0.02)
    exp = export(src, ExportConfig(exporter=exporter, attention=attention))
    names, skipped = registry.available(ORDER, src)  # an engine not here, a model it cannot take: skipped, why
    vs, plans, tg = _build(src, exp, plan, cfg, names, exporter, attention, ablation_runs, lat, parts, loads, say)
    ref = "torch" if "torch" in names else "unfused"
    answers = guard_text(src) if lat is None else None
    res, thr, ship, machine_load = _measure(vs, tg, plans, cfg, ref, lat, idx, loads, src, answers, shipped,
                                            timeout, say)
    timed = {s.name for s in res.variants}
    rows = [row(v.name, res[v.name] if v.name in timed else None, thr.get(v.name), ship.get(v.name),
                size_mb(v, exp.path)) for v in vs]
    if plans:  # the tuned graph: its own figures where it has one, the same graph's figures where it is another's
        own = next(iter(tg.variants.values()), None)
        rows.append(row("tuned", res["tuned"] if "tuned" in timed else None, thr.get("tuned"), ship.get("tuned"),
                        size_mb(own, exp.path) if own is not None else None))
        fill_row(rows[-1], {r.name: r for r in rows}, tg, loads if lat is not None else ("latency",))
    rows.sort(key=lambda r: registry.order(r.name))
    recs = _recommend(rows, loads if lat is not None else ("latency",), res, bool(src.random_weights))
    say("done", 1.0)
    kind = next(iter(plans), None)  # the plan shown as `plan`: the first workload's, after the final check
    shown, first = (tg.shipped_plan(kind, plans[kind]), plans[kind]) if kind else (plan, None)
    return TuneResult(
        model=src.describe(), source=src.name, recommended=recs, workloads=list(recs), variants=rows,
        skipped=[Skipped(s["name"], s["why"]) for s in skipped], machine=res.machine, rates=res.rates,
        config=dict(res.config, answers_text=(lat or answers).describe(), split=parts.describe(),
                    timed_on="text" if lat is not None else f"batch {cfg.batch}, sequence {cfg.seq}"),
        split={"search": list(parts.search), "check": list(parts.check), "source": parts.source},
        reference=ref, plan=_plan_json(shown), ablation=first.ablation if first is not None else None,
        plans=tg.to_json(plans) if plans else None, threads=cfg.threads, shipped=bool(shipped),
        machine_load=machine_load.to_dict(), random_weights=bool(src.random_weights),
        **_variant_facts(vs, tg))


def _plan_json(p) -> dict:
    """A plan as ``--json`` has always written it; the unfused graph (no plan) as every fusion step off."""
    if p is None:
        return {"engine": "none", "disabled": ["every fusion step"], "enabled": []}
    return {"engine": p.engine, "disabled": sorted(p.disabled), "enabled": sorted(p.opted_in)}


__all__ = ["tune", "ORDER", "LABELS", "size_mb"]
