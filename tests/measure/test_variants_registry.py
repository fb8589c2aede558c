"""The registry: one recipe per variant, the one place names, labels, order, peers and runners come from."""

from __future__ import annotations

import pytest


def test_every_recipe_is_one_name_with_a_runner_and_its_label_everywhere():
    from workbench.measure import variants
    from workbench.measure.tune.rows import PEERS
    from workbench.measure.tune.run import ORDER
    from workbench.measure.variants.labels import variant_label

    names = [r.name for r in variants.RECIPES]
    assert len(names) == len(set(names)) and names[:4] == ["torch", "torch-compile", "unfused", "fused"]
    for kind in variants.kinds():  # every kind's runner imports and has the runner's methods
        cls = variants.runner_for(kind)
        assert all(callable(getattr(cls, m, None)) for m in ("prepare", "run", "output", "close")), kind
    for r in variants.RECIPES:
        assert variant_label(r.name) == r.label and r.engine in variants.ENGINES
    # the tune measures every recipe that runs on the CPU but fp16 and the OpenVINO provider on the fused model
    # (the unfused export is what a user hands it), in this order; on CUDA, its GPU ones
    left_out = ("fp16", "ort-openvino-fused", "ort-openvino-fused-f32")
    assert list(ORDER) == [n for n in names if n not in left_out and "cpu" in variants.get(n).devices]
    assert variants.names(tune=True, device="cuda") == tuple(n for n in names if n in (
        "torch", "torch-compile", "unfused", "fused", "fp16", "fused-cudagraph", "fp16-cudagraph", "trt-fp16"))
    assert set(PEERS) == {r.name for r in variants.RECIPES if r.peer} and "ctranslate2" in PEERS
    assert {"ort-openvino", "ort-openvino-f32"} <= set(PEERS) <= set(ORDER)
    assert [n for n in names if variants.is_quantized(n)] == ["int8", "int8-guarded", "int8-static", "openvino-int8",
                                                              "openvino-int8-guarded", "ctranslate2"]
    assert not variants.is_quantized("3: attention")  # an app snapshot's name is no recipe


def test_defaults_per_provider_and_the_fleets_precisions():
    from workbench.measure import variants

    assert variants.default_variants("bert-tiny", "cpu") == (["torch", "unfused", "fused", "int8"], [])
    assert variants.default_variants("bert-tiny", "cuda")[0] == ["torch", "unfused", "fused", "fp16"]
    assert variants.fleet_precisions() == ("fp32", "int8", "fp16")
    assert variants.for_precision("int8").name == "int8"


def test_a_recipe_refuses_an_engine_or_need_it_does_not_know():
    from workbench.errors import ConfigError
    from workbench.measure.variants import Recipe, get

    with pytest.raises(ValueError, match="engine 'tensorrt'"):
        Recipe("x", "X", engine="tensorrt", build=lambda ctx, name: None)
    with pytest.raises(ValueError, match="unknown needs"):
        Recipe("x", "X", engine="onnxruntime", build=lambda ctx, name: None, needs=("a gpu",))
    with pytest.raises(ValueError, match="tuned on the GPU, it needs a tolerance"):
        Recipe("x", "X", engine="onnxruntime", build=lambda ctx, name: None, tune=("cuda",))
    with pytest.raises(ValueError, match="tuned on .'cuda',., but runs on .'cpu',."):
        Recipe("x", "X", engine="onnxruntime", build=lambda ctx, name: None, devices=("cpu",), tune=("cuda",))
    with pytest.raises(ConfigError, match="unknown variant 'fast'; choose from torch, torch-compile"):
        get("fast")
