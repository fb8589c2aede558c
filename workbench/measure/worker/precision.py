"""Precision steps after fusion: fp16 (for the GPU) and dynamic int8 (for the CPU).

Both keep the model's interface: fp16 leaves fp32 graph inputs and outputs
(``keep_io_types``), so the same feeds and the same parity check apply; int8
is ``onnxruntime.quantization.quantize_dynamic`` (weights QInt8, activations
quantized per run). Each step is judged by parity against the fp32 model:
max absolute difference and cosine similarity of the outputs.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path

import onnx
from onnx import TensorProto

from ...errors import BenchmarkError
from ...modelio import save_model
from ...ort.inputs import PARITY_CASES, make_inputs, spec_from_onnx
from ...ort.parity import Parity, compare, merge
from ...ort.session import create_session, run_session


def _load(model):
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (bytes, bytearray)):
        return onnx.load_from_string(bytes(model))
    return onnx.load(str(model))


def _save(model, out: str | os.PathLike | None):
    if out is None:
        return model
    return save_model(model, Path(out), overwrite=True)


def is_fp16(model) -> bool:
    """Whether most float weights of ``model`` are float16."""
    m = _load(model)
    kinds = [i.data_type for i in m.graph.initializer if i.data_type in (TensorProto.FLOAT, TensorProto.FLOAT16)]
    return bool(kinds) and sum(k == TensorProto.FLOAT16 for k in kinds) * 2 > len(kinds)


def to_fp16(model, out: str | os.PathLike | None = None, *, keep_io_types: bool = True):
    """Convert float weights and activations to float16, keeping fp32 inputs/outputs.

    Uses onnxruntime.transformers' ``OnnxModel.convert_float_to_float16``,
    whose symbolic shape inference understands the fused ``com.microsoft``
    ops, and its default block list (ops that must stay fp32).

    Args:
        model: ONNX path, bytes or ModelProto (fused or not).
        out: where to save; None returns the ModelProto.
        keep_io_types: leave graph inputs and outputs fp32 (casts inserted).

    Returns:
        The saved path, or the converted ModelProto when ``out`` is None.
    """
    from onnxruntime.transformers.onnx_model import OnnxModel

    m = _load(model)
    wrapped = OnnxModel(m)
    quiet = logging.getLogger("onnxruntime.transformers")
    old = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        try:
            wrapped.convert_float_to_float16(keep_io_types=keep_io_types, use_symbolic_shape_infer=True)
        except Exception:
            # Symbolic shape inference fails on some graphs; onnx's own inference covers plain ops.
            wrapped = OnnxModel(_load(model))
            wrapped.convert_float_to_float16(keep_io_types=keep_io_types, use_symbolic_shape_infer=False)
    except Exception as e:
        raise BenchmarkError(f"fp16 conversion failed: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from e
    finally:
        quiet.setLevel(old)
    return _save(wrapped.model, out)


def quantize_int8(model, out: str | os.PathLike | None = None, *, per_channel: bool = False):
    """Dynamic int8 quantization (weights QInt8, activations per run).

    Args:
        model: ONNX path, bytes or ModelProto, best after fusion (the fused
            Attention becomes QAttention).
        out: where to save; None returns the ModelProto.
        per_channel: per-channel weight scales (the standard int8 variant: on real weights they keep
            the answers where per-tensor scales do not, at the same speed on CPU).
    """
    from onnxruntime.quantization import QuantType, quantize_dynamic

    tmp = Path(tempfile.mkdtemp(prefix="workbench-int8-"))
    try:
        src = tmp / "fp32.onnx"
        if isinstance(model, (str, os.PathLike)) and Path(model).is_file():
            src = Path(model)
        else:
            onnx.save(_load(model), str(src))
        dst = tmp / "int8.onnx"
        quiet = logging.getLogger()
        old = quiet.level
        quiet.setLevel(logging.ERROR)
        try:
            # Fused contrib ops defeat onnx's type inference; their tensors are fp32.
            quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8, per_channel=per_channel,
                             extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
        except Exception as e:
            raise BenchmarkError(
                f"int8 quantization failed: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from e
        finally:
            quiet.setLevel(old)
        return _save(onnx.load(str(dst)), out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def precision_parity(reference, candidate, *, provider: str = "cpu", cases=None, threads: int | None = None,
                     spec=None) -> Parity:
    """Outputs of ``candidate`` against ``reference`` (fp32) on the parity cases.

    Args:
        reference, candidate: ONNX path, bytes or ModelProto.
        provider: where the candidate runs ("cuda" for fp16 in practice);
            the reference always runs on the CPU with optimizations off.
        cases: ``(batch, seq, padded)`` tuples; default the short parity cases.
    """
    ref_m = _load(reference)
    spec = spec or spec_from_onnx(ref_m)
    ref_s = create_session(ref_m.SerializeToString(), "cpu", level="disable", threads=threads)
    cand_m = _load(candidate)
    cand_s = create_session(cand_m.SerializeToString(), provider, level="all", threads=threads)
    results = []
    for i, (b, s, padded) in enumerate(cases or PARITY_CASES[:2]):
        feeds = make_inputs(spec, b, min(s, spec.max_positions), seed=100 + i, padded=padded)
        results.append(compare(run_session(ref_s, feeds)[0], run_session(cand_s, feeds)[0],
                               mask=feeds.get("attention_mask")))
    return merge(results)


__all__ = ["to_fp16", "quantize_int8", "precision_parity", "is_fp16"]
