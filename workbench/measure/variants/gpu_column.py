"""The app's GPU column: which variants its benchmark times on the GPU, and why there is no GPU column.

Plain functions of the variant registry and :func:`workbench.ort.gpu.gpu_status`:

* :func:`device_plan`: with a usable GPU, the registry's ONNX Runtime recipes that run on "cuda" from the fused
  model (``fused`` and ``fp16`` with IO binding, ``fused-cudagraph`` and ``fp16-cudagraph`` at the benchmark's one
  shape) are timed beside the CPU's; without one, none, and the reason in one line (the CUDA version the
  installed onnxruntime-gpu needs, read from the package). A benchmark that times a text's mix of lengths
  leaves the CUDA-graph recipes out and says why (they replay one captured shape).
* :func:`gpu_key` (:func:`.labels.on_gpu` the other way): a GPU variant's name beside its CPU twin (``fused@gpu``).
* :func:`check_on_gpu`: a GPU variant whose session does not have the CUDA provider is an error, never a number.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import RuntimeUnavailableError
from .. import variants
from .labels import GPU_TAG, on_gpu

CUDA_PROVIDER = "CUDAExecutionProvider"


@dataclass(frozen=True)
class DevicePlan:
    """What the benchmark times on the GPU (``gpu``: recipe names, empty without a GPU) and the panel's line."""

    gpu: tuple[str, ...]
    note: str

    @property
    def has_gpu(self) -> bool:
        return bool(self.gpu)


def gpu_recipes(recipes=None) -> tuple[str, ...]:
    """The registry's ONNX Runtime recipes that run on the GPU from the fused model, in display order."""
    recipes = variants.RECIPES if recipes is None else recipes
    return tuple(r.name for r in recipes
                 if r.engine == "onnxruntime" and "cuda" in r.devices and tuple(r.needs) == ("fused",))


def device_plan(status: tuple[bool, str], recipes=None, *, text_timed: bool = False,
                batch: int = 1, seq: int = 128) -> DevicePlan:
    """The GPU variants the app times beside the CPU's, given ``status`` (``gpu_status()``'s ``(ok, why)``)."""
    ok, why = status
    if not ok:
        return DevicePlan((), f"no GPU column: {why}")
    recipes = variants.RECIPES if recipes is None else recipes
    by_name = {r.name: r for r in recipes}
    names = gpu_recipes(recipes)
    fixed = [n for n in names if by_name[n].fixed_shape]
    if text_timed and fixed:
        names = tuple(n for n in names if n not in fixed)
        tail = (f"; {', '.join(fixed)} left out: a CUDA graph replays one captured shape and the text times a "
                f"mix of lengths")
    else:
        tail = f" (CUDA graphs captured at batch {batch} × sequence {seq})" if fixed else ""
    return DevicePlan(names, f"GPU column: {', '.join(names)} on the GPU, inputs and outputs bound there{tail}")


def gpu_key(name: str) -> str:
    """The name a GPU variant is timed under, beside its CPU twin."""
    return name if on_gpu(name) else f"{name}{GPU_TAG}"


def check_on_gpu(session_providers: dict[str, list[str]]) -> None:
    """Raise (one line) when a GPU variant's session lacks the CUDA provider: ONNX Runtime fell back silently."""
    for name, got in session_providers.items():
        if on_gpu(name) and CUDA_PROVIDER not in (got or []):
            raise RuntimeUnavailableError(
                f"{name}: CUDA asked for, but the session runs on {', '.join(got or ['nothing'])}: ONNX Runtime "
                f"fell back silently; no GPU figure is taken from it")


__all__ = ["DevicePlan", "gpu_recipes", "device_plan", "gpu_key", "check_on_gpu"]
