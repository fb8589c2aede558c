"""The GPU around ONNX Runtime: why there is none, which providers really load, CUDA-graph sessions, facts.

* :func:`gpu_status` says in one line whether an NVIDIA GPU, ONNX Runtime's CUDA provider and (when asked)
  PyTorch's CUDA are all usable here, and if not, the first thing missing, naming the CUDA and cuDNN
  versions the installed onnxruntime-gpu needs (:mod:`.cuda_build`, read from the package).
* :func:`tensorrt_status` loads the TensorRT execution provider for real and says why it did not load.
* :func:`guard_providers`: a session asked for CUDA or TensorRT whose ``get_providers()`` lacks it is an
  error, never a number (ONNX Runtime falls back to the CPU silently).
* :class:`BoundSession`: inputs and outputs bound on the device with IO binding, optionally replayed as a
  CUDA graph (``enable_cuda_graph``), which replays one captured shape only (:func:`graph_shape_problem`).
* :func:`gpu_facts`: the GPU's name, driver, CUDA, cuDNN and library versions to put beside every figure.
"""

from __future__ import annotations

import contextlib
import io
import shutil
from dataclasses import asdict, dataclass
from importlib import metadata

from ..errors import ConfigError, RuntimeUnavailableError, first_line
from .cuda_build import cuda_build
from .machine import nvidia_smi
from .session import (PROVIDERS, create_session, cuda_status, native_stderr, nvidia_gpu_present, probe_model,
                      reason_from_log, session_options)

TRT = "TensorrtExecutionProvider"
CUDA = PROVIDERS["cuda"]


def gpu_status(*, torch_too: bool = False) -> tuple[bool, str]:
    """Whether the GPU path can run here, and if not, the first missing piece in one line.

    Order: the NVIDIA driver (``libcuda``; nvidia-smi named when absent too), ONNX Runtime's CUDA
    provider (a real one-node session), then, with ``torch_too``, PyTorch's CUDA.
    """
    present, why = nvidia_gpu_present()
    if not present:
        smi = "" if shutil.which("nvidia-smi") else ", no nvidia-smi on the PATH"
        need = cuda_build()
        return False, f"{why}{smi}; {need.package or 'onnxruntime'} {need.version or ''} is built for {need.words()}"
    ok, why = cuda_status()
    if not ok:
        return False, why
    if torch_too:
        ok, why = torch_cuda_status()
        if not ok:
            return False, why
    return True, "NVIDIA GPU, CUDA execution provider" + (" and PyTorch CUDA" if torch_too else "") + " usable"


def torch_cuda_status() -> tuple[bool, str]:
    """Whether PyTorch can run on the GPU, and if not why (a CPU build, or no device it can see)."""
    try:
        import torch
    except ImportError:
        return False, "PyTorch is not installed"
    if torch.version.cuda is None:
        return False, f"torch {torch.__version__} is a CPU build (no CUDA in it)"
    if not torch.cuda.is_available():
        return False, f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no CUDA device"
    return True, f"torch CUDA {torch.version.cuda}"


def require_gpu(what: str, *, torch_too: bool = False) -> None:
    """Raise a one-line RuntimeUnavailableError unless the GPU path runs here."""
    ok, why = gpu_status(torch_too=torch_too)
    if not ok:
        raise RuntimeUnavailableError(f"{what} needs a GPU, but {why}")


def guard_providers(sess, asked: str) -> None:
    """A session asked for ``asked`` (an execution provider's name) that got another is an error."""
    got = list(sess.get_providers())
    if asked not in got:
        short = {CUDA: "CUDA", TRT: "TensorRT"}.get(asked, asked)
        raise RuntimeUnavailableError(
            f"{short} asked for, but the session runs on {', '.join(got)}: ONNX Runtime fell back silently "
            f"(this onnxruntime needs {cuda_build().words()}); no figure is taken from it")


def _quiet_session(model, providers):
    """A session opened with onnxruntime's loader messages (native stderr, Python prints) kept as text."""
    import onnxruntime as ort

    log: list = []
    out = io.StringIO()
    so = ort.SessionOptions()
    so.log_severity_level = 3
    with native_stderr(log), contextlib.redirect_stdout(out):
        sess = ort.InferenceSession(model, so, providers=providers)
    return sess, "".join(log) + out.getvalue()


