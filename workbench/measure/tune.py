"""``tune``: the fastest model that keeps its answers on this machine, against what a user would pick instead.

One run: this machine's fusion plan (a short ablation → ``tuned``), the answer-guarded int8 model
(``int8-guarded``), then every variant timed interleaved in one benchmark worker (PyTorch eager,
``torch-compile``, ONNX Runtime unfused, fused, tuned, int8, int8-guarded, OpenVINO f32 and at its
default precision where installed), each with its answers against PyTorch eager on the sentences.
The recommendation is the fastest variant whose answers hold (:data:`.guarded.THRESHOLDS`), with
one sentence why. Plain data in and out; :mod:`.tune_save` writes the deployable folder.

Timing: with ``text`` the timed runs cycle through the text's length mix; without, they run at the
configuration's one shape (seeded random inputs, batch 1 and sequence 128 by default) and the
answers are still checked on the built-in sentences.
"""

from __future__ import annotations

from typing import Callable

from ..config import BenchConfig

ORDER = ("torch", "torch-compile", "unfused", "fused", "tuned", "int8", "int8-guarded", "openvino-f32", "openvino")
PEERS = ("torch", "torch-compile", "openvino-f32", "openvino")
#: Display names (tables, plots, the model card).
LABELS = {"torch": "PyTorch eager", "torch-compile": "torch.compile (inductor)", "unfused": "ONNX Runtime unfused",
          "fused": "ONNX Runtime fused", "tuned": "ONNX Runtime, this machine's plan",
          "int8": "ONNX Runtime fused + int8", "int8-guarded": "ONNX Runtime fused + answer-guarded int8",
          "openvino-f32": "OpenVINO f32", "openvino": "OpenVINO, its default precision"}
Progress = Callable[[str, float], None]


def _noop(stage: str, fraction: float) -> None:
    pass


def _why(rec: dict, rows: list[dict], machine: dict, rates: dict) -> str:
    """One sentence: why the recommended variant wins here, from the measured figures and the instruction sets."""
    from .explain import INT8_UNITS

    isa = set(machine.get("isa") or ())
    peers = [r for r in rows if r["name"] in PEERS and r["p50_ms"]]
    best_peer = min(peers, key=lambda r: r["p50_ms"]) if peers else None
    vs = (f", {best_peer['p50_ms'] / rec['p50_ms']:.2f}x as fast as the fastest peer ({LABELS[best_peer['name']]}, "
          f"{best_peer['p50_ms']:.2f} ms)" if best_peer and best_peer["name"] != rec["name"] else "")
    head = f"{LABELS.get(rec['name'], rec['name'])} is the fastest variant whose answers hold ({rec['p50_ms']:.2f} ms{vs})"
    if rec["name"].startswith("int8"):
        units = [u for u in INT8_UNITS if u in isa]
        fp32, int8 = (rates.get("fp32") or {}).get("hot"), (rates.get("int8") or {}).get("hot")
        rate = f"int8 MatMuls ran {int8 / fp32:.1f}x the fp32 rate here" if fp32 and int8 else "int8 MatMuls beat fp32 here"
        unit = f"with {', '.join(units)}" if units else "even without VNNI or AMX (AVX2 only)"
        return f"{head}: {rate} {unit}, and the int8 model keeps the answers on the sentences."
    if rec["name"].startswith("openvino"):
        return f"{head}: OpenVINO's CPU kernels beat ONNX Runtime's on this processor at the same precision."
    if rec["name"] in ("fused", "tuned", "unfused"):
        return f"{head}: no int8 model kept the answers, so the fastest fp32 engine wins."
    return head + "."


def _rows(res, order: list[str]) -> list[dict]:
    from .guarded import holds

    out = []
    for v in res.variants:
        tp = v.task_parity
        out.append({"name": v.name, "label": LABELS.get(v.name, v.name), "p50_ms": v.p50_ms, "p90_ms": v.p90_ms,
                    "runs": v.runs, "task_parity": tp, "parity": v.parity, "holds": v.parity is None or holds(tp),
                    "floor_ms": v.floor_ms, "floor_ratio": v.floor_ratio, "floor_precision": v.floor_precision,
                    "session_providers": v.session_providers, "kind": v.kind})
    return sorted(out, key=lambda r: order.index(r["name"]) if r["name"] in order else 99)


