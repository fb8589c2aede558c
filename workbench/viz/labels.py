"""Display labels for benchmark variants: what a user reads, while JSON keeps the stable keys.

One table, used by the app, the CLI tables and the report (``torch``, ``unfused``, ``default``,
``fused``, ``int8``, ``fp16``, the tune's ``torch-compile``, ``tuned``, ``int8-guarded``, ``openvino-f32``,
``openvino``, ``fused-without-<step>``; any other name is a single snapshot, shown
as its step name).
"""
from __future__ import annotations

VARIANT_LABELS = {
    "torch": "PyTorch eager",
    "unfused": "ONNX Runtime, no optimizations",
    "default": "ONNX Runtime default",
    "fused": "fused (all steps)",
    "int8": "int8",
    "fp16": "fp16",
    "torch-compile": "torch.compile (inductor)",
    "tuned": "ONNX Runtime, this machine's plan",
    "int8-guarded": "answer-guarded int8",
    "openvino-f32": "OpenVINO f32",
    "openvino": "OpenVINO, its default precision",
}
WITHOUT = "fused-without-"


def variant_label(name: str) -> str:
    """``"unfused"`` → ``"ONNX Runtime, no optimizations"``; ``"fused-without-gelu"`` → ``"fused without gelu"``."""
    if name.startswith(WITHOUT):
        return f"fused without {name[len(WITHOUT):]}"
    return VARIANT_LABELS.get(name, name)


__all__ = ["VARIANT_LABELS", "variant_label"]
