"""Everything around the GPU that runs without one: the CUDA version read from the package, the
refusals (no driver, no CUDA provider, TensorRT missing), the fallback guard on real sessions, the
CUDA-graph shape rules and the device-bound session on the CPU provider."""

from __future__ import annotations

from importlib import metadata

import numpy as np
import onnxruntime as ort
import pytest

from workbench.errors import ConfigError, RuntimeUnavailableError
from workbench.ort.cuda_build import cuda_build, from_requirements
from workbench.ort.gpu import (
    CUDA,
    TRT,
    BoundSession,
    GraphShape,
    check_graph_shape,
    gpu_facts,
    gpu_status,
    graph_shape_problem,
    guard_providers,
    output_shapes,
    tensorrt_status,
)
from workbench.ort.inputs import make_inputs, spec_from_onnx
from workbench.ort.session import create_session, cuda_status, probe_cuda_provider

NO_GPU = not gpu_status()[0]
needs_no_gpu = pytest.mark.skipif(not NO_GPU, reason="a GPU is present")


def test_the_cuda_version_is_read_from_the_installed_package():
    build = cuda_build()
    info = pytest.importorskip("onnxruntime.capi.build_and_package_info")
    assert build.package == "onnxruntime-gpu" and build.version == metadata.version("onnxruntime-gpu")
    assert build.cuda == info.cuda_version
    # The wheel's own `cuda` extra pins the same major version.
    runtime = [r for r in metadata.requires("onnxruntime-gpu") if r.startswith("nvidia-cuda-runtime")]
    assert runtime and f"~={build.cuda_major}." in runtime[0]
    assert build.words().startswith(f"CUDA {build.cuda}") and "cuDNN" in build.words()


def test_requirements_of_an_older_wheel_give_its_versions():
    old = ['numpy>=1.21', 'nvidia-cuda-runtime-cu12~=12.0; extra == "cuda"', 'nvidia-cudnn-cu12~=9.0; extra == "cuda"']
    assert from_requirements(old, version="1.20.0").words() == "CUDA 12.0 and cuDNN 9"
    assert from_requirements(['nvidia-cuda-runtime~=13.0; extra == "cuda"'], "13.0").words() == "CUDA 13.0"
    assert "built for" in from_requirements([]).words()


@needs_no_gpu
def test_no_driver_is_one_line_naming_the_driver_and_the_cuda_version():
    ok, why = gpu_status(torch_too=True)
    assert not ok and "\n" not in why
    assert "NVIDIA" in why and cuda_build().words() in why, why


@needs_no_gpu
def test_a_provider_that_cannot_load_names_the_cuda_version_from_the_package(capfd):
    ok, why = probe_cuda_provider()
    assert not ok
    if "cannot load" in why:
        assert f"this onnxruntime needs {cuda_build().words()}" in why, why
    assert "[E:onnxruntime" not in capfd.readouterr().err


def test_a_build_without_the_cuda_provider_says_what_to_install(monkeypatch):
    cpu_only = ["CPUExecutionProvider"]
    monkeypatch.setattr(ort, "get_available_providers", lambda: cpu_only)
    cuda_status.cache_clear()
    try:
        ok, why = cuda_status()
    finally:
        cuda_status.cache_clear()
    assert not ok and "no CUDAExecutionProvider" in why
    if __import__("platform").machine().lower() in ("x86_64", "amd64") and __import__("sys").platform != "darwin":
        assert cuda_build().words() in why


def test_tensorrt_missing_is_reported_with_a_reason_never_used(capfd):
    ok, why = tensorrt_status()
    if ok:
        pytest.skip("the TensorRT execution provider loads here")
    assert why and "\n" not in why
    assert "TensorRT" in why or cuda_build().words() in why, why
    out = capfd.readouterr()
    assert "EP Error" not in out.out and "[E:onnxruntime" not in out.err


def test_a_cuda_request_that_lands_on_the_cpu_is_an_error_never_a_number(tiny_export, capfd):
    path = str(tiny_export().path)
    # ONNX Runtime itself, asked for CUDA first, silently runs on the CPU here: the guard refuses it.
    sess = ort.InferenceSession(path, providers=[CUDA, "CPUExecutionProvider"])
    if CUDA in sess.get_providers():
        pytest.skip("the CUDA provider runs here")
    with pytest.raises(RuntimeUnavailableError, match="CUDA asked for, but the session runs on CPUExecutionProvider"):
        guard_providers(sess, CUDA)
    with pytest.raises(RuntimeUnavailableError, match="TensorRT asked for") as e:
        guard_providers(create_session(path, "cpu"), TRT)
    assert cuda_build().words() in str(e.value)
    guard_providers(create_session(path, "cpu"), "CPUExecutionProvider")  # what was asked for: no error


