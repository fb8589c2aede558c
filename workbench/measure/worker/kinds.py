"""The worker's runner kinds: each ``Variant.kind`` and the runner class the worker builds for it.

Below the harness and the variant registry, so both look a kind up without importing upward: the harness
checks a :class:`~workbench.measure.harness.results.Variant`'s kind here, the worker's
:func:`~.runners.make_runner` imports the kind's runner here (by its ``"module:Class"`` name, inside the
worker only). Each recipe of :mod:`workbench.measure.variants` names the same runner for its kind (the
registry checks that when it loads). A kind whose runner lives beside its recipes (CTranslate2's) is named
by its path only.
"""

from __future__ import annotations

import importlib

from ...errors import ConfigError

#: kind → ``"module:Class"`` of its runner, in the registry's order.
RUNNERS = {
    "torch": "workbench.measure.worker.runners:TorchRunner",
    "onnx": "workbench.measure.worker.runners:OrtRunner",
    "openvino": "workbench.measure.worker.peer_runners:OpenVinoRunner",
    "onnx-cudagraph": "workbench.measure.worker.gpu_runners:CudaGraphRunner",
    "onnx-tensorrt": "workbench.measure.worker.gpu_runners:TensorRtRunner",
    "ctranslate2": "workbench.measure.variants.ctranslate2:Ct2Runner",
}


def kinds() -> tuple[str, ...]:
    """The worker's runner kinds (``Variant.kind``)."""
    return tuple(RUNNERS)


def runner_for(kind: str):
    """The worker's runner class for ``kind`` (imported now: call it inside the worker)."""
    spec = RUNNERS.get(kind)
    if spec is None:
        raise ConfigError(f"variant kind must be one of {kinds()}, not {kind!r}")
    module, _, attr = spec.partition(":")
    return getattr(importlib.import_module(module), attr)


__all__ = ["RUNNERS", "kinds", "runner_for"]
