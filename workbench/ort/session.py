"""ONNX Runtime sessions with explicit providers, levels and threads.

The provider list a session really got is checked after creation: if CUDA
was asked for and the session fell back to CPU, that is an error, never a
number.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import platform
import re
import sys
import tempfile
from pathlib import Path

from ..errors import RuntimeUnavailableError, first_line
from .cuda_build import cuda_build
from .openvino_ep import EP as OPENVINO_EP
from .openvino_ep import add_openvino

LEVELS = {
    "disable": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "all": "ORT_ENABLE_ALL",
}
PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}
#: Execution providers a CPU session can add in front of ONNX Runtime's own CPU provider (``create_session(ep=)``).
EPS = {"openvino": OPENVINO_EP}
#: The session config entry that makes ONNX Runtime keep which provider got each node (1.31 and later).
RECORD_ASSIGNMENT = "session.record_ep_graph_assignment_info"


@contextlib.contextmanager
def native_stderr(sink: list):
    """Capture what native code writes to file descriptor 2 (onnxruntime's loader errors)."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            sink.append(tmp.read().decode("utf-8", "replace"))


def reason_from_log(log: str, provider: str = "the CUDA execution provider") -> str | None:
    """Name the missing piece from onnxruntime's provider-loading log, if it says, with the CUDA and
    cuDNN versions the installed onnxruntime-gpu was built for (read from the package)."""
    m = re.search(r"error: (\S+\.so[\.\d]*): cannot open shared object file", log)
    if m:
        return f"{provider} cannot load {m.group(1)} (this onnxruntime needs {cuda_build().words()})"
    m = re.search(r"\[E:onnxruntime[^\]]*\]\s*(.+)", log)
    return m.group(1).strip()[:300] if m else None


def probe_model() -> bytes:
    from onnx import TensorProto
    from onnx import helper as h

    g = h.make_graph([h.make_node("Identity", ["x"], ["y"])], "probe",
                     [h.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                     [h.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 13)])
    m.ir_version = 8
    return m.SerializeToString()


@functools.lru_cache(maxsize=1)
def cuda_status() -> tuple[bool, str]:
    """Whether the CUDA execution provider can run here, and if not, what is missing.

    onnxruntime-gpu lists CUDAExecutionProvider as available even on machines
    with no GPU, so this opens a real session, and reads onnxruntime's own
    loader messages (kept off the user's terminal) to name a missing library.
    """
    import onnxruntime as ort

    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return False, _no_cuda_build_reason()
    present, why = nvidia_gpu_present()
    if not present:
        return False, why
    return probe_cuda_provider()


#: The NVIDIA driver's CUDA library per platform (installed with the driver, not with the CUDA toolkit).
CUDA_DRIVER_LIBS = {"win32": ("nvcuda.dll",), "linux": ("libcuda.so.1", "libcuda.so")}


def nvidia_gpu_present(platform: str | None = None) -> tuple[bool, str]:
    """Whether an NVIDIA GPU and its driver are here, on any platform, without opening a session.

    The driver's own library (``nvcuda.dll`` on Windows, ``libcuda.so.1`` on Linux) is loaded with
    ctypes and asked for its devices (``cuInit``, ``cuDeviceGetCount``): no ``/dev`` path, which
    Windows never has. macOS has no CUDA at all.
    """
    platform = platform or sys.platform
    names = CUDA_DRIVER_LIBS.get("linux" if platform.startswith("linux") else platform)
    if not names:
        return False, f"no CUDA on {platform}: there is no NVIDIA driver for it"
    lib = None
    for name in names:
        try:
            lib = (ctypes.WinDLL if platform == "win32" and hasattr(ctypes, "WinDLL") else ctypes.CDLL)(name)
            break
        except OSError:
            continue
    if lib is None:
        return False, f"no NVIDIA GPU driver on this machine (cannot load {names[0]})"
    count = ctypes.c_int(0)
    try:
        if lib.cuInit(0) != 0 or lib.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value < 1:
            return False, f"the NVIDIA driver ({names[0]}) finds no usable GPU"
    except AttributeError:
        return False, f"{names[0]} is not an NVIDIA CUDA driver"
    return True, f"{count.value} NVIDIA GPU(s)"


def _no_cuda_build_reason() -> str:
    """Why this installation has no CUDA provider, in the platform's own terms."""
    machine = platform.machine().lower()
    if sys.platform == "darwin":
        return "macOS has no CUDA: the workbench installs the CPU onnxruntime there, so GPU variants are unavailable"
    if machine not in ("x86_64", "amd64"):
        return (f"no CUDA build of ONNX Runtime for {sys.platform} {machine} (onnxruntime-gpu ships wheels for "
                f"x86-64 Linux and Windows only): the CPU onnxruntime is installed, GPU variants are unavailable")
    return ("this onnxruntime build has no CUDAExecutionProvider: install onnxruntime-gpu (and not onnxruntime "
            f"beside it), with {cuda_build().words()} for an NVIDIA GPU")


def probe_cuda_provider() -> tuple[bool, str]:
    """Open a real CUDA session on a one-node model and report what happened."""
    import onnxruntime as ort

    log: list = []
    try:
        with native_stderr(log):
            so = ort.SessionOptions()
            so.log_severity_level = 3
            sess = ort.InferenceSession(probe_model(), so, providers=["CUDAExecutionProvider"])
            ok = "CUDAExecutionProvider" in sess.get_providers()
    except Exception as e:
        return False, f"the CUDA execution provider failed to load: {first_line(e)}"
    if not ok:
        return False, reason_from_log("".join(log)) or cuda_missing_reason()
    return True, "CUDA execution provider available"



def cuda_missing_reason() -> str:
    present, why = nvidia_gpu_present()
    if not present:
        return f"{why}; the CUDA execution provider fell back to CPU"
    return (f"the CUDA execution provider could not start (missing {cuda_build().words()} libraries, or no usable "
            "GPU); ONNX Runtime fell back to CPU")


def session_options(level: str = "all", threads: int | None = None, *, spinning: bool = False,
                    optimized_model_path: str | os.PathLike | None = None, profile_prefix: str | None = None,
                    dynamic_block_base: int = 0, record_assignment: bool = False):
    """Session options with the level and threads explicit, spinning off unless asked; ``record_assignment``:
    keep which provider got each node (:mod:`.assignment` reads it)."""
    import onnxruntime as ort

    if level not in LEVELS:
        raise ValueError(f"level must be one of {sorted(LEVELS)}")
    so = ort.SessionOptions()
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, LEVELS[level])
    so.log_severity_level = 3
    if threads:
        so.intra_op_num_threads = int(threads)
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    # Spinning threads steal cores from other variants measured in turn (MEASURING.md).
    so.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
    so.add_session_config_entry("session.inter_op.allow_spinning", "1" if spinning else "0")
    if dynamic_block_base:
        so.add_session_config_entry("session.dynamic_block_base", str(int(dynamic_block_base)))
    if record_assignment:
        so.add_session_config_entry(RECORD_ASSIGNMENT, "1")
    if optimized_model_path:
        # The optimized model is written whole in its own folder: its large initializers in one data file
        # beside it, whatever folder the source read its external data from.
        so.optimized_model_filepath = str(optimized_model_path)
        so.add_session_config_entry("session.optimized_model_external_initializers_file_name",
                                    Path(optimized_model_path).name + ".data")
        so.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "1024")
    if profile_prefix:
        so.enable_profiling = True
        so.profile_file_prefix = str(profile_prefix)
    return so