@needs_no_gpu
def test_a_cuda_graph_session_refuses_without_a_gpu(tiny_export):
    with pytest.raises(RuntimeUnavailableError, match="GPU asked for"):
        BoundSession(tiny_export().path, provider="cuda", cuda_graph=True)
    with pytest.raises(ConfigError, match="CUDA graphs need the CUDA execution provider"):
        BoundSession(tiny_export().path, provider="cpu", cuda_graph=True)


def test_cuda_graph_shape_rules_are_said_in_words():
    cap = check_graph_shape(1, 128, max_positions=512)
    assert graph_shape_problem(cap, 1, 128) is None
    assert graph_shape_problem(cap, 32, 128) == ("CUDA graphs replay one captured shape: batch 1 × sequence 128; "
                                                 "batch 32 × sequence 128 needs a new session")
    assert "batch 1 × sequence 64" in graph_shape_problem(GraphShape(1, 64), 1, 128)
    for bad in ((0, 128), (1, -3), (1.5, 128), ("1", 128), (True, 128)):
        with pytest.raises(ConfigError, match="fixed shape"):
            check_graph_shape(*bad)
    with pytest.raises(ConfigError, match="longer than the model's 512 positions"):
        check_graph_shape(1, 600, max_positions=512)


def test_a_bound_session_gives_the_plain_sessions_answers_and_takes_new_values_in_place(tiny_export):
    exp = tiny_export()
    import onnx
    spec = spec_from_onnx(onnx.load(str(exp.path), load_external_data=False))
    plain = create_session(exp.path, "cpu")
    bound = BoundSession(exp.path, provider="cpu")
    a, b = (make_inputs(spec, 2, 16, seed=s) for s in (1, 2))
    names = {i.name for i in plain.get_inputs()}
    for feeds in (a, b, make_inputs(spec, 3, 8, seed=3)):
        bound.bind(feeds)
        want = plain.run(None, {k: v for k, v in feeds.items() if k in names})[0]
        np.testing.assert_allclose(bound.output(), want, rtol=1e-5, atol=1e-5)
    shapes = output_shapes(plain, {k: v.shape for k, v in a.items()})
    assert list(shapes.values())[0] == list(plain.run(None, {k: v for k, v in a.items() if k in names})[0].shape)
    assert list(shapes.values())[0][:2] == [2, 16]


def test_gpu_facts_say_versions_and_no_gpu_here():
    facts = gpu_facts()
    assert facts.onnxruntime == metadata.version("onnxruntime-gpu") and facts.cuda_onnxruntime == cuda_build().cuda
    assert facts.torch and facts.transformers
    if NO_GPU:
        assert facts.gpu is None and facts.line().startswith("no GPU")


# ---------------------------------------------------------------- the GPU variants


def test_each_gpu_variant_is_a_recipe_saying_what_it_is_and_its_tolerance():
    from workbench.measure import variants
    from workbench.measure.variants.labels import variant_label

    gpu_only = [r.name for r in variants.RECIPES if r.devices == ("cuda",)]
    assert gpu_only == ["fused-cudagraph", "fp16-cudagraph", "trt-fp16"]
    tuned = variants.names(tune=True, device="cuda")
    assert set(gpu_only) | {"torch", "torch-compile", "fp16"} <= set(tuned)
    assert not set(gpu_only) & set(variants.names(tune=True))  # the CPU's tune leaves them out
    for name in tuned:
        r = variants.get(name)
        assert r.label and variant_label(name) == r.label and "cuda" in r.devices
        assert "against PyTorch fp32" in r.tolerance.words()
        assert r.tolerance.holds({"max_abs_diff": 0.0, "cosine": 1.0})
        assert not r.tolerance.holds({"max_abs_diff": 1.0, "cosine": 0.9})
        assert not r.tolerance.holds(None)
    fp16, fp32 = variants.get("fp16-cudagraph").tolerance, variants.get("fused-cudagraph").tolerance
    assert fp16.max_abs_diff > fp32.max_abs_diff
    assert variants.get("torch-compile").tolerance == variants.get("fp16").tolerance  # fp16 on CUDA
    assert "reduce-overhead" in variants.get("torch-compile").device_note
    for r in (variants.get(n) for n in gpu_only):  # each kind's runner from the registry, the registry's way
        assert r.runner and variants.runner_for(r.kind).__name__ == r.runner.split(":")[1]


