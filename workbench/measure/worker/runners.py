"""The benchmark worker's runners: one ONNX Runtime session or one PyTorch model, each with
``prepare(feeds)``, ``run()``, ``output()`` and ``close()`` (OpenVINO's is in :mod:`.peer_runners`, the other
engines' beside their recipes in :mod:`.variants`).

Imported inside the worker process only, after its environment is set.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

from ...errors import BenchmarkError, RuntimeUnavailableError, WorkbenchError, first_line
from ...export import keyword_wrapper
from ...models import resolve
from ...ort.assignment import assignment_of
from ...ort.inputs import InputSpec, spec_from_onnx
from ...ort.session import create_session
from .kinds import runner_for
from .peer_runners import compile_torch, ov_config
from .precision import is_fp16, to_fp16

_OOM_MARKERS = ("failed to allocate memory", "bad_alloc", "out of memory", "cannot allocate memory",
                "std::bad_alloc", "cudaerrormemoryallocation", "cuda_error_out_of_memory")


def is_oom(e: BaseException) -> bool:
    return isinstance(e, MemoryError) or any(m in str(e).lower() for m in _OOM_MARKERS)


def run_error(e: BaseException, name: str, batch: int, seq: int):
    """Turn a native run failure into the user's one-line BenchmarkError."""
    if isinstance(e, WorkbenchError):
        return e
    if is_oom(e):
        return BenchmarkError(f"out of memory running {name} at batch {batch}, sequence {seq}: "
                              f"use a smaller batch or sequence")
    return BenchmarkError(f"{name} failed at batch {batch}, sequence {seq}: {first_line(e)}")


class OrtRunner:
    """One ONNX Runtime session; on CUDA, inputs and outputs stay on the device (IO binding)."""

    def __init__(self, v: dict, threads: int, workdir: Path):
        self.name, self.provider = v["name"], v["provider"]
        path = Path(v["model"])
        if not path.is_file():
            raise BenchmarkError(f"{self.name}: model file {path} does not exist")
        try:
            proto = onnx.load(str(path), load_external_data=False)
        except Exception as e:
            raise BenchmarkError(f"{self.name}: cannot read {path.name}: {first_line(e)}") from e
        self.spec = spec_from_onnx(proto)
        self.graph_flops_source = path
        if v.get("fp16"):
            if not is_fp16(onnx.load(str(path))):
                path = to_fp16(path, workdir / f"{len(list(workdir.iterdir()))}-fp16.onnx")
        del proto
        kw = {}
        if v.get("profile_prefix"):
            kw["profile_prefix"] = v["profile_prefix"]
        if v.get("optimized_model_path"):
            kw["optimized_model_path"] = v["optimized_model_path"]
        if v.get("disabled_optimizers"):
            kw["disabled_optimizers"] = tuple(v["disabled_optimizers"])
        if v.get("dynamic_block_base"):
            kw["dynamic_block_base"] = int(v["dynamic_block_base"])
        if v.get("spinning"):
            kw["spinning"] = True  # as ONNX Runtime ships (measured alone, in time slices of its own)
        opts = v.get("options") or {}
        if opts.get("ep"):  # another execution provider in front of the CPU one, with its own threads
            kw.update(ep=opts["ep"], ep_settings=ov_config(threads, opts.get("precision"),
                                                           shipped=bool(v.get("spinning"))))
        level = v.get("level", "all")
        try:
            self.sess = create_session(path, self.provider, level=level, threads=threads, record_assignment=True, **kw)
        except (ValueError, OSError) as e:
            raise BenchmarkError(f"{self.name}: {first_line(e)}") from e
        except Exception as e:
            if isinstance(e, WorkbenchError):
                raise
            raise BenchmarkError(f"{self.name}: ONNX Runtime cannot open the model: {first_line(e)}") from e
        self.providers = self.sess.get_providers()
        #: Which provider runs each node (:class:`~workbench.ort.assignment.Assignment`; None on an older onnxruntime).
        self.assignment = assignment_of(self.sess, path, self.providers[0], level)
        self.input_names = [i.name for i in self.sess.get_inputs()]
        self.output_name = self.sess.get_outputs()[0].name
        self.binding = None

    def prepare(self, feeds: dict) -> None:
        self.feeds = {k: v for k, v in feeds.items() if k in self.input_names}
        missing = [n for n in self.input_names if n not in self.feeds]
        if missing:
            raise BenchmarkError(f"{self.name}: the model wants inputs the workbench cannot make: {missing}")
        if self.provider == "cuda":
            self._bind()

    def _bind(self) -> None:
        import onnxruntime as ort

        b = self.sess.io_binding()
        self._device_inputs = {k: ort.OrtValue.ortvalue_from_numpy(v, "cuda", 0) for k, v in self.feeds.items()}
        for k, ov in self._device_inputs.items():
            b.bind_ortvalue_input(k, ov)
        for out in self.sess.get_outputs():
            b.bind_output(out.name, "cuda")
        # One run tells the output shapes; then outputs are preallocated on the device.
        self.sess.run_with_iobinding(b)
        shapes = [o.shape() for o in b.get_outputs()]
        types = [o.data_type() for o in b.get_outputs()]
        b.clear_binding_outputs()
        np_types = {"tensor(float)": np.float32, "tensor(float16)": np.float16}
        self._device_outputs = []
        for out, shape, t in zip(self.sess.get_outputs(), shapes, types):
            ov = ort.OrtValue.ortvalue_from_shape_and_type(shape, np_types.get(t, np.float32), "cuda", 0)
            b.bind_ortvalue_output(out.name, ov)
            self._device_outputs.append(ov)
        self.binding = b

    def run(self):
        if self.binding is not None:
            self.sess.run_with_iobinding(self.binding)
            self.binding.synchronize_outputs()
            return None
        return self.sess.run([self.output_name], self.feeds)

    def output(self):
        if self.binding is not None:
            self.run()
            return np.asarray(self._device_outputs[0].numpy(), dtype=np.float32)
        return np.asarray(self.run()[0], dtype=np.float32)

    def close(self):
        self.binding = None
        self.sess = None


