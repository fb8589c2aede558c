"""The benchmark worker: a spawned process that builds, warms up and times variants.

Timing happens here, never in the caller (a notebook kernel's event loop
disturbs timings, and a native crash must not take the kernel down). The
protocol is plain dicts over a ``multiprocessing`` pipe:

caller → worker
    ``{"cmd": "start", "job": {...}}`` once, then optionally ``{"cmd": "stop"}``.
worker → caller
    ``{"type": "status", "stage", "variant", "index", "count"}`` while building,
    ``{"type": "ready", "variants": [...], "machine": {...}}``,
    ``{"type": "floor", "floor_ms", "flops", "gflops", "matmul_bound_ms", "stream_gflops"}``,
    ``{"type": "sample", "variant", "run_index", "ms"}`` per timed run,
    ``{"type": "parity", "variant", "max_abs_diff", "cosine"}``,
    ``{"type": "profile", "records": [...], ...}`` for profiling jobs,
    then exactly one of ``{"type": "done", "stopped"}`` or
    ``{"type": "error", "error": class name, "message"}``.

This module imports neither torch nor onnxruntime at import time: the
environment (OMP_WAIT_POLICY=PASSIVE, thread counts) must be in place before
either library loads.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import traceback
from pathlib import Path

from ..errors import first_line as _first_line

#: Set in the worker's environment before torch or onnxruntime load.
WORKER_ENV = {"OMP_WAIT_POLICY": "PASSIVE", "KMP_BLOCKTIME": "0", "TOKENIZERS_PARALLELISM": "false",
              "TF_CPP_MIN_LOG_LEVEL": "3"}
_OOM_MARKERS = ("failed to allocate memory", "bad_alloc", "out of memory", "cannot allocate memory",
                "std::bad_alloc", "cudaerrormemoryallocation", "cuda_error_out_of_memory")


class _Stop(Exception):
    """The caller asked the worker to stop."""



def _is_oom(e: BaseException) -> bool:
    return isinstance(e, MemoryError) or any(m in str(e).lower() for m in _OOM_MARKERS)


def _run_error(e: BaseException, name: str, batch: int, seq: int):
    """Turn a native run failure into the user's one-line BenchmarkError."""
    from ..errors import BenchmarkError, WorkbenchError

    if isinstance(e, WorkbenchError):
        return e
    if _is_oom(e):
        return BenchmarkError(f"out of memory running {name} at batch {batch}, sequence {seq}: "
                              f"use a smaller batch or sequence")
    return BenchmarkError(f"{name} failed at batch {batch}, sequence {seq}: {_first_line(e)}")


# ----------------------------------------------------------------- runners
class OrtRunner:
    """One ONNX Runtime session; on CUDA, inputs and outputs stay on the device (IO binding)."""

    def __init__(self, v: dict, threads: int, workdir: Path):
        from ..errors import BenchmarkError
        from ..ort.inputs import spec_from_onnx
        from ..ort.session import create_session
        import onnx

        self.name, self.provider = v["name"], v["provider"]
        path = Path(v["model"])
        if not path.is_file():
            raise BenchmarkError(f"{self.name}: model file {path} does not exist")
        try:
            proto = onnx.load(str(path), load_external_data=False)
        except Exception as e:
            raise BenchmarkError(f"{self.name}: cannot read {path.name}: {_first_line(e)}") from e
        self.spec = spec_from_onnx(proto)
        self.graph_flops_source = path
        if v.get("fp16"):
            from .precision import is_fp16, to_fp16
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
        try:
            self.sess = create_session(path, self.provider, level=v.get("level", "all"), threads=threads, **kw)
        except (ValueError, OSError) as e:
            raise BenchmarkError(f"{self.name}: {_first_line(e)}") from e
        except Exception as e:
            from ..errors import WorkbenchError
            if isinstance(e, WorkbenchError):
                raise
            raise BenchmarkError(f"{self.name}: ONNX Runtime cannot open the model: {_first_line(e)}") from e
        self.providers = self.sess.get_providers()
        self.input_names = [i.name for i in self.sess.get_inputs()]
        self.output_name = self.sess.get_outputs()[0].name
        self.binding = None

    def prepare(self, feeds: dict) -> None:
        self.feeds = {k: v for k, v in feeds.items() if k in self.input_names}
        missing = [n for n in self.input_names if n not in self.feeds]
        if missing:
            from ..errors import BenchmarkError
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
        import numpy as np
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
        import numpy as np
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
        from ..errors import BenchmarkError, WorkbenchError
        from ..export import _wrap
        from ..models import resolve
        from ..ort.inputs import InputSpec

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
            raise BenchmarkError(f"{self.name}: cannot build the PyTorch model: {_first_line(e)}") from e
        self.source = source
        self.spec = InputSpec(names=source.input_names, vocab_size=source.vocab_size,
                              type_vocab_size=int(source.config_dict.get("type_vocab_size", 2)),
                              max_positions=source.max_positions)
        self.model = _wrap(model, source.input_names)
        self.device = torch.device("cuda" if self.provider == "cuda" else "cpu")
        if self.provider == "cuda":
            if not torch.cuda.is_available():
                from ..errors import RuntimeUnavailableError
                raise RuntimeUnavailableError("GPU asked for the torch variant, but torch sees no CUDA device "
                                              f"(torch {torch.__version__})")
            self.model = self.model.to(self.device)
        if v.get("fp16"):
            self.model = self.model.half()
        self.providers = [f"torch-{self.device.type}"]
        if (v.get("options") or {}).get("compile"):
            from .peer_runners import compile_torch
            self.model = compile_torch(self.model, self.name)
            self.providers = [f"torch-{self.device.type}-inductor"]
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
        import numpy as np
        return np.asarray(self.run().float().cpu().numpy(), dtype=np.float32)

    def close(self):
        self.model = None


