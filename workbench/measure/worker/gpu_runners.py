"""The benchmark worker's runners for the GPU recipes of :mod:`.variants.cuda`: ONNX Runtime with CUDA graphs
(kind ``onnx-cudagraph``) or TensorRT (``onnx-tensorrt``) through :class:`~workbench.ort.gpu.BoundSession`
(inputs and outputs on the device), named by their recipes' ``runner``. Imported inside the worker process
only. (torch.compile's CUDA graphs are the worker's PyTorch runner in reduce-overhead mode.)"""

from __future__ import annotations

from pathlib import Path

from ...errors import BenchmarkError, RuntimeUnavailableError
from ...ort.assignment import assignment_of
from ...ort.gpu import BoundSession, tensorrt_status
from ...ort.inputs import spec_from_onnx


def tensorrt_options(cache_dir: Path, fp16: bool = True) -> dict:
    """TensorRT provider options: fp16, and built engines kept in ``cache_dir`` (a build takes minutes)."""
    return {"trt_fp16_enable": "1" if fp16 else "0", "trt_engine_cache_enable": "1",
            "trt_engine_cache_path": str(cache_dir), "trt_timing_cache_enable": "1",
            "trt_timing_cache_path": str(cache_dir)}


class BoundRunner:
    """A :class:`~workbench.ort.gpu.BoundSession` as the benchmark worker's runner: inputs and outputs stay on
    the device. Its subclasses say how the session is opened."""

    def __init__(self, v: dict, threads: int, workdir: Path):
        import onnx

        self.name, self.provider = v["name"], "cuda"
        path = Path(v["model"])
        if not path.is_file():
            raise BenchmarkError(f"{self.name}: model file {path} does not exist")
        self.graph_flops_source = path
        self.spec = spec_from_onnx(onnx.load(str(path), load_external_data=False))
        self.bound = self.open(v, Path(workdir))
        self.providers = self.bound.sess.get_providers()
        self.assignment = assignment_of(self.bound.sess, path, self.providers[0], v.get("level", "all"))
        self.input_names = [i.name for i in self.bound.sess.get_inputs()]

    def open(self, v: dict, workdir: Path) -> BoundSession:
        raise NotImplementedError

    def prepare(self, feeds: dict) -> None:
        self.bound.bind(feeds)

    def run(self):
        self.bound.run()

    def output(self):
        return self.bound.output()

    def close(self):
        self.bound = None


class CudaGraphRunner(BoundRunner):
    """The CUDA provider with ``enable_cuda_graph``: captured at the first shape, replayed after."""

    def open(self, v: dict, workdir: Path) -> BoundSession:
        return BoundSession(v["model"], provider="cuda", cuda_graph=True, level=v.get("level", "all"))


class TensorRtRunner(BoundRunner):
    """ONNX Runtime's TensorRT execution provider, fp16, its engines cached in the worker's folder."""

    def open(self, v: dict, workdir: Path) -> BoundSession:
        ok, why = tensorrt_status()
        if not ok:
            raise RuntimeUnavailableError(f"{self.name}: {why}")
        return BoundSession(v["model"], provider="tensorrt", provider_options=tensorrt_options(workdir / "trt"))


__all__ = ["BoundRunner", "CudaGraphRunner", "TensorRtRunner", "tensorrt_options"]