class TorchRunner:
    """PyTorch eager on the same weights: the "before" users know."""

    def __init__(self, v: dict, threads: int, workdir: Path):
        import torch

        self.name, self.provider = v["name"], v["provider"]
        src = dict(v.get("torch_source") or {})
        if not src.get("model"):
            raise BenchmarkError(f"{self.name}: a torch variant needs torch_source={{'model': name or folder}}")
        try:
            source = resolve(src["model"], **({"seed": int(src["seed"])} if "seed" in src else {}))
            model = source.build(src.get("attention", "eager"))
        except WorkbenchError:
            raise
        except Exception as e:
            raise BenchmarkError(f"{self.name}: cannot build the PyTorch model: {first_line(e)}") from e
        self.source = source
        self.spec = InputSpec(names=source.input_names, vocab_size=source.vocab_size,
                              type_vocab_size=int(source.config_dict.get("type_vocab_size", 2)),
                              max_positions=source.max_positions)
        self.model = keyword_wrapper(model, source.input_names)
        self.device = torch.device("cuda" if self.provider == "cuda" else "cpu")
        if self.provider == "cuda":
            if not torch.cuda.is_available():
                raise RuntimeUnavailableError("GPU asked for the torch variant, but torch sees no CUDA device "
                                              f"(torch {torch.__version__})")
            self.model = self.model.to(self.device)
        if v.get("fp16"):
            self.model = self.model.half()
        self.providers = [f"torch-{self.device.type}"]
        mode = (v.get("options") or {}).get("compile")  # True: inductor, dynamic; "reduce-overhead": CUDA graphs
        if mode:
            graphs = mode == "reduce-overhead"
            self.model = compile_torch(self.model, self.name, reduce_overhead=graphs)
            self.providers = [f"torch-{self.device.type}-inductor" + ("-cudagraphs" if graphs else "")]
        self.input_names = list(source.input_names)

    def prepare(self, feeds: dict) -> None:
        import torch
        self.args = tuple(torch.from_numpy(feeds[n]).to(self.device) for n in self.input_names)

    def run(self):
        import torch
        with torch.inference_mode():
            out = self.model(*self.args)
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        return out

    def output(self):
        return np.asarray(self.run().float().cpu().numpy(), dtype=np.float32)

    def close(self):
        self.model = None


def make_runner(v: dict, threads: int, workdir: Path):
    """The runner of the variant's kind (:data:`.kinds.RUNNERS`, the same its recipe names)."""
    return runner_for(v.get("kind") or "onnx")(v, threads, workdir)


__all__ = ["OrtRunner", "TorchRunner", "make_runner", "run_error", "is_oom"]
