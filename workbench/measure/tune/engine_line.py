"""The fastest engine named where it wins: one line when another engine kept the answers faster than ONNX Runtime.

Fusion is ONNX Runtime's story, but on today's CPUs the engine and the precision often decide more than any
fusion: OpenVINO runs bf16 on the AMX tile units or AVX512-BF16 by default, CTranslate2 runs int8 on ragged
batches, and ONNX Runtime's CPU provider runs neither bf16 nor unpadded batches. :func:`faster_engine` reads
what was measured side by side (a benchmark's variants, or a tune's rows) and, when the fastest variant of
another engine whose answers held beat ONNX Runtime's fastest that held by more than :data:`MARGIN`, says so in
one line with the reason for this CPU, pointing at ``workbench tune``. Nothing is said when ONNX Runtime won or
when no other engine was measured.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...ort.answer_policy import holds
from ..variants import recipe
from ..variants.labels import variant_label, workload_figure
from ..variants.recipe import ENGINES

#: How much faster another engine must be before the line is said (5%: within it, the run's noise decides).
MARGIN = 1.05
#: Outputs that agree this well count as the same answers where no answer check ran (random weights).
MIN_COSINE = 0.999


@dataclass(frozen=True)
class Entry:
    """One measured variant: its name, its engine (a key of :data:`~..variants.recipe.ENGINES`), its precision,
    the figure (ms for latency, sentences/s for throughput) and whether its answers held."""

    name: str
    engine: str
    precision: str
    figure: float
    holds: bool


def entries_of_bench(variants, random_weights: bool = False) -> list[Entry]:
    """A benchmark's variants (``VariantStats`` or their dicts) as entries: latency p50, the answers on the text
    where they were checked (not on random weights, where they mean nothing), else the outputs' cosine against the
    reference."""
    out = []
    for v in variants:
        d = v if isinstance(v, dict) else v.__dict__
        r = recipe(d["name"])
        if r is None or not d.get("p50_ms"):
            continue
        par = d.get("parity") or {}
        checked = d.get("task_parity") and not random_weights
        ok = holds(d["task_parity"]) if checked else (not par or par.get("cosine", 1.0) >= MIN_COSINE)
        out.append(Entry(d["name"], r.engine, r.precision, float(d["p50_ms"]), bool(ok)))
    return out


def entries_of_tune(rows, workload: str) -> list[Entry]:
    """A tune's rows (``VariantRow`` or their dicts) as entries for ``workload``."""
    out = []
    for v in rows:
        d = v if isinstance(v, dict) else v.__dict__
        r = recipe(d["name"])
        fig = d.get("p50_ms" if workload == "latency" else "sentences_per_s")
        if r is not None and fig and workload not in (d.get("same_as") or {}):
            out.append(Entry(d["name"], r.engine, r.precision, float(fig), bool(d.get("holds"))))
    return out


def _reason(best: Entry, machine: dict) -> str:
    """Why that engine wins on this CPU, from its precision and the instruction sets the OS reports."""
    isa = set(machine.get("isa") or ())
    half = [u for u in ("AMX-BF16", "AVX512-BF16", "AVX512-FP16") if u in isa]
    if best.engine == "openvino" and best.precision == "default":
        if half:
            return (f"it runs bf16 by default on this CPU's {', '.join(half)}, which ONNX Runtime's CPU provider does "
                    f"not use (it runs fp32 and int8)")
        return "its fp32 kernels (oneDNN) beat ONNX Runtime's on this CPU"
    if best.engine == "ctranslate2":
        return "it runs int8 on ragged batches (no padding to the longest sentence)"
    if best.precision == "int8":
        units = [u for u in ("AMX-INT8", "AVX512-VNNI", "AVX-VNNI") if u in isa]
        return f"its int8 kernels{' on ' + ', '.join(units) if units else ''} beat ONNX Runtime's here"
    if best.engine == "pytorch":
        return "PyTorch's kernels (oneDNN) beat ONNX Runtime's at this shape"
    return f"{ENGINES[best.engine]}'s kernels beat ONNX Runtime's on this CPU"


def faster_engine(entries: list[Entry], machine: dict, model: str, workload: str = "latency",
                  random_weights: bool = False) -> str:
    """One line when another engine's fastest variant whose answers held beat ONNX Runtime's by :data:`MARGIN`;
    "" otherwise. ``random_weights``: the answers mean nothing, so the line says the outputs agreed instead."""
    ok = [e for e in entries if e.holds]
    ort = [e for e in ok if e.engine == "onnxruntime"]
    other = [e for e in ok if e.engine != "onnxruntime"]
    if not ort or not other:
        return ""
    pick = min if workload == "latency" else max
    a, b = pick(ort, key=lambda e: e.figure), pick(other, key=lambda e: e.figure)
    ratio = a.figure / b.figure if workload == "latency" else b.figure / a.figure
    if ratio < MARGIN:
        return ""
    return (f"{variant_label(b.name)} ran {ratio:.2f}x as fast as ONNX Runtime's fastest here ({variant_label(a.name)}, "
            f"{workload_figure(workload, b.figure)} against {workload_figure(workload, a.figure)}), "
            + ("its outputs agreeing (random weights: no answer check)" if random_weights else "its answers holding")
            + f": {_reason(b, machine)}. `workbench tune {model}` compares every engine on your text and saves "
            f"the fastest")


__all__ = ["Entry", "faster_engine", "entries_of_bench", "entries_of_tune", "MARGIN", "MIN_COSINE"]
