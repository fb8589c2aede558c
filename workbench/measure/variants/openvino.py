"""The OpenVINO variants, on the same ONNX export: f32, its default precision on this CPU (bf16 where the CPU
has AVX512-BF16 or AMX), and NNCF's static int8, plain (sentence-transformers' recipe) or accuracy-controlled
(:mod:`..ov_quant`). OpenVINO and NNCF are the ``peers`` extra; without them these are skipped with the line
that says how to add them."""

from __future__ import annotations

from ..harness.results import Variant
from ..worker.peers import nncf_status, openvino_status
from .recipe import Build, Recipe

_WINS = "OpenVINO's CPU kernels beat ONNX Runtime's on this processor at this precision."
_DEFAULT = "OpenVINO's default inference precision on this CPU (bf16 where the CPU has AVX512-BF16 or AMX, f32 otherwise)"


def _variant(ctx: Build, name: str, precision: str | None = None, ir=None):
    ctx.progress(name, 0.8)
    options = {"precision": precision} if precision else {}
    if ir is not None:
        options["ir"] = str(ir)
    return Variant(name, ctx.export_path, provider="cpu", kind="openvino", options=options)


def _int8(ctx: Build, name: str):
    from .ov_quant import openvino_int8_of  # lazy: ov_quant.py imports this module at its load

    return _variant(ctx, name, ir=openvino_int8_of(ctx.export_path, ctx.search()))


def _guarded(ctx: Build, name: str):
    from .ov_quant import openvino_int8_guarded_of  # lazy: ov_quant.py imports this module at its load

    return _variant(ctx, name,
                    ir=openvino_int8_guarded_of(ctx.export_path, ctx.search(), threads=ctx.threads))


def _guard_report(v) -> dict | None:
    from .ov_quant import ir_report  # lazy: ov_quant.py imports this module at its load

    return ir_report(v.options["ir"])


def _openvino(device: str = "cpu") -> tuple[bool, str]:
    return openvino_status()


def _nncf(device: str = "cpu") -> tuple[bool, str]:
    return nncf_status()


OV = dict(engine="openvino", kind="openvino", runner="workbench.measure.worker.peer_runners:OpenVinoRunner",
          devices=("cpu",), check=_openvino, wins=_WINS)
RECIPES = (
    Recipe("openvino-f32", "OpenVINO f32", build=lambda ctx, name: _variant(ctx, name, "f32"), peer=True, **OV),
    Recipe("openvino", "OpenVINO, its default precision", build=_variant,
           precision="default", peer=True, summary_peer=True, card=f"Precision: {_DEFAULT}.", **OV),
    Recipe("openvino-int8", "OpenVINO static int8 (NNCF)", build=_int8, precision="int8", peer=True,
           needs=("text",), **{**OV, "check": _nncf},
           card="Precision: NNCF static int8 (model type transformer, calibrated on the search part: "
                "sentence-transformers' export_static_quantized_openvino_model recipe); the rest at OpenVINO's "
                "default precision."),
    Recipe("openvino-int8-guarded", "OpenVINO answer-guarded int8 (NNCF)", build=_guarded, precision="int8",
           needs=("text",), report_key="openvino_guard", report=_guard_report, **{**OV, "check": _nncf},
           card="Precision: NNCF static int8 with the layer roles whose quantization broke the search part's "
                "answers kept out of int8 (an ignored scope); the rest at OpenVINO's default precision."),
)

__all__ = ["RECIPES"]
