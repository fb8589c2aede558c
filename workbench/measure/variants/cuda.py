"""ONNX Runtime on the GPU, the way the article's GPU rows run it: CUDA graphs and TensorRT.

Each recipe runs another recipe's model (:mod:`.onnxruntime`'s: the same file, so a CUDA-graph figure compares
like for like with the plain one) through :class:`~workbench.ort.gpu.BoundSession` (inputs and outputs bound on
the device), in its own worker runner (:mod:`..gpu_runners`):

* ``fused-cudagraph``: the ``fused`` model on the CUDA provider with ``enable_cuda_graph``; one captured shape
  (batch × sequence) per session, so a text's mix of lengths is refused (:func:`.registry.check_fixed_shape`).
* ``fp16-cudagraph``: the ``fp16`` model, likewise.
* ``trt-fp16``: the unfused export on ONNX Runtime's TensorRT execution provider with ``trt_fp16_enable``
  (TensorRT fuses on its own; the contrib ops of ONNX Runtime's fusions are not TensorRT's).

They run on the GPU only; without one (or without TensorRT) ``check`` says why in one line and they are
skipped with it. PyTorch's CUDA graphs are the CUDA mode of the ``torch-compile`` recipe (:mod:`.pytorch`).
"""

from __future__ import annotations

import dataclasses

from ...ort.gpu import gpu_status, tensorrt_status
from . import onnxruntime
from .recipe import FP16, FP32_GPU, Build, Recipe

GPU_ONLY = "CUDA graphs and TensorRT run on the GPU only"


def _on(base: str, kind: str):
    """A build that makes recipe ``base``'s variant and runs it as ``kind`` on the GPU."""
    made_by = next(r for r in onnxruntime.RECIPES if r.name == base)

    def build(ctx: Build, name: str):
        return dataclasses.replace(made_by.make(ctx), name=name, kind=kind, provider="cuda")

    return build


def _gpu(device: str = "cuda") -> tuple[bool, str]:
    return gpu_status()


def _tensorrt(device: str = "cuda") -> tuple[bool, str]:
    ok, why = gpu_status()
    return tensorrt_status() if ok else (ok, why)


GPU = dict(engine="onnxruntime", devices=("cuda",), device_note=GPU_ONLY, tune=("cuda",), needs=("fused",))
GRAPH = dict(kind="onnx-cudagraph", runner="workbench.measure.worker.gpu_runners:CudaGraphRunner", check=_gpu,
             fixed_shape=True, **GPU)
RECIPES = (
    Recipe("fused-cudagraph", "ONNX Runtime fused, CUDA graph", build=_on("fused", "onnx-cudagraph"),
           tolerance=FP32_GPU, **GRAPH),
    Recipe("fp16-cudagraph", "ONNX Runtime fused fp16, CUDA graph", build=_on("fp16", "onnx-cudagraph"),
           precision="fp16", tolerance=FP16, **GRAPH),
    Recipe("trt-fp16", "ONNX Runtime TensorRT fp16", build=_on("unfused", "onnx-tensorrt"), kind="onnx-tensorrt",
           runner="workbench.measure.worker.gpu_runners:TensorRtRunner", check=_tensorrt, precision="fp16", tolerance=FP16,
           **{**GPU, "needs": ()}),
)

__all__ = ["RECIPES", "GPU_ONLY"]
