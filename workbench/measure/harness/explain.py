"""Plain-words explanations of a benchmark's figures, from the rates measured on this machine.

Every sentence is built from the measured MatMul rates and the processor's instruction sets, never
from a table of expected speed-ups: on an AVX2-only CPU int8 buys about 2x, on one with VNNI or AMX
3-4x, and the user should read which case their machine is, with the number it measured.
"""
from __future__ import annotations

#: Integer dot-product units that make int8 MatMuls several times faster than fp32.
INT8_UNITS = ("AVX512-VNNI", "AVX-VNNI", "AMX-INT8", "DOTPROD", "I8MM")
#: Native half-precision arithmetic on a CPU.
HALF_UNITS = ("AVX512-FP16", "AMX-BF16", "AVX512-BF16", "FP16", "BF16")


def explain(rates: dict, machine: dict, variants=()) -> list[str]:
    """Sentences for the CLI, the app and the report.

    Args:
        rates: ``BenchResult.rates`` (``{"fp32": {"hot", "stream", ...}, "int8": {...}}``).
        machine: ``BenchResult.machine`` (``isa`` read there).
        variants: ``VariantStats`` or their dicts, for the sentences about how far each is from its floor.
    """
    isa = set(machine.get("isa") or ())
    out = []
    fp32, int8 = rates.get("fp32") or {}, rates.get("int8") or {}
    if fp32.get("hot") and int8.get("hot"):
        r = int8["hot"] / fp32["hot"]
        units = [u for u in INT8_UNITS if u in isa]
        if units:
            out.append(f"{', '.join(units)} here: int8 MatMuls run {r:.1f}x as fast as fp32 "
                       f"({int8['hot']:.0f} GOP/s against {fp32['hot']:.0f} GFLOP/s).")
        else:
            have = ", ".join(u for u in ("AVX-512", "AVX2", "NEON") if u in isa) or "no vector extension found"
            out.append(f"No VNNI or AMX here ({have}): int8 MatMuls run {r:.1f}x as fast as fp32 "
                       f"({int8['hot']:.0f} GOP/s against {fp32['hot']:.0f} GFLOP/s), not the 3-4x of CPUs "
                       f"with integer dot-product units.")
    if fp32.get("hot") and fp32.get("stream"):
        r = fp32["hot"] / fp32["stream"]
        out.append(f"Weights read from memory (as in a real model) run the MatMuls at {fp32['stream']:.0f} GFLOP/s, "
                   f"{r:.2f}x the time of a weight that stays in cache ({fp32['hot']:.0f}): the MatMuls-alone bound "
                   f"is what no fusion can beat.")
    if "fp16" not in rates and not any(u in isa for u in HALF_UNITS) and machine.get("isa"):
        out.append("No native fp16/bf16 arithmetic on this CPU (no AVX512-FP16 or AMX-BF16): fp16 is a GPU "
                   "variant here.")
    for v in variants:
        d = v if isinstance(v, dict) else v.__dict__
        if d.get("floor_ratio") and d.get("floor_precision"):
            bound = f", {d['bound_ratio']:.2f}x its MatMuls alone" if d.get("bound_ratio") else ""
            out.append(f"{d['name']}: {d['floor_ratio']:.2f}x its {d['floor_precision']} floor{bound}.")
    return out


__all__ = ["explain", "INT8_UNITS", "HALF_UNITS"]