def test_bench_and_tune_help_list_the_gpu_names_from_the_registry():
    from workbench.measure.variants import names

    p = _cli("bench", "--help")
    text = "".join(p.stdout.split())  # argparse wraps the help (at hyphens too)
    assert p.returncode == 0 and all(n in text for n in ("fused-cudagraph,fp16-cudagraph,trt-fp16", "torch-compile"))
    p = _cli("tune", "--help")
    assert p.returncode == 0 and f"cuda:{','.join(names(tune=True, device='cuda'))}timed" in "".join(p.stdout.split())


@needs_no_gpu
def test_gpu_variants_are_built_on_the_standard_models_and_refused_by_the_worker(tiny_export):
    from workbench.config import BenchConfig
    from workbench.measure.harness.bench import benchmark
    from workbench.measure.variants import available, build_variants, runner_for

    fused, v, tc = build_variants("bert-tiny", ["fused", "fused-cudagraph", "torch-compile"], provider="cuda")
    assert v.model == fused.model and v.provider == "cuda" and v.level == fused.level
    assert runner_for(v.kind).__name__ == "CudaGraphRunner"
    assert tc.fp16 and tc.options == {"compile": "reduce-overhead"}  # torch-compile's CUDA mode: one name
    cpu_tc = build_variants("bert-tiny", ["torch-compile"])[0]
    assert not cpu_tc.fp16 and cpu_tc.options == {"compile": True}
    ok, skipped = available(["fused", "fused-cudagraph", "trt-fp16", "torch-compile"], provider="cuda")
    assert ok == ["fused"] and [s["name"] for s in skipped] == ["fused-cudagraph", "trt-fp16", "torch-compile"]
    assert all(cuda_build().words() in s["why"] for s in skipped)
    with pytest.raises(RuntimeUnavailableError, match="GPU only; drop fused-cudagraph or use --provider cuda"):
        available(["fused-cudagraph"], provider="cpu")
    assert available(["torch-compile"], provider="cpu") == (["torch-compile"], [])  # the CPU's inductor variant
    with pytest.raises(RuntimeUnavailableError, match="GPU asked for"):
        benchmark([v], BenchConfig(provider="cuda", batch=1, seq=16, runs=2, warmup=1, threads=1))


@needs_no_gpu
def test_the_gpu_kinds_runners_refuse_in_words_without_a_gpu(tiny_export, tmp_path):
    """What the worker would open for each GPU kind (the registry's runner): a one-line refusal, never a CPU run."""
    from workbench.errors import BenchmarkError
    from workbench.measure.variants import runner_for

    v = {"name": "fused-cudagraph", "model": str(tiny_export().path), "provider": "cuda", "level": "all"}
    with pytest.raises(RuntimeUnavailableError, match="GPU asked for"):
        runner_for("onnx-cudagraph")(v, 1, tmp_path)
    if not tensorrt_status()[0]:
        with pytest.raises(RuntimeUnavailableError, match="^trt-fp16: "):
            runner_for("onnx-tensorrt")(dict(v, name="trt-fp16"), 1, tmp_path)
    with pytest.raises(BenchmarkError, match="does not exist"):
        runner_for("onnx-cudagraph")(dict(v, model=str(tmp_path / "gone.onnx")), 1, tmp_path)


def _cli(*args):
    import subprocess
    import sys
    return subprocess.run([sys.executable, "-m", "workbench.cli", *args], capture_output=True, text=True, timeout=600)


@needs_no_gpu
def test_bench_refuses_gpu_variants_in_one_line_without_a_gpu():
    p = _cli("bench", "bert-tiny", "--provider", "cuda", "--variants", "fused-cudagraph,trt-fp16")
    assert p.returncode == 2 and "Traceback" not in p.stderr
    line = p.stderr.strip().splitlines()[-1]
    assert line.startswith("workbench: error: fused-cudagraph:") and cuda_build().words() in line
    p = _cli("bench", "bert-tiny", "--variants", "fp16-cudagraph")
    assert p.returncode == 2 and "Traceback" not in p.stderr
    line = p.stderr.strip().splitlines()[-1]
    assert line.startswith("workbench: error: ") and line.endswith("GPU only; drop fp16-cudagraph or use --provider cuda")


def test_cuda_graph_variants_refuse_a_text_of_many_lengths_in_one_line():
    from workbench.measure.variants import build_variants, check_fixed_shape

    with pytest.raises(ConfigError, match="fused-cudagraph, fp16-cudagraph replay one captured shape"):
        check_fixed_shape(["fused", "fused-cudagraph", "fp16-cudagraph", "trt-fp16"], text_given=True)
    check_fixed_shape(["fused-cudagraph", "trt-fp16"], text_given=False)
    check_fixed_shape(["trt-fp16", "torch-compile"], text_given=True)
    with pytest.raises(ConfigError, match="fused-cudagraph replay one captured shape"):  # before any export
        build_variants("bert-tiny", ["fused-cudagraph"], provider="cuda", extra={"text": ["a sentence"]})
    p = _cli("bench", "bert-tiny", "--provider", "cuda", "--variants", "fused,fp16-cudagraph", "--text", "builtin")
    assert p.returncode == 2 and "Traceback" not in p.stderr and p.stdout == ""
    assert p.stderr.strip().splitlines()[-1].endswith("time them at one --batch and --seq")


