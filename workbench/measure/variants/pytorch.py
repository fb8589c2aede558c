"""The PyTorch variants: eager (the "before" users know) and ``torch.compile`` (inductor), on the same weights.

``torch-compile`` is one recipe on both devices, each run the way a user would there: on the CPU,
``torch.compile(backend="inductor", dynamic=True)`` in fp32 (one graph for every shape a text brings); on CUDA
(``--provider cuda``), ``torch.compile(mode="reduce-overhead", dynamic=False)`` on the model in fp16: inductor's
kernels replayed as CUDA graphs, the PyTorch counterpart of ONNX Runtime's CUDA-graph recipes (:mod:`.cuda`).
"""

from __future__ import annotations

from ...ort.gpu import gpu_status
from ..harness.results import Variant
from ..worker.peers import compiler_status
from .recipe import FP16, FP32_GPU, Build, Recipe

#: ``Variant.options["compile"]`` on CUDA (on the CPU it is True): the worker's
#: :class:`~workbench.measure.worker.runners.TorchRunner` compiles in this mode, with CUDA graphs.
REDUCE_OVERHEAD = "reduce-overhead"


def _eager(ctx: Build, name: str):
    return Variant(name, provider=ctx.provider, kind="torch", torch_source=ctx.torch_source)


def _compiled(ctx: Build, name: str):
    cuda = ctx.provider == "cuda"
    return Variant(name, provider=ctx.provider, kind="torch", torch_source=ctx.torch_source, fp16=cuda,
                   options={"compile": REDUCE_OVERHEAD if cuda else True})


def _compiler(device: str = "cpu") -> tuple[bool, str]:
    if device == "cuda":  # inductor writes Triton kernels there, and the model must reach the GPU

        return gpu_status(torch_too=True)

    return compiler_status()


TORCH = dict(engine="pytorch", kind="torch", runner="workbench.measure.worker.runners:TorchRunner", needs=("pytorch",),
             peer=True, tune=("cpu", "cuda"))
RECIPES = (
    Recipe("torch", "PyTorch eager", build=_eager, standard=True, default_on=("cpu", "cuda"), tolerance=FP32_GPU,
           **TORCH),
    Recipe("torch-compile", "torch.compile (inductor)", build=_compiled, check=_compiler, tolerance=FP16,
           device_note="on the CPU: inductor, dynamic shapes, fp32; on CUDA: mode reduce-overhead (CUDA graphs), "
                       "fp16, one shape per compile", **TORCH),
)

__all__ = ["RECIPES", "REDUCE_OVERHEAD"]