def _make_runner(v: dict, threads: int, workdir: Path):
    if v.get("kind") == "openvino":
        from .peer_runners import OpenVinoRunner
        return OpenVinoRunner(v, threads, workdir)
    return TorchRunner(v, threads, workdir) if v.get("kind") == "torch" else OrtRunner(v, threads, workdir)


# ----------------------------------------------------------------- main loop
class _Channel:
    """The worker's end of the pipe: send dicts, notice a stop request."""

    def __init__(self, conn):
        self.conn = conn
        self.stopped = False

    def send(self, msg: dict) -> None:
        self.conn.send(msg)

    def check_stop(self) -> None:
        while not self.stopped and self.conn.poll():
            try:
                msg = self.conn.recv()
            except (EOFError, OSError):
                msg = {"cmd": "stop"}  # the caller went away: stop rather than run on
            if msg.get("cmd") == "stop":
                self.stopped = True
        if self.stopped:
            raise _Stop


def _set_threads(threads: int) -> None:
    try:
        import torch
        torch.set_num_threads(threads)
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError:
            pass  # already set in this process
    except ImportError:
        pass


def _worker_info() -> dict:
    """What the worker really runs with, for the caller to check."""
    info = {"pid": os.getpid(), "env": {k: os.environ.get(k) for k in WORKER_ENV}, "torch_threads": None}
    import sys
    if "torch" in sys.modules:
        info["torch_threads"] = sys.modules["torch"].get_num_threads()
    return info


def _fault(kind: str | None, where: str) -> None:
    """Test-only hooks that make the worker die the way native code does."""
    if not kind or not kind.endswith(where):
        return
    if kind.startswith("segfault"):
        import ctypes
        ctypes.string_at(0)
    elif kind.startswith("abort"):
        os.abort()
    elif kind.startswith("exit"):
        os._exit(3)