def tensorrt_status() -> tuple[bool, str]:
    """Whether ONNX Runtime's TensorRT execution provider loads here, and if not what is missing.

    It is loaded for real on a one-node model: its library, TensorRT's own (``libnvinfer``) and the
    CUDA ones; a listed provider that then falls back to the CPU is reported, never used.
    """
    import onnxruntime as ort

    if TRT not in ort.get_available_providers():
        return False, "this onnxruntime build has no TensorRT execution provider"
    try:
        sess, log = _quiet_session(probe_model(), [TRT])
    except Exception as e:
        return False, f"the TensorRT execution provider failed to load: {first_line(e)}"
    if TRT in sess.get_providers():
        return True, "TensorRT execution provider available"
    why = reason_from_log(log, "the TensorRT execution provider")
    if why is None and "install TensorRT" in log:
        why = "the TensorRT execution provider cannot find TensorRT's libraries (libnvinfer)"
    if why is None:
        present, no_gpu = nvidia_gpu_present()
        why = no_gpu if not present else "the TensorRT execution provider did not start"
    return False, f"{why}; ONNX Runtime fell back to the CPU"


def tensorrt_session(model, provider_options: dict | None = None, *, level: str = "all",
                     record_assignment: bool = False):
    """A session on the TensorRT execution provider (CUDA for the nodes TensorRT leaves), checked to have it;
    ``record_assignment``: keep which provider got each node (:mod:`.assignment`)."""
    import onnxruntime as ort

    ok, why = tensorrt_status()
    if not ok:
        raise RuntimeUnavailableError(f"TensorRT asked for, but {why}")
    providers = [(TRT, dict(provider_options or {})), CUDA, "CPUExecutionProvider"]
    try:
        sess = ort.InferenceSession(model if isinstance(model, bytes) else str(model),
                                    session_options(level, record_assignment=record_assignment), providers=providers)
    except Exception as e:
        raise RuntimeUnavailableError(f"the TensorRT execution provider failed to start: {first_line(e)}") from e
    guard_providers(sess, TRT)
    return sess


@dataclass(frozen=True)
class GraphShape:
    """The one shape a CUDA graph was captured at."""

    batch: int
    seq: int

    def words(self) -> str:
        return f"batch {self.batch} × sequence {self.seq}"


def check_graph_shape(batch, seq, max_positions: int | None = None) -> GraphShape:
    """The shape a CUDA-graph session is captured at: fixed positive integers within the model's positions."""
    for name, x in (("batch", batch), ("sequence", seq)):
        if isinstance(x, bool) or not isinstance(x, int) or x < 1:
            raise ConfigError(f"a CUDA graph is captured at one fixed shape: {name} must be a positive integer, "
                              f"not {x!r}")
    if max_positions and seq > max_positions:
        raise ConfigError(f"sequence {seq} is longer than the model's {max_positions} positions")
    return GraphShape(batch, seq)


def graph_shape_problem(captured: GraphShape, batch: int, seq: int) -> str | None:
    """None when ``batch × seq`` is the captured shape, else the rule in words."""
    if (batch, seq) == (captured.batch, captured.seq):
        return None
    return (f"CUDA graphs replay one captured shape: {captured.words()}; batch {batch} × sequence {seq} "
            f"needs a new session")


def output_shapes(sess, input_shapes: dict) -> dict:
    """Each output's concrete shape, its symbolic dims named after the inputs' (batch, sequence)."""
    sym = {}
    for i in sess.get_inputs():
        for d, n in zip(i.shape, input_shapes.get(i.name, ())):
            if isinstance(d, str):
                sym[d] = n
    shapes = {}
    for o in sess.get_outputs():
        dims = [d if isinstance(d, int) else sym.get(d) for d in o.shape]
        if any(d is None for d in dims):
            raise ConfigError(f"output {o.name}'s shape {o.shape} does not follow from the inputs' dims")
        shapes[o.name] = dims
    return shapes


_NP = {"tensor(float)": "float32", "tensor(float16)": "float16", "tensor(int64)": "int64", "tensor(int32)": "int32"}


