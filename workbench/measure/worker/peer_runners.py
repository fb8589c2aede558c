"""Runners for the peer engines inside the benchmark worker (the shape of ``worker.OrtRunner``).

``OpenVinoRunner`` compiles the same ONNX file with OpenVINO's CPU plugin: ``INFERENCE_NUM_THREADS``
the benchmark's thread count, ``PERFORMANCE_HINT`` LATENCY (one stream), and the variant's
``INFERENCE_PRECISION_HINT`` (absent: OpenVINO's default on this CPU, bf16 where the CPU has native
bf16, f32 on an AVX2-only CPU). OpenVINO's threads are TBB workers, which block rather than spin
between runs. ``compile_torch`` wraps a PyTorch model in ``torch.compile`` (inductor); the
compilation (``dynamic=True``: one graph for every batch and length) happens in the warm-up.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ...errors import BenchmarkError, RuntimeUnavailableError, first_line
from ...ort.inputs import spec_from_onnx
from .peers import compiler_status, import_openvino


def compile_torch(model, name: str, *, reduce_overhead: bool = False):
    """``model`` under ``torch.compile``: inductor with dynamic shapes (one graph for every (batch, length) a
    text brings, instead of a recompile per new shape; the CPU's), or, ``reduce_overhead``, mode
    "reduce-overhead" at one shape: inductor's kernels replayed as CUDA graphs (the GPU's)."""
    import torch

    if reduce_overhead:
        compiled = torch.compile(model, mode="reduce-overhead", dynamic=False)

        def step(*args):
            torch.compiler.cudagraph_mark_step_begin()  # each call a new replay: the last output is read before it
            return compiled(*args)

        return step

    ok, why = compiler_status()
    if not ok:
        raise RuntimeUnavailableError(f"{name}: {why}")
    return torch.compile(model, backend="inductor", dynamic=True)


def ov_config(threads: int, precision: str | None = None, *, shipped: bool = False) -> dict:
    """OpenVINO's compile settings: the thread budget and LATENCY hint (what optimum-intel, and so
    sentence-transformers, passes by default); interleaved runs also pin one stream; ``precision``
    is the inference precision hint (None: OpenVINO's default on this CPU)."""
    cfg = {"INFERENCE_NUM_THREADS": int(threads), "PERFORMANCE_HINT": "LATENCY"}
    if not shipped:
        cfg["NUM_STREAMS"] = 1
    if precision:
        cfg["INFERENCE_PRECISION_HINT"] = precision
    return cfg


class OpenVinoRunner:
    """OpenVINO on the variant's ONNX file, CPU plugin."""

    def __init__(self, v: dict, threads: int, workdir: Path):
        import onnx

        ov = import_openvino()
        self.name, self.provider = v["name"], v["provider"]
        if self.provider != "cpu":
            raise RuntimeUnavailableError(f"{self.name}: the OpenVINO variants run on the CPU only")
        path = Path(v["model"])
        if not path.is_file():
            raise BenchmarkError(f"{self.name}: model file {path} does not exist")
        self.spec = spec_from_onnx(onnx.load(str(path), load_external_data=False))
        self.graph_flops_source = path
        options = v.get("options") or {}
        cfg = ov_config(threads, options.get("precision"), shipped=bool(v.get("spinning")))
        ir = Path(options["ir"]) if options.get("ir") else None  # an OpenVINO IR (the int8 models) beside the ONNX file
        try:
            core = ov.Core()
            self.compiled = core.compile_model(core.read_model(str(ir or path)), "CPU", cfg)
        except Exception as e:
            raise BenchmarkError(f"{self.name}: OpenVINO cannot compile {path.name}: {first_line(e)}") from e
        prec = self.compiled.get_property("INFERENCE_PRECISION_HINT")
        self.precision = prec.get_type_name() if hasattr(prec, "get_type_name") else str(prec)
        self.request = self.compiled.create_infer_request()
        self.input_names = [i.get_any_name() for i in self.compiled.inputs]
        self.providers = [f"OpenVINO CPU ({self.precision})"]

    def prepare(self, feeds: dict) -> None:
        missing = [n for n in self.input_names if n not in feeds]
        if missing:
            raise BenchmarkError(f"{self.name}: the model wants inputs the workbench cannot make: {missing}")
        self.feeds = {n: feeds[n] for n in self.input_names}

    def run(self):
        self.request.infer(self.feeds)
        return self.request

    def output(self):
        self.run()
        return np.array(self.request.get_output_tensor(0).data, dtype=np.float32, copy=True)

    def close(self):
        self.request = None
        self.compiled = None


__all__ = ["OpenVinoRunner", "compile_torch", "ov_config"]