def _bench(ch: _Channel, job: dict, workdir: Path) -> None:
    from ..errors import BenchmarkError
    from ..ort.inputs import make_inputs
    from ..ort.machine import describe_machine

    cfg = job["cfg"]
    threads, batch, seq = int(cfg["threads"]), int(cfg["batch"]), int(cfg["seq"])
    fault = job.get("fault")
    if job.get("memory_limit_mb"):
        import resource
        limit = int(job["memory_limit_mb"]) * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    _set_threads(threads)
    variants = [dict(v, dynamic_block_base=int(cfg.get("dynamic_block_base") or 0)) for v in job["variants"]]
    runners = []
    for i, v in enumerate(variants):
        ch.check_stop()
        ch.send({"type": "status", "stage": "building", "variant": v["name"], "index": i, "count": len(variants)})
        try:
            runners.append(_make_runner(v, threads, workdir))
        except MemoryError as e:
            raise _run_error(e, v["name"], batch, seq) from e
    _fault(fault, "build")
    machine = describe_machine(threads, check_cuda=any(v["provider"] == "cuda" for v in variants))
    ch.send({"type": "ready", "machine": machine, "worker": _worker_info(),
             "variants": [{"name": r.name, "provider": r.provider, "session_providers": r.providers}
                          for r in runners]})
    # Real text: tokenized batches of mixed lengths, cycled through round by round (the same batch for
    # every variant in a round); otherwise one seeded random batch at the configured shape.
    text = job.get("text")
    batches = list(text["batches"]) if text else []
    # answers_only: the answers are checked on the text, the timing stays at the configured shape.
    timed = [] if text and text.get("answers_only") else batches
    if timed:
        by_len = sorted(timed, key=lambda b: b["input_ids"].shape[1])
        batch, seq = (int(x) for x in by_len[len(by_len) // 2]["input_ids"].shape)  # the floor's shape: the median
    for r in runners:
        longest = max((b["input_ids"].shape[1] for b in batches), default=seq)
        if max(longest, seq) > r.spec.max_positions:
            raise BenchmarkError(f"sequence {max(longest, seq)} is longer than {r.name}'s {r.spec.max_positions} "
                                 f"positions")
        fixed = None if timed else make_inputs(r.spec, batch, seq, seed=int(cfg.get("seed", 0)))
        r.fixed = fixed
        try:
            r.prepare(timed[0] if timed else fixed)
        except Exception as e:
            raise _run_error(e, r.name, batch, seq) from e
    # Warm-up, round robin, and the first output of each variant for parity (every text batch's, with text).
    outputs = {}
    for w in range(max(1, int(cfg.get("warmup", 5)))):
        for r in runners:
            ch.check_stop()
            ch.send({"type": "status", "stage": "warm-up", "variant": r.name, "index": w,
                     "count": int(cfg.get("warmup", 5))})
            try:
                if w == 0 and batches:
                    outputs[r.name] = [r.prepare(b) or r.output() for b in batches]
                    r.prepare(timed[0] if timed else r.fixed)
                    r.run()  # the timed shape warmed too (torch.compile compiles per shape)
                elif w == 0:
                    outputs[r.name] = r.output()
                else:
                    r.run()
            except Exception as e:
                raise _run_error(e, r.name, batch, seq) from e
    ref_name = job.get("reference") or runners[0].name
    ref = outputs.get(ref_name)
    if ref is not None:
        from ..ort.parity import compare
        for r in runners:
            if r.name != ref_name:
                p = compare(ref, outputs[r.name])
                msg = {"type": "parity", "variant": r.name, "reference": ref_name,
                       "max_abs_diff": p.max_abs_diff, "cosine": p.cosine}
                if batches:
                    from ..ort.task_parity import task_parity
                    msg["task_parity"] = task_parity(text["kind"], ref, outputs[r.name], batches,
                                                     mask_token_id=text.get("mask_token_id"))
                ch.send(msg)
    outputs.clear()
    if job.get("floor", True):
        ch.send({"type": "status", "stage": "floor", "variant": None, "index": 0, "count": 1})
        ch.send(_floor(job, runners, threads, batch, seq))
    import time as _t
    perf = _t.perf_counter
    for i in range(int(cfg["runs"])):
        feeds = timed[i % len(timed)] if len(timed) > 1 else None
        for r in runners:
            ch.check_stop()
            try:
                if feeds is not None:
                    r.prepare(feeds)  # outside the timed span
                t0 = perf()
                r.run()
                ms = (perf() - t0) * 1e3
            except Exception as e:
                raise _run_error(e, r.name, batch, seq) from e
            ch.send({"type": "sample", "variant": r.name, "run_index": i, "ms": ms})
            _fault(fault, "sample")
    for r in runners:
        r.close()


def _floor(job: dict, runners: list, threads: int, batch: int, seq: int) -> dict:
    """Each variant's FLOPs at this shape over this machine's measured rate for its own precision.

    An int8 model is held against the int8 rate (and its fp32 attention products against the fp32
    rate), never against the fp32 floor alone. ``floor_ms`` uses the hot rates (the fastest MatMul
    here); ``matmul_bound_ms`` the streaming rates (weights read from memory, as in a real model).
    The top-level ``floor_ms``/``gflops`` stay the fp32 figures of the first variant.
    """
    from .floor import PRECISIONS, machine_matmul_info, model_flops, onnx_flops_by_precision, precision_label

    provider = runners[0].provider
    try:
        per = {r.name: ({"fp32": model_flops(r.source, batch, seq)} if isinstance(r, TorchRunner)
                        else onnx_flops_by_precision(r.graph_flops_source, batch, seq)) for r in runners}
        precisions = sorted({p for f in per.values() for p in f} | {"fp32"}, key=PRECISIONS.index)
        rates = {}
        for prec in precisions:
            hot = machine_matmul_info(threads, provider, prec)
            rate = {"precision": prec, "unit": "GOP/s" if prec == "int8" else "GFLOP/s", "hot": hot["gflops"],
                    "quiet": hot.get("quiet"), "measured": hot.get("measured"), "stream": None}
            try:
                rate["stream"] = machine_matmul_info(threads, provider, prec, kind="stream")["gflops"]
            except Exception as e:  # optional; the floor stands without it
                rate["stream_reason"] = _first_line(e)
            rates[prec] = rate
        variants = {}
        for name, f in per.items():
            bound = (sum(v / (rates[p]["stream"] * 1e9) for p, v in f.items()) * 1e3
                     if all(rates[p]["stream"] for p in f) else None)
            variants[name] = {"floor_ms": sum(v / (rates[p]["hot"] * 1e9) for p, v in f.items()) * 1e3,
                              "floor_precision": precision_label(f), "matmul_bound_ms": bound, "flops": f}
        flops = sum(per[runners[0].name].values())
        fp32 = rates["fp32"]
        out = {"type": "floor", "floor_ms": flops / (fp32["hot"] * 1e9) * 1e3, "flops": flops,
               "gflops": fp32["hot"], "rate_measured": fp32["measured"], "rate_quiet": fp32["quiet"],
               "matmul_bound_ms": flops / (fp32["stream"] * 1e9) * 1e3 if fp32["stream"] else None,
               "stream_gflops": fp32["stream"], "rates": rates, "variants": variants}
        return out
    except Exception as e:  # the floor is a reference line; never fail a benchmark for it
        return {"type": "floor", "floor_ms": None, "flops": None, "gflops": None, "reason": _first_line(e)}


def _profile(ch: _Channel, job: dict, workdir: Path) -> None:
    """Run one variant with ONNX Runtime's profiler on and send parsed records."""
    from ..ort.inputs import make_inputs
    from .profile_events import parse_profile_events, layer_map

    cfg = job["cfg"]
    threads, batch, seq = int(cfg["threads"]), int(cfg["batch"]), int(cfg["seq"])
    _set_threads(threads)
    v = dict(job["variants"][0], dynamic_block_base=int(cfg.get("dynamic_block_base") or 0))
    v["profile_prefix"] = str(workdir / "ort_profile")
    v["optimized_model_path"] = str(workdir / "optimized.onnx")
    ch.send({"type": "status", "stage": "building", "variant": v["name"], "index": 0, "count": 1})
    r = OrtRunner(v, threads, workdir)
    if seq > r.spec.max_positions:
        from ..errors import BenchmarkError
        raise BenchmarkError(f"sequence {seq} is longer than {r.name}'s {r.spec.max_positions} positions")
    r.prepare(make_inputs(r.spec, batch, seq, seed=int(cfg.get("seed", 0))))
    warm = max(1, int(cfg.get("warmup", 5)))
    runs = int(cfg["runs"])
    for i in range(warm + runs):
        ch.check_stop()
        ch.send({"type": "status", "stage": "profiling", "variant": r.name, "index": i, "count": warm + runs})
        try:
            r.run()
        except Exception as e:
            raise _run_error(e, r.name, batch, seq) from e
    trace = r.sess.end_profiling()
    import json
    with open(trace) as f:
        events = json.load(f)
    layers = layer_map(v["optimized_model_path"]) if Path(v["optimized_model_path"]).is_file() else {}
    records, total = parse_profile_events(events, skip_runs=warm, layers=layers)
    ch.send({"type": "profile", "variant": r.name, "provider": r.provider, "records": records,
             "run_ms": total, "runs": runs, "session_providers": r.providers})
    r.close()


def worker_main(conn, env: dict | None = None) -> None:
    """Entry point of the spawned process."""
    os.environ.update(env or {})
    ch = _Channel(conn)
    workdir = Path(tempfile.mkdtemp(prefix="workbench-worker-"))
    try:
        msg = conn.recv()
        job = msg.get("job", {})
        if job.get("mode") == "profile":
            _profile(ch, job, workdir)
        else:
            _bench(ch, job, workdir)
        ch.send({"type": "done", "stopped": False})
    except _Stop:
        _safe_send(ch, {"type": "done", "stopped": True})
    except BaseException as e:  # every failure goes back as data; the caller decides
        from ..errors import WorkbenchError
        if isinstance(e, WorkbenchError):
            _safe_send(ch, {"type": "error", "error": type(e).__name__, "message": str(e)})
        elif _is_oom(e):
            _safe_send(ch, {"type": "error", "error": "BenchmarkError",
                            "message": "out of memory: use a smaller batch or sequence"})
        else:
            _safe_send(ch, {"type": "error", "error": "internal", "message": f"{type(e).__name__}: {_first_line(e)}",
                            "traceback": traceback.format_exc()})
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        try:
            conn.close()
        except OSError:
            pass


def _safe_send(ch: _Channel, msg: dict) -> None:
    try:
        ch.send(msg)
    except (OSError, ValueError):
        pass  # the caller is gone