def _providers(provider: str, cuda_options: dict | None, ep: str | None, ep_settings: dict | None, so) -> list:
    """The providers list for ``InferenceSession`` (empty when ``ep`` puts its device on ``so`` instead)."""
    if ep is not None:
        if ep not in EPS:
            raise ValueError(f"ep must be one of {sorted(EPS)}")
        if provider != "cpu":
            raise ValueError(f"the {ep} execution provider runs on the CPU here, not on {provider!r}")
        add_openvino(so, ep_settings)  # ONNX Runtime's CPU provider takes the nodes it leaves
        return []
    if provider == "cuda":
        ok, why = cuda_status()
        if not ok:
            raise RuntimeUnavailableError(f"GPU asked for, but {why}")
        return [("CUDAExecutionProvider", dict(cuda_options or {})), "CPUExecutionProvider"]
    return ["CPUExecutionProvider"]


def create_session(model: str | os.PathLike | bytes, provider: str = "cpu", *, level: str = "all",
                   threads: int | None = None, spinning: bool = False,
                   optimized_model_path: str | os.PathLike | None = None,
                   profile_prefix: str | None = None, cuda_options: dict | None = None,
                   disabled_optimizers=(), dynamic_block_base: int = 0, initializers: dict | None = None,
                   ep: str | None = None, ep_settings: dict | None = None, record_assignment: bool = False):
    """Open an InferenceSession and verify it runs on the asked provider.

    ``initializers`` (name → numpy array) give the values of the model's initializers that hold no data
    of their own (weight-store stubs): ONNX Runtime uses the arrays in place, so a 440 MB model opens
    from a small skeleton without first being serialized whole (``fusion.snapshot.session_source``).

    ``disabled_optimizers`` names ONNX Runtime graph transformers to skip
    (see :func:`workbench.fusion.catalog.session_optimizers_off`), so fusions
    switched off in a plan are not redone by the session.

    ``ep`` (a key of :data:`EPS`, "openvino") puts that execution provider's CPU device in front of ONNX
    Runtime's CPU provider, with ``ep_settings`` its own properties (OpenVINO's ``INFERENCE_PRECISION_HINT``,
    ``INFERENCE_NUM_THREADS``, ...); ``threads`` stays the CPU provider's. ``record_assignment``: keep which
    provider got each node (:func:`workbench.ort.assignment.assignment_of`).

    Raises:
        RuntimeUnavailableError: CUDA or ``ep`` asked for but unavailable, or the
            session silently fell back to CPU.
    """
    import onnxruntime as ort

    if provider not in PROVIDERS:
        raise ValueError(f"provider must be one of {sorted(PROVIDERS)}")
    so = session_options(level, threads, spinning=spinning, optimized_model_path=optimized_model_path,
                         profile_prefix=profile_prefix, dynamic_block_base=dynamic_block_base,
                         record_assignment=record_assignment)
    providers = _providers(provider, cuda_options, ep, ep_settings, so)
    src = model if isinstance(model, bytes) else str(model)
    keep = None
    if initializers:
        names = list(initializers)
        keep = [ort.OrtValue.ortvalue_from_numpy(initializers[n]) for n in names]
        so.add_external_initializers(names, keep)
    try:
        kw = {"disabled_optimizers": list(disabled_optimizers)} if disabled_optimizers else {}
        sess = _session_class()(src, so, providers=providers or None, **kw)
    except Exception as e:
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if provider == "cuda" or ep:
            which = "CUDA" if provider == "cuda" else EPS[ep].removesuffix("ExecutionProvider")
            raise RuntimeUnavailableError(f"the {which} execution provider failed to start: {msg}") from e
        raise
    if keep is not None:
        sess._workbench_initializers = (keep, initializers)  # ORT reads these arrays for the session's life
    got = sess.get_providers()
    if provider == "cuda" and got[0] != "CUDAExecutionProvider":
        raise RuntimeUnavailableError(f"GPU asked for, but {cuda_missing_reason()} (session providers: {got})")
    if ep and EPS[ep] not in got:  # ONNX Runtime retries a failed session on the CPU provider alone
        raise RuntimeUnavailableError(f"{EPS[ep]} asked for, but the session runs on {', '.join(got)}")
    return sess


@functools.cache
def _session_class():
    """ONNX Runtime's ``InferenceSession`` without its provider fallback.

    On a failed start, ONNX Runtime's Python side prints four lines to standard output and retries on the CPU
    provider: the same failure again for a CPU session, and for a CUDA one a CPU session this module refuses
    anyway. Without the fallback the first error is raised, and standard output stays the command's own.
    """
    import onnxruntime as ort

    class Session(ort.InferenceSession):
        def _create_inference_session(self, *args, **kwargs):
            self.disable_fallback()
            return super()._create_inference_session(*args, **kwargs)

    return Session


def run_session(sess, feeds: dict) -> list:
    """Run with only the inputs the graph declares (DistilBERT has no token types)."""
    names = {i.name for i in sess.get_inputs()}
    return sess.run(None, {k: v for k, v in feeds.items() if k in names})