@needs_no_gpu
def test_tune_on_cuda_refuses_in_one_line_naming_why():
    p = _cli("tune", "bert-tiny", "--provider", "cuda")
    assert p.returncode == 2 and "Traceback" not in p.stderr and p.stdout == ""
    lines = p.stderr.strip().splitlines()
    assert lines == [lines[0]] and lines[0].startswith("workbench: error: workbench tune --provider cuda needs a GPU, but ")
    assert "NVIDIA" in lines[0] and cuda_build().words() in lines[0]
    p = _cli("tune", "bert-tiny", "--provider", "cuda", "--text", "builtin")
    assert p.returncode == 2 and p.stderr.strip().endswith("saves nothing yet: drop --text")


@needs_no_gpu
def test_the_gpu_tune_refuses_before_any_work(tmp_path, monkeypatch):
    from workbench.measure.tune.gpu import gpu_tune

    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path / "cache"))
    with pytest.raises(RuntimeUnavailableError, match="needs a GPU, but"):
        gpu_tune("bert-tiny")
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("*.onnx"))


@needs_no_gpu
def test_bench_on_cuda_without_a_gpu_is_one_error_line_and_no_figure():
    p = _cli("bench", "bert-tiny", "--provider", "cuda", "--seq", "16", "--runs", "2", "--warmup", "1")
    assert p.returncode == 2 and p.stdout == "" and "Traceback" not in p.stderr
    assert p.stderr.strip().splitlines()[-1].startswith("workbench: error: workbench bench --provider cuda needs a "
                                                        "GPU, but ")  # before the export, as tune says it


def test_the_apps_gpu_column_follows_the_registry_and_the_real_status():
    """What the app's benchmark times on the GPU: a function of the variant registry and ``gpu_status()``."""
    from workbench.measure import variants
    from workbench.measure.variants.gpu_column import device_plan, gpu_key, gpu_recipes
    from workbench.measure.variants.labels import on_gpu, variant_label

    assert gpu_recipes() == ("fused", "fp16", "fused-cudagraph", "fp16-cudagraph")  # trt-fp16: unfused, TensorRT
    assert all("cuda" in variants.get(n).devices for n in gpu_recipes())
    status = gpu_status()
    plan = device_plan(status)
    if NO_GPU:  # this machine: the CPU only, and the reason in one line, naming the CUDA the package needs
        assert plan.gpu == () and not plan.has_gpu
        assert plan.note == f"no GPU column: {status[1]}" and "\n" not in plan.note
        assert cuda_build().words() in plan.note and metadata.version("onnxruntime-gpu") in plan.note
    else:
        assert plan.gpu == gpu_recipes() and plan.note.startswith("GPU column: ")
    # where a GPU is usable (the status as gpu_status returns it there): fused and fp16 with IO binding, the
    # CUDA graphs at the benchmark's one shape, and left out, in words, when a text's mix of lengths is timed
    up = device_plan((True, "NVIDIA GPU, CUDA execution provider usable"), batch=1, seq=64)
    assert up.gpu == gpu_recipes() and "batch 1 × sequence 64" in up.note
    mixed = device_plan((True, "usable"), text_timed=True)
    assert mixed.gpu == ("fused", "fp16") and "fused-cudagraph, fp16-cudagraph left out" in mixed.note
    assert gpu_key("fused") == "fused@gpu" == gpu_key("fused@gpu") and on_gpu("fp16@gpu") and not on_gpu("fp16")
    assert variant_label("fused@gpu") == f"{variant_label('fused')} · GPU"


def test_a_gpu_variant_on_a_cpu_session_is_an_error():
    """The app's guard on the worker's real session providers: a GPU name on a CPU session never gives a number."""
    from workbench.measure.variants.gpu_column import check_on_gpu
    from workbench.ort.session import probe_model

    got = ort.InferenceSession(probe_model(), providers=["CPUExecutionProvider"]).get_providers()
    check_on_gpu({"fused": got})  # a CPU variant on the CPU is fine
    with pytest.raises(RuntimeUnavailableError, match="fused@gpu: CUDA asked for, but the session runs on "
                                                      "CPUExecutionProvider"):
        check_on_gpu({"fused": got, "fused@gpu": got})
    check_on_gpu({"fused@gpu": [CUDA, "CPUExecutionProvider"]})
