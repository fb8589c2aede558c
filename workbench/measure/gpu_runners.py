"""The benchmark worker's runners for the GPU variants (:mod:`.gpu_variants`): ONNX Runtime with CUDA graphs or
TensorRT through :class:`~workbench.ort.gpu.BoundSession` (inputs and outputs on the device), and torch.compile in
reduce-overhead mode over the worker's own PyTorch runner (:func:`.runners.make_runner` dispatches on
``options["gpu"]``). Imported inside the worker process only."""

from __future__ import annotations

from pathlib import Path

from ..errors import RuntimeUnavailableError
from ..ort.gpu import BoundSession, tensorrt_status


def tensorrt_options(cache_dir: Path, fp16: bool = True) -> dict:
    """TensorRT provider options: fp16, and built engines kept in ``cache_dir`` (a build takes minutes)."""
    return {"trt_fp16_enable": "1" if fp16 else "0", "trt_engine_cache_enable": "1",
            "trt_engine_cache_path": str(cache_dir), "trt_timing_cache_enable": "1",
            "trt_timing_cache_path": str(cache_dir)}


class GpuOrtRunner:
    """The benchmark worker's runner for ``options["gpu"]`` in ``cuda-graph`` / ``tensorrt``: a
    :class:`~workbench.ort.gpu.BoundSession`, so inputs and outputs stay on the device."""

    def __init__(self, v: dict, threads: int, workdir: Path):
        import onnx

        from ..ort.inputs import spec_from_onnx

        how = v["options"]["gpu"]
        self.name, self.provider = v["name"], "cuda"
        self.graph_flops_source = Path(v["model"])
        self.spec = spec_from_onnx(onnx.load(str(v["model"]), load_external_data=False))
        if how == "tensorrt":
            ok, why = tensorrt_status()
            if not ok:
                raise RuntimeUnavailableError(f"{self.name}: {why}")
            self.bound = BoundSession(v["model"], provider="tensorrt",
                                      provider_options=tensorrt_options(Path(workdir) / "trt"))
        else:
            self.bound = BoundSession(v["model"], provider="cuda", cuda_graph=True, level=v.get("level", "all"))
        self.providers = self.bound.sess.get_providers()
        self.input_names = [i.name for i in self.bound.sess.get_inputs()]

    def prepare(self, feeds: dict) -> None:
        self.bound.bind(feeds)

    def run(self):
        self.bound.run()

    def output(self):
        return self.bound.output()

    def close(self):
        self.bound = None


def compile_reduce_overhead(r):
    """A TorchRunner's model (on CUDA, fp16) under ``torch.compile(mode="reduce-overhead")``: CUDA graphs."""
    import torch

    compiled = torch.compile(r.model, mode="reduce-overhead", dynamic=False)

    def step(*args):
        torch.compiler.cudagraph_mark_step_begin()  # each call a new replay: the last output is read before it
        return compiled(*args)

    r.model = step
    r.providers = ["torch-cuda-inductor-cudagraphs"]
    return r


__all__ = ["GpuOrtRunner", "compile_reduce_overhead", "tensorrt_options"]
