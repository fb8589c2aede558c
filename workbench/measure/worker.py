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
    ``{"type": "batch", "variant", "batch", "tried", "sentences"}`` for throughput jobs (:mod:`.serve`),
    ``{"type": "memory", "peak_rss_mb"}`` after the timed runs (the worker's, all variants together),
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

from .worker_base import (WORKER_ENV, _Channel, _fault, _set_threads, _Stop, _worker_info,  # noqa: F401 (re-exported)
                          build_runners, peak_rss_mb, send_ready)


def _prepare_inputs(runners: list, cfg: dict, batches: list, timed: list, batch: int, seq: int) -> None:
    """Each runner's first feeds: the first timed text batch, or one seeded random batch at the shape."""
    from ..errors import BenchmarkError
    from ..ort.inputs import make_inputs
    from .runners import run_error

    for r in runners:
        longest = max((b["input_ids"].shape[1] for b in batches), default=seq)
        if max(longest, seq) > r.spec.max_positions:
            raise BenchmarkError(f"sequence {max(longest, seq)} is longer than {r.name}'s {r.spec.max_positions} "
                                 f"positions")
        r.fixed = None if timed else make_inputs(r.spec, batch, seq, seed=int(cfg.get("seed", 0)))
        try:
            r.prepare(timed[0] if timed else r.fixed)
        except Exception as e:
            raise run_error(e, r.name, batch, seq) from e


def _warm_up(ch: _Channel, runners: list, cfg: dict, batches: list, timed: list, batch: int, seq: int) -> dict:
    """Round-robin warm-up; the first round keeps each variant's outputs (every text batch's, with text)."""
    from .runners import run_error

    outputs, warm = {}, max(1, int(cfg.get("warmup", 5)))
    for w in range(warm):
        for r in runners:
            ch.check_stop()
            ch.send({"type": "status", "stage": "warm-up", "variant": r.name, "index": w, "count": warm})
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
                raise run_error(e, r.name, batch, seq) from e
    return outputs


def _send_parity(ch: _Channel, job: dict, runners: list, outputs: dict, batches: list) -> None:
    """Each variant against the reference: numbers, and with text the answers (per part when the text has parts)."""
    from ..ort.parity import compare

    text = job.get("text") or {}
    ref_name = job.get("reference") or runners[0].name
    ref = outputs.get(ref_name)
    if ref is None:
        return
    for r in runners:
        if r.name == ref_name:
            continue
        p = compare(ref, outputs[r.name])
        msg = {"type": "parity", "variant": r.name, "reference": ref_name,
               "max_abs_diff": p.max_abs_diff, "cosine": p.cosine}
        if batches:
            from .serve import parity_of_parts
            msg.update(parity_of_parts(text, ref, outputs[r.name], batches))
        ch.send(msg)


def _timed_rounds(ch: _Channel, runners: list, cfg: dict, timed: list, batch: int, seq: int, fault) -> None:
    """The timed runs, round robin; with text each round's batch is fed outside the timed span."""
    import time as _t

    from .runners import run_error

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
                raise run_error(e, r.name, batch, seq) from e
            ch.send({"type": "sample", "variant": r.name, "run_index": i, "ms": ms})
            _fault(fault, "sample")


def _bench(ch: _Channel, job: dict, workdir: Path) -> None:
    """Build, warm up, check parity, floor, then the timed rounds (see the module doc)."""
    from .worker_jobs import floor_message

    cfg = job["cfg"]
    threads, batch, seq = int(cfg["threads"]), int(cfg["batch"]), int(cfg["seq"])
    runners = build_runners(ch, job, workdir)
    _fault(job.get("fault"), "build")
    send_ready(ch, runners, threads)
    # Real text: tokenized batches of mixed lengths, cycled through round by round (the same batch for
    # every variant in a round); otherwise one seeded random batch at the configured shape.
    text = job.get("text")
    batches = list(text["batches"]) if text else []
    # answers_only: the answers are checked on the text, the timing stays at the configured shape.
    timed = [] if text and text.get("answers_only") else batches
    if timed:
        by_len = sorted(timed, key=lambda b: b["input_ids"].shape[1])
        batch, seq = (int(x) for x in by_len[len(by_len) // 2]["input_ids"].shape)  # the floor's shape: the median
    _prepare_inputs(runners, cfg, batches, timed, batch, seq)
    outputs = _warm_up(ch, runners, cfg, batches, timed, batch, seq)
    _send_parity(ch, job, runners, outputs, batches)
    outputs.clear()
    if job.get("floor", True):
        ch.send({"type": "status", "stage": "floor", "variant": None, "index": 0, "count": 1})
        ch.send(floor_message(job, runners, threads, batch, seq))
    _timed_rounds(ch, runners, cfg, timed, batch, seq, job.get("fault"))
    ch.send({"type": "memory", "peak_rss_mb": peak_rss_mb()})
    for r in runners:
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
            from .worker_jobs import profile_job
            profile_job(ch, job, workdir)
        elif job.get("mode") == "throughput":
            from .serve import throughput_job
            throughput_job(ch, job, workdir)
        else:
            _bench(ch, job, workdir)
        ch.send({"type": "done", "stopped": False})
    except _Stop:
        _safe_send(ch, {"type": "done", "stopped": True})
    except BaseException as e:  # every failure goes back as data; the caller decides
        from ..errors import WorkbenchError
        from .runners import is_oom
        if isinstance(e, WorkbenchError):
            _safe_send(ch, {"type": "error", "error": type(e).__name__, "message": str(e)})
        elif is_oom(e):
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

