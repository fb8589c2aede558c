"""A floor per precision, the processor's instruction sets, and explanations from measured rates."""
from __future__ import annotations

import pytest

from workbench.measure.harness.explain import explain
from workbench.measure.worker.floor import onnx_flops, onnx_flops_by_precision, precision_label
from workbench.ort.machine import isa_from_flags

XEON = ("fpu vme sse4_2 avx avx2 fma f16c avx512f avx512_vnni avx512_bf16 avx512_fp16 amx_bf16 amx_tile amx_int8"
        .split())
EPYC_ZEN3 = "fpu sse4_2 avx avx2 fma f16c".split()
GRAVITON3 = "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp asimddp sve i8mm bf16 sve2".split()


@pytest.mark.parametrize("flags, want, absent", [
    (XEON, ["AVX2", "AVX-512", "AVX512-VNNI", "AVX512-FP16", "AMX", "AMX-INT8", "AMX-BF16"], []),
    (EPYC_ZEN3, ["AVX2", "FMA"], ["AVX-512", "AVX512-VNNI", "AMX"]),
    (GRAVITON3, ["NEON", "DOTPROD", "I8MM", "SVE", "SVE2", "BF16", "FP16"], ["AVX2"]),
])
def test_isa_names_the_instruction_sets_that_matter(flags, want, absent):
    isa = isa_from_flags(flags)
    assert all(w in isa for w in want) and not any(a in isa for a in absent)


def test_int8_flops_split_from_a_real_quantized_model(tiny_export, tmp_path):
    """After quantize_dynamic the weight MatMuls are int8; attention's own products stay fp32."""
    from workbench.measure.worker.precision import quantize_int8

    fp32 = tiny_export().path
    q = quantize_int8(fp32)
    plain, split = onnx_flops_by_precision(fp32, 1, 64), onnx_flops_by_precision(q, 1, 64)
    assert set(plain) == {"fp32"} and set(split) == {"int8", "fp32"}
    assert precision_label(split) == "int8+fp32" and precision_label(plain) == "fp32"
    assert sum(split.values()) == pytest.approx(onnx_flops(fp32, 1, 64))  # the same work, split
    from workbench.models import resolve

    src = resolve("bert-tiny")
    hidden, layers = src.hidden_size, src.num_layers
    assert split["fp32"] == pytest.approx(layers * 4.0 * 64 * 64 * hidden)  # scores + context per layer


def _rates(int8, fp32=180.0, stream=170.0):
    return {"fp32": {"hot": fp32, "stream": stream, "unit": "GFLOP/s"}, "int8": {"hot": int8, "unit": "GOP/s"}}


def test_explanation_says_why_int8_gains_little_without_vnni():
    lines = explain(_rates(350.0), {"isa": isa_from_flags(EPYC_ZEN3)})
    assert any("No VNNI or AMX here (AVX2)" in ln and "1.9x" in ln and "not the 3-4x" in ln for ln in lines)
    assert any("No native fp16/bf16" in ln for ln in lines)


def test_explanation_credits_the_integer_units_it_has():
    lines = explain(_rates(630.0), {"isa": isa_from_flags(XEON)})
    assert any(ln.startswith("AVX512-VNNI, AMX-INT8 here") and "3.5x" in ln for ln in lines)
    assert not any("No native fp16" in ln for ln in lines)


def test_explanation_names_each_variants_own_floor():
    v = {"name": "int8", "floor_ratio": 1.4, "floor_precision": "int8+fp32", "bound_ratio": 1.3}
    assert "int8: 1.40x its int8+fp32 floor, 1.30x its MatMuls alone." in explain({}, {}, [v])
