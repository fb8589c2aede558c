"""The GPU variants: CUDA graphs, TensorRT fp16 and torch.compile with CUDA graphs, one object each.

Each :class:`GpuVariant` is self-contained: its name, label, where it runs, what it is built on (a standard
variant's model: the same file, so a CUDA-graph figure compares like for like with the plain one), how its
session is made (``Variant.options["gpu"]``, read by the runners in the
benchmark worker: :mod:`.gpu_runners`), and its parity tolerance against PyTorch fp32. ``status()`` says in one line why it cannot
run here; a variant that cannot is skipped with that reason, never run on another provider.

* ``fused-cudagraph``: the ``fused`` model on the CUDA provider with ``enable_cuda_graph``, inputs and outputs
  bound on the device; one fixed shape per session (:func:`workbench.ort.gpu.graph_shape_problem`).
* ``fp16-cudagraph``: the ``fp16`` model, likewise.
* ``trt-fp16``: the unfused export on ONNX Runtime's TensorRT execution provider with ``trt_fp16_enable``
  (TensorRT fuses on its own; the contrib ops of ONNX Runtime's fusions are not TensorRT's).
* ``torch-compile`` (on CUDA): ``torch.compile(mode="reduce-overhead")`` on the PyTorch model in fp16:
  inductor's kernels replayed as CUDA graphs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..errors import ConfigError
from ..ort.gpu import gpu_status, tensorrt_status
from .results import Variant


@dataclass(frozen=True)
class Tolerance:
    """How far a variant's outputs may be from PyTorch fp32's on the same inputs."""

    max_abs_diff: float
    min_cosine: float

    def holds(self, parity: dict | None) -> bool:
        return bool(parity) and parity["max_abs_diff"] <= self.max_abs_diff and parity["cosine"] >= self.min_cosine

    def words(self) -> str:
        return f"max abs diff ≤ {self.max_abs_diff:g}, cosine ≥ {self.min_cosine:g} against PyTorch fp32"


#: fp32 on the GPU: ONNX Runtime's CUDA provider uses TF32 MatMuls by default on Ampere and later.
FP32_GPU = Tolerance(max_abs_diff=2e-2, min_cosine=0.9999)
#: fp16 weights and activations (LayerNorm and Softmax kept fp32 by the converter's block list).
FP16 = Tolerance(max_abs_diff=6e-2, min_cosine=0.999)


@dataclass(frozen=True)
class GpuVariant:
    """One GPU variant: what it is, where it runs, what it is built on, how close its answers must be."""

    name: str
    label: str
    provider: str  # "onnxruntime-cuda", "onnxruntime-tensorrt" or "torch-cuda"
    based_on: str  # the standard variant whose model (or PyTorch source) it runs
    options: dict
    precision: str
    tolerance: Tolerance

    def status(self) -> tuple[bool, str]:
        """Whether it can run here; if not, the one line a user reads when it is skipped."""
        ok, why = gpu_status(torch_too=self.provider == "torch-cuda")
        if ok and self.provider == "onnxruntime-tensorrt":
            ok, why = tensorrt_status()
        return ok, why

    def build(self, model, *, attention: str = "eager", plan=None, exporter: str = "torchscript",
              opset: int | None = None, progress=None) -> Variant:
        """The benchmark :class:`Variant`: the standard variant it is based on, run this variant's way."""
        from .variants import standard_variants

        base = standard_variants(model, [self.based_on], provider="cuda", attention=attention, progress=progress,
                                 plan=plan, exporter=exporter, opset=opset)[0]
        return dataclasses.replace(base, name=self.name, options={**(base.options or {}), **self.options},
                                   fp16=self.precision == "fp16" and base.kind == "torch")


GPU_VARIANTS = {v.name: v for v in (
    GpuVariant("fused-cudagraph", "ONNX Runtime fused, CUDA graph", "onnxruntime-cuda", "fused",
               {"gpu": "cuda-graph"}, "fp32", FP32_GPU),
    GpuVariant("fp16-cudagraph", "ONNX Runtime fused fp16, CUDA graph", "onnxruntime-cuda", "fp16",
               {"gpu": "cuda-graph"}, "fp16", FP16),
    GpuVariant("trt-fp16", "ONNX Runtime TensorRT fp16", "onnxruntime-tensorrt", "unfused",
               {"gpu": "tensorrt"}, "fp16", FP16),
    GpuVariant("torch-compile", "PyTorch torch.compile (reduce-overhead: CUDA graphs), fp16", "torch-cuda", "torch",
               {"gpu": "torch-compile"}, "fp16", FP16),
)}


def is_gpu_variant(name: str, provider: str) -> bool:
    """Whether ``name`` is built here (``torch-compile`` is this module's on CUDA, the CPU one elsewhere)."""
    return provider == "cuda" and name in GPU_VARIANTS


def available(names, provider: str) -> tuple[list[str], list[dict]]:
    """``(runnable, skipped [{"name", "why"}])`` for the GPU names among ``names``; others pass through.

    Raises:
        ConfigError: a GPU-only name on the CPU provider.
    """
    cpu_asked = [n for n in names if n in GPU_VARIANTS and n != "torch-compile" and provider != "cuda"]
    if cpu_asked:
        raise ConfigError(f"{', '.join(cpu_asked)} run on the GPU only: use --provider cuda")
    ok, skipped = [], []
    for n in names:
        good, why = GPU_VARIANTS[n].status() if is_gpu_variant(n, provider) else (True, "")
        (ok.append(n) if good else skipped.append({"name": n, "why": why}))
    return ok, skipped


def check_fixed_shape(names, provider: str, text_given: bool) -> None:
    """CUDA-graph variants time one shape; a text's mix of lengths is refused in one line before any work."""
    graphs = [n for n in names if is_gpu_variant(n, provider) and GPU_VARIANTS[n].options.get("gpu") == "cuda-graph"]
    if graphs and text_given:
        raise ConfigError(f"{', '.join(graphs)} replay one captured shape (batch × sequence), and --text times a mix "
                          f"of lengths: drop --text, or time them at one --batch and --seq")


def build(name: str, model, **kw) -> Variant:
    return GPU_VARIANTS[name].build(model, **kw)


def with_gpu_variants(names, provider: str, build_rest, model, **kw) -> list[Variant]:
    """Every variant of ``names`` in order: the GPU ones built here (``kw``: attention, plan, exporter, opset,
    progress), the rest by ``build_rest(rest_names)`` (the standard and extra recipes)."""
    rest = [n for n in names if not is_gpu_variant(n, provider)]
    built = {v.name: v for v in (build_rest(rest) if rest else [])}
    for n in names:
        if is_gpu_variant(n, provider):
            built[n] = build(n, model, **kw)
    return [built[n] for n in names]


__all__ = ["GpuVariant", "GPU_VARIANTS", "Tolerance", "FP16", "FP32_GPU", "is_gpu_variant", "available", "check_fixed_shape", "build", "with_gpu_variants",
]
