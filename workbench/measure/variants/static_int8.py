"""``int8-static``: ONNX Runtime's static int8 (QDQ, calibrated, per channel) on the fused model.

Does ONNX Runtime close the gap to OpenVINO's static int8? Activations get fixed scales from the
search part of the text (MinMax calibration, one sentence per sample), weights per-channel int8
scales; the MatMuls are quantized in QDQ form, which ONNX Runtime's session turns into integer
kernels. The fused Attention ops keep their packed Q/K/V weights in fp32 (ONNX Runtime's QDQ
quantizer has no rule for the contrib Attention op). Cached like the other derived models.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import tempfile
from pathlib import Path

import onnx

from ...modelio import copy_model
from .models import cached

STATIC_VERSION = 1


class _Reader:
    """ONNX Runtime's CalibrationDataReader over the sentences (one batch each)."""

    def __init__(self, text, names: set):
        self.items = iter([{k: v for k, v in b.items() if k in names} for b in text.batches])

    def get_next(self):
        return next(self.items, None)

    def rewind(self):  # pragma: no cover - the quantizer reads once
        pass


def int8_static_of(fused: Path, search_text) -> Path:
    """The static QDQ int8 model of ``fused``, calibrated on ``search_text``, cached."""
    key = hashlib.sha256(json.dumps([list(search_text.sentences), STATIC_VERSION]).encode()).hexdigest()[:16]

    def build(out: Path) -> None:
        import onnxruntime
        from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

        names = {i.name for i in onnx.load(str(fused), load_external_data=False).graph.input}
        tmp = Path(tempfile.mkdtemp(prefix="workbench-static-"))
        onnxruntime.set_default_logger_severity(3)  # the calibrator's own sessions warn about unused initializers
        log = logging.getLogger()
        old = log.level
        log.setLevel(logging.ERROR)
        try:
            copy_model(fused, tmp / "in.onnx")  # with its weights: the quantizer reads the model beside them
            quantize_static(str(tmp / "in.onnx"), str(out), _Reader(search_text, names), quant_format=QuantFormat.QDQ,
                            op_types_to_quantize=["MatMul"], per_channel=True, activation_type=QuantType.QUInt8,
                            weight_type=QuantType.QInt8, calibrate_method=CalibrationMethod.MinMax,
                            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT,
                                           "CalibTensorRangeSymmetric": False})
        finally:
            log.setLevel(old)
            shutil.rmtree(tmp, ignore_errors=True)

    return cached(Path(fused), f"int8-static-{key}", build)


__all__ = ["int8_static_of"]
