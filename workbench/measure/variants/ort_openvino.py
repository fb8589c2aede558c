"""ONNX Runtime with OpenVINO's execution provider (the ``onnxruntime-ep-openvino`` plugin): OpenVINO's CPU
kernels reached from ONNX Runtime's own API, on the unfused export and on the fused model, at OpenVINO's default
precision (bf16 on a CPU with AMX or AVX512-BF16) and at f32.

How a user who stays on ONNX Runtime ships it (three lines, :mod:`workbench.ort.openvino_ep`): register the
plugin's library, take the OpenVINO provider's CPU device from ``ort.get_ep_devices()``, and
``SessionOptions.add_provider_for_devices([device], {"load_config": ...})``; ONNX Runtime's CPU provider runs
the nodes OpenVINO leaves (on the fused model: the ``com.microsoft`` ops it has no kernel for), and the
benchmark says which (:mod:`workbench.ort.assignment`). These are ONNX Runtime variants (kind ``onnx``): the
worker's ONNX Runtime runner opens them with ``options={"ep": "openvino", "precision": ...}``, OpenVINO's
threads and streams set as the OpenVINO recipes set them (:func:`~workbench.measure.worker.peer_runners.ov_config`).

The plugin serves Intel devices only: on an AMD CPU it offers none, and these are skipped with that line; where
it is not installed (it is in the ``peers`` extra; wheels for x86-64 Linux and Windows), with the line naming it.
"""

from __future__ import annotations

from ...ort.openvino_ep import status
from ..harness.results import Variant
from .recipe import Build, Recipe

NAME = "ort-openvino"
_WINS = "OpenVINO's CPU kernels, reached through ONNX Runtime's API, beat ONNX Runtime's own on this processor."
_DEFAULT = ("OpenVINO's default inference precision on this CPU (bf16 where the CPU has AMX or AVX512-BF16, f32 "
            "otherwise), through ONNX Runtime's OpenVINO execution provider")


def _check(device: str = "cpu") -> tuple[bool, str]:
    return status()


def options(precision: str | None = None) -> dict:
    """The ONNX Runtime runner's options that put a model on OpenVINO's execution provider (``precision``:
    its inference precision hint, "f32" or "bf16"; None: OpenVINO's default on this CPU). Any ONNX path can be
    timed so: ``Variant(name, path, options=options("f32"))``."""
    return {"ep": "openvino", **({"precision": precision} if precision else {})}


def _variant(ctx: Build, name: str, model, precision: str | None, keep_off=()):
    ctx.progress(name, 0.8)
    return Variant(name, model, provider="cpu", level="all", disabled_optimizers=keep_off, options=options(precision))


def _unfused(precision: str | None):
    return lambda ctx, name: _variant(ctx, name, ctx.export_path, precision)


def _fused(precision: str | None):
    return lambda ctx, name: _variant(ctx, name, ctx.fused_model, precision, ctx.keep_off)


EP = dict(engine="onnxruntime", kind="onnx", runner="workbench.measure.worker.runners:OrtRunner", devices=("cpu",),
          device_note="ONNX Runtime's OpenVINO execution provider runs here on the CPU only", check=_check,
          wins=_WINS)
RECIPES = (
    Recipe(NAME, "ONNX Runtime + OpenVINO EP, its default precision", build=_unfused(None), precision="default",
           peer=True, app=True, card=f"Precision: {_DEFAULT}.", **EP),
    Recipe(f"{NAME}-f32", "ONNX Runtime + OpenVINO EP f32", build=_unfused("f32"), peer=True,
           card="Precision: fp32 throughout, through ONNX Runtime's OpenVINO execution provider.", **EP),
    Recipe(f"{NAME}-fused", "ONNX Runtime + OpenVINO EP on the fused model", build=_fused(None), needs=("fused",),
           precision="default", tune=(), app=True,
           card=f"Precision: {_DEFAULT}; the fused ops OpenVINO does not take run on ONNX Runtime's CPU provider in "
                "fp32.", **EP),
    Recipe(f"{NAME}-fused-f32", "ONNX Runtime + OpenVINO EP f32 on the fused model", build=_fused("f32"),
           needs=("fused",), tune=(), **EP),
)

__all__ = ["RECIPES", "NAME", "options"]