class BoundSession:
    """One ONNX Runtime session with its inputs and outputs bound on the device.

    ``cuda_graph=True`` adds ``enable_cuda_graph``: the first runs capture the graph at the shape of the
    feeds given to :meth:`bind`, later runs replay it (launch cost gone), and :meth:`bind` refuses any other
    shape in words. The provider asked for is checked on the session (:func:`guard_providers`).
    """

    def __init__(self, model, *, provider: str = "cuda", cuda_graph: bool = False, level: str = "all",
                 provider_options: dict | None = None):
        if cuda_graph and provider != "cuda":
            raise ConfigError("CUDA graphs need the CUDA execution provider (--provider cuda)")
        opts = dict(provider_options or {})
        if cuda_graph:
            opts["enable_cuda_graph"] = "1"
        self.provider, self.cuda_graph = provider, cuda_graph
        if provider == "tensorrt":
            self.sess = tensorrt_session(model, opts, level=level, record_assignment=True)
        else:
            self.sess = create_session(model, provider, level=level, cuda_options=opts, record_assignment=True)
            guard_providers(self.sess, PROVIDERS[provider])
        self.device = "cpu" if provider == "cpu" else "cuda"
        self.shape: GraphShape | None = None
        self.binding = None

    def bind(self, feeds: dict) -> None:
        """Put ``feeds`` (the graph's inputs, numpy) on the device; outputs preallocated there."""
        import numpy as np
        import onnxruntime as ort

        names = [i.name for i in self.sess.get_inputs()]
        feeds = {k: v for k, v in feeds.items() if k in names}
        b, s = next(iter(feeds.values())).shape[:2]
        if self.shape is not None and self.cuda_graph and (why := graph_shape_problem(self.shape, b, s)):
            raise ConfigError(why)
        if self.shape is not None and (b, s) == (self.shape.batch, self.shape.seq):
            for k, v in feeds.items():  # same buffers, new values: what a captured graph reads
                self._inputs[k].update_inplace(np.ascontiguousarray(v))
            return
        self.shape = check_graph_shape(int(b), int(s))
        self._inputs = {k: ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(v), self.device, 0)
                        for k, v in feeds.items()}
        types = {o.name: _NP.get(o.type, "float32") for o in self.sess.get_outputs()}
        try:
            shapes = output_shapes(self.sess, {k: v.shape for k, v in feeds.items()})
        except ConfigError:  # dims the inputs' do not name: one plain run tells them
            shapes = {o.name: list(a.shape) for o, a in zip(self.sess.get_outputs(), self.sess.run(None, feeds))}
        self._outputs = {n: ort.OrtValue.ortvalue_from_shape_and_type(shape, np.dtype(types[n]), self.device, 0)
                         for n, shape in shapes.items()}
        binding = self.sess.io_binding()
        for k, ov in self._inputs.items():
            binding.bind_ortvalue_input(k, ov)
        for k, ov in self._outputs.items():
            binding.bind_ortvalue_output(k, ov)
        self.binding = binding

    def run(self) -> None:
        """One run on the bound buffers, finished on the device when it returns."""
        self.sess.run_with_iobinding(self.binding)
        self.binding.synchronize_outputs()

    def output(self):
        """The first output as float32 numpy (copied back from the device)."""
        import numpy as np

        self.run()
        return np.asarray(next(iter(self._outputs.values())).numpy(), dtype=np.float32)


@dataclass(frozen=True)
class GpuFacts:
    """What a GPU figure came from."""

    gpu: str | None
    driver: str | None
    memory: str | None
    cuda_torch: str | None
    cudnn_torch: str | None
    cuda_onnxruntime: str | None
    onnxruntime: str | None
    torch: str | None
    transformers: str | None
    onnx: str | None

    def line(self) -> str:
        gpu = f"{self.gpu} ({self.memory}), driver {self.driver}" if self.gpu else "no GPU"
        return (f"{gpu}; CUDA {self.cuda_torch or '-'} (torch), {self.cuda_onnxruntime or '-'} (onnxruntime build), "
                f"cuDNN {self.cudnn_torch or '-'}; onnxruntime {self.onnxruntime or '-'}, torch {self.torch or '-'}, "
                f"transformers {self.transformers or '-'}, onnx {self.onnx or '-'}")

    def to_dict(self) -> dict:
        return asdict(self)


def _smi() -> list[str]:
    rows = nvidia_smi("name,driver_version,memory.total")
    return [c.strip() for c in rows[0].split(",")] if rows else []


def _version(pkg: str) -> str | None:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return None


def gpu_facts() -> GpuFacts:
    """The GPU (nvidia-smi: name, driver, memory) and the CUDA, cuDNN and library versions in use."""
    name, driver, mem = (_smi() + [None, None, None])[:3]
    cuda_t = cudnn_t = None
    try:
        import torch

        cuda_t = torch.version.cuda
        if cuda_t and torch.cuda.is_available():
            name = name or torch.cuda.get_device_name(0)
            cudnn_t = str(torch.backends.cudnn.version())
    except ImportError:
        pass
    return GpuFacts(name, driver, mem, cuda_t, cudnn_t, cuda_build().cuda,
                    _version("onnxruntime-gpu") or _version("onnxruntime"), _version("torch"),
                    _version("transformers"), _version("onnx"))


__all__ = ["gpu_status", "torch_cuda_status", "require_gpu", "guard_providers", "tensorrt_status", "GraphShape",
           "check_graph_shape", "graph_shape_problem", "tensorrt_session", "output_shapes", "BoundSession", "GpuFacts", "gpu_facts",
           "TRT", "CUDA"]
