"""Two of the worker's jobs apart from the timed rounds: each variant's floor, and an operator profile."""

from __future__ import annotations

import json
from pathlib import Path

from ...errors import BenchmarkError, first_line
from ...ort.gpu import CUDA, guard_providers
from ...ort.inputs import make_inputs
from . import protocol as msgs
from .base import set_threads
from .floor import PRECISIONS, machine_matmul_info, model_flops, onnx_flops_by_precision, precision_label
from .profile_events import layer_map, parse_profile_events
from .runners import OrtRunner, TorchRunner, run_error


def floor_report(runners: list, threads: int, batch: int, seq: int) -> dict:
    """Each variant's FLOPs at this shape over this machine's measured rate for its own precision.

    An int8 model is held against the int8 rate (and its fp32 attention products against the fp32
    rate), never against the fp32 floor alone. ``floor_ms`` uses the hot rates (the fastest MatMul
    here); ``matmul_bound_ms`` the streaming rates (weights read from memory, as in a real model).
    The top-level ``floor_ms``/``gflops`` stay the fp32 figures of the first variant.
    """
    provider = runners[0].provider
    try:
        per = {r.name: ({"fp32": model_flops(r.source, batch, seq)} if isinstance(r, TorchRunner)
                        else onnx_flops_by_precision(r.graph_flops_source, batch, seq)) for r in runners
               if isinstance(r, TorchRunner) or r.graph_flops_source is not None}  # an engine without a graph: none
        precisions = sorted({p for f in per.values() for p in f} | {"fp32"}, key=PRECISIONS.index)
        rates = {}
        for prec in precisions:
            hot = machine_matmul_info(threads, provider, prec)
            rate = {"precision": prec, "unit": "GOP/s" if prec == "int8" else "GFLOP/s", "hot": hot["gflops"],
                    "quiet": hot.get("quiet"), "measured": hot.get("measured"), "stream": None}
            try:
                rate["stream"] = machine_matmul_info(threads, provider, prec, kind="stream")["gflops"]
            except Exception as e:  # optional; the floor stands without it
                rate["stream_reason"] = first_line(e)
            rates[prec] = rate
        variants = {}
        for name, f in per.items():
            bound = (sum(v / (rates[p]["stream"] * 1e9) for p, v in f.items()) * 1e3
                     if all(rates[p]["stream"] for p in f) else None)
            variants[name] = {"floor_ms": sum(v / (rates[p]["hot"] * 1e9) for p, v in f.items()) * 1e3,
                              "floor_precision": precision_label(f), "matmul_bound_ms": bound, "flops": f}
        flops = sum(next(iter(per.values())).values())
        fp32 = rates["fp32"]
        out = {"floor_ms": flops / (fp32["hot"] * 1e9) * 1e3, "flops": flops,
               "gflops": fp32["hot"], "rate_measured": fp32["measured"], "rate_quiet": fp32["quiet"],
               "matmul_bound_ms": flops / (fp32["stream"] * 1e9) * 1e3 if fp32["stream"] else None,
               "stream_gflops": fp32["stream"], "rates": rates, "variants": variants}
        return out
    except Exception as e:  # the floor is a reference line; never fail a benchmark for it
        return {"floor_ms": None, "flops": None, "gflops": None, "reason": first_line(e)}


def profile_job(ch, job: msgs.ProfileJob, workdir: Path) -> None:
    """Run each variant of the job in turn with ONNX Runtime's profiler on and send its parsed records (one
    ``Profile`` message per variant: several graphs profiled in one worker start)."""
    set_threads(int(job.cfg["threads"]))
    for k, v in enumerate(job.variants):
        sub = workdir / f"profile-{k}"
        sub.mkdir()
        _profile_one(ch, job, dict(v), sub)


def _profile_one(ch, job: msgs.ProfileJob, v: dict, workdir: Path) -> None:
    cfg = job.cfg
    threads, batch, seq = int(cfg["threads"]), int(cfg["batch"]), int(cfg["seq"])
    if job.feeds:  # a batch of real text: its own shape
        batch, seq = (int(x) for x in job.feeds["input_ids"].shape)
    v = dict(v, dynamic_block_base=int(cfg.get("dynamic_block_base") or 0))
    v["profile_prefix"] = str(workdir / "ort_profile")
    v["optimized_model_path"] = str(workdir / "optimized.onnx")
    ch.status("building", v["name"], 0, 1)
    r = OrtRunner(v, threads, workdir)
    if r.provider == "cuda":  # a CUDA profile that landed on the CPU is an error, never a CPU profile
        guard_providers(r.sess, CUDA)
    if seq > r.spec.max_positions:
        raise BenchmarkError(f"sequence {seq} is longer than {r.name}'s {r.spec.max_positions} positions")
    r.prepare(job.feeds or make_inputs(r.spec, batch, seq, seed=int(cfg.get("seed", 0))))
    warm = max(1, int(cfg.get("warmup", 5)))
    runs = int(cfg["runs"])
    for i in range(warm + runs):
        ch.check_stop()
        ch.status("profiling", r.name, i, warm + runs)
        try:
            r.run()
        except Exception as e:
            raise run_error(e, r.name, batch, seq) from e
    trace = r.sess.end_profiling()
    with open(trace) as f:
        events = json.load(f)
    layers = layer_map(v["optimized_model_path"]) if Path(v["optimized_model_path"]).is_file() else {}
    records, total = parse_profile_events(events, skip_runs=warm, layers=layers)
    ch.send(msgs.Profile(r.name, r.provider, records, total, runs, list(r.providers)))
    r.close()
