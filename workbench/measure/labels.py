"""The one table of variant display names, and the measuring modes' words.

What a user reads in tables, plots, the app, the report and the model card; JSON keeps the stable keys.
It lives in ``measure/`` (not ``viz/``) because the tune's sentences and the model card are written
here, and ``viz/`` may import ``measure/`` but not the other way round; :mod:`workbench.viz.labels`
re-exports it.
"""

from __future__ import annotations

VARIANT_LABELS = {
    "torch": "PyTorch eager",
    "torch-compile": "torch.compile (inductor)",
    "unfused": "ONNX Runtime, no optimizations",
    "default": "ONNX Runtime default",
    "fused": "fused (all steps)",
    "tuned": "ONNX Runtime, this machine's plan",
    "int8": "int8 (dynamic)",
    "int8-guarded": "answer-guarded int8",
    "int8-static": "static int8 (QDQ, calibrated)",
    "fp16": "fp16",
    "openvino-f32": "OpenVINO f32",
    "openvino": "OpenVINO, its default precision",
    "openvino-int8": "OpenVINO static int8 (NNCF)",
    "openvino-int8-guarded": "OpenVINO answer-guarded int8 (NNCF)",
}
WITHOUT = "fused-without-"

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
    if name.startswith(WITHOUT):
        return f"fused without {name[len(WITHOUT):]}"
    return VARIANT_LABELS.get(name, name)


__all__ = ["VARIANT_LABELS", "WITHOUT", "MODES", "variant_label", "workload_figure"]
