"""Variant display names (read from the recipes), and the measuring modes' words.

What a user reads in tables, plots, the app, the report and the model card; JSON keeps the stable keys.
It lives in ``measure/`` (not ``viz/``) because the tune's sentences and the model card are written
here, and ``viz/`` may import ``measure/`` but not the other way round; figures, the app and the report
import it from here.
"""

from __future__ import annotations

from . import RECIPES

#: key → label: each recipe's (:mod:`.variants`), and ONNX Runtime at its default session level.
VARIANT_LABELS = {"default": "ONNX Runtime default", **{r.name: r.label for r in RECIPES}}
WITHOUT = "fused-without-"
#: A variant timed on the GPU beside its CPU twin (the app's GPU column): ``fused@gpu``.
GPU_TAG = "@gpu"

#: How a figure was measured (every figure of the tune names one).
MODES = {"interleaved": "interleaved in one worker, thread spinning off",
         "shipped": "as shipped, each engine in alternating time slices of its own process"}


def workload_figure(workload: str, value: float | None) -> str:
    """A workload's deciding figure in words: "1.23 ms" (latency), "812 sentences/s" (throughput), "-"."""
    if value is None:
        return "-"
    return f"{value:.2f} ms" if workload == "latency" else f"{value:.0f} sentences/s"


def variant_label(name: str) -> str:
    """``"unfused"`` → ``"ONNX Runtime, no optimizations"``; ``"fused-without-gelu"`` → ``"fused without gelu"``;
    any other name (a single snapshot) is shown as it is."""
    if name.endswith(GPU_TAG):
        return f"{variant_label(name[: -len(GPU_TAG)])} · GPU"
    if name.startswith(WITHOUT):
        return f"fused without {name[len(WITHOUT):]}"
    return VARIANT_LABELS.get(name, name)


def on_gpu(name: str) -> bool:
    """The variant was timed on the GPU (the app's GPU column)."""
    return name.endswith(GPU_TAG)


__all__ = ["VARIANT_LABELS", "WITHOUT", "GPU_TAG", "on_gpu", "MODES", "variant_label", "workload_figure"]