def tune(model="bert-base", *, text=None, cfg: BenchConfig | None = None, plan=None, exporter: str = "torchscript",
         attention: str = "eager", ablation_runs: int = 12, progress: Progress | None = None,
         timeout: float | None = 3600) -> dict:
    """Measure every variant and recommend the fastest whose answers hold (see the module doc).

    Args:
        model: preset, real model, folder or .onnx file (no PyTorch variants then).
        text: TextBatches to time on and check the answers with (None: time at ``cfg``'s shape and check
            the answers on the built-in sentences, or on seeded random sequences for a model without a tokenizer).
        cfg: threads, runs, warm-up and (without text) the shape.
        plan: the starting fusion plan (default: engine "auto", default steps).

    Returns:
        ``{"model", "recommended": {"variant", "label", "p50_ms", "task_parity", "parity", "why"},
        "variants": [{"name", "label", "p50_ms", "task_parity", "holds", ...}], "skipped": [{"name", "why"}],
        "machine", "config", "plan", "ablation", "int8_search", "paths": {variant: model file}, "sessions"}``
    """
    from ..config import ExportConfig, FusionPlan
    from ..errors import BenchmarkError
    from ..export import export
    from ..models import ModelSource, resolve
    from .bench import benchmark
    from .guarded import search_report
    from .recipes import TORCH_SKIPPED
    from .recipes_extra import available, guard_text, machine_plan, variants as all_variants

    say = progress or _noop
    cfg = cfg or BenchConfig()
    plan = plan or FusionPlan()
    src = model if isinstance(model, ModelSource) else resolve(model)
    say("export", 0.02)
    exp = export(src, ExportConfig(exporter=exporter, attention=attention))
    answers = text if text is not None else guard_text(src)
    names, skipped = list(ORDER), []
    if src.kind == "onnx":
        names = [n for n in names if n not in ("torch", "torch-compile")]
        skipped += [{"name": n, "why": TORCH_SKIPPED} for n in ("torch", "torch-compile")]
    names, more = available(names)
    skipped += more
    say("this machine's plan (ablation)", 0.05)
    tuned_plan, ablation = machine_plan(src, exp.path, plan, threads=cfg.threads, runs=ablation_runs,
                                       exporter=exporter, attention=attention,
                                       progress=lambda s, f: say(f"ablation: {s}", 0.05 + 0.3 * f))
    say("building the variants", 0.4)
    variants = all_variants(src, names, plan=plan, exporter=exporter, attention=attention,
                                 progress=lambda s, f: say(s, 0.4 + 0.2 * f),
                                 extra={"text": answers, "threads": cfg.threads, "tuned_plan": tuned_plan})
    ref = "torch" if "torch" in names else "unfused"
    say("measuring", 0.6)
    res = benchmark(variants, cfg, reference=ref, text=answers, text_answers_only=text is None,
                    floor=text is None, timeout=timeout)
    rows = _rows(res, list(ORDER))
    ok = [r for r in rows if r["holds"] and r["p50_ms"]]
    if not ok:
        raise BenchmarkError("no variant was timed")
    rec = min(ok, key=lambda r: r["p50_ms"])
    paths = {v.name: str(v.model) for v in variants if v.model is not None and not isinstance(v.model, bytes)}
    sessions = {v.name: {"kind": v.kind, "level": v.level, "disabled_optimizers": list(v.disabled_optimizers),
                         "options": dict(v.options or {})} for v in variants}
    guarded = next((v for v in variants if v.name == "int8-guarded"), None)
    cfg_d = dict(res.config)
    cfg_d["answers_text"] = answers.describe()
    cfg_d["timed_on"] = "text" if text is not None else f"batch {cfg.batch}, sequence {cfg.seq}"
    say("done", 1.0)
    return {"model": src.describe(), "source": src.name,
            "recommended": {"variant": rec["name"], "label": rec["label"], "p50_ms": rec["p50_ms"],
                            "task_parity": rec["task_parity"], "parity": rec["parity"],
                            "why": _why(rec, rows, res.machine, res.rates)},
            "variants": rows, "skipped": skipped, "machine": res.machine, "config": cfg_d, "rates": res.rates,
            "reference": ref, "plan": {"engine": tuned_plan.engine, "disabled": sorted(tuned_plan.disabled),
                                       "enabled": sorted(tuned_plan.opted_in)},
            "ablation": ablation, "int8_search": search_report(guarded.model) if guarded is not None else None,
            "paths": paths, "sessions": sessions, "threads": cfg.threads}


def peers_line(result: dict) -> str:
    """How the recommendation compares with each peer measured in the same run."""
    rec = result["recommended"]
    parts = [f"{r['label']} {r['p50_ms'] / rec['p50_ms']:.2f}x slower" for r in result["variants"]
             if r["name"] in PEERS and r["p50_ms"] and r["name"] != rec["variant"]]
    return "; ".join(parts) or "no peer measured"


__all__ = ["tune", "ORDER", "PEERS", "LABELS", "peers_line"]
