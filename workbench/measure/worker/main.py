"""The benchmark worker: a spawned process that builds, warms up and times variants.

Timing happens here, never in the caller (a notebook kernel's event loop
disturbs timings, and a native crash must not take the kernel down). The
messages both ways are the dataclasses of :mod:`.protocol`, pickled over a
``multiprocessing`` pipe: a :class:`~.protocol.Start` with the job, then
status, ready, floor, a sample per timed run, parity, memory, and exactly
one of done or error.

This module imports neither torch nor onnxruntime at import time: the
environment (OMP_WAIT_POLICY=PASSIVE, thread counts) must be in place before
either library loads.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time as _t
import traceback
from pathlib import Path

from ...errors import BenchmarkError, WorkbenchError, first_line
from ...ort.inputs import make_inputs
from ...ort.parity import compare
from . import protocol as msgs
from .base import Channel, Stopped, build_runners, fault, peak_rss_mb, send_ready
from .jobs import floor_report, profile_job
from .runners import is_oom, run_error
from .serve import parity_of_parts, throughput_job


def _prepare_inputs(runners: list, cfg: dict, batches: list, timed: list, batch: int, seq: int) -> None:
    """Each runner's first feeds: the first timed text batch, or one seeded random batch at the shape."""
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


def _warm_up(ch: Channel, runners: list, cfg: dict, batches: list, timed: list, batch: int, seq: int) -> dict:
    """Round-robin warm-up; the first round keeps each variant's outputs (every text batch's, with text)."""
    outputs, warm = {}, max(1, int(cfg.get("warmup", 5)))
    for w in range(warm):
        for r in runners:
            ch.check_stop()
            ch.status("warm-up", r.name, w, warm)
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


def _send_parity(ch: Channel, job: msgs.BenchJob, runners: list, outputs: dict, batches: list) -> None:
    """Each variant against the reference: numbers, and with text the answers (per part when the text has parts)."""
    text = job.text or {}
    ref_name = job.reference or runners[0].name
    ref = outputs.get(ref_name)
    if ref is None:
        return
    for r in runners:
        if r.name == ref_name:
            continue
        p = compare(ref, outputs[r.name])
        answers = {}
        if batches:
            answers = parity_of_parts(text, ref, outputs[r.name], batches)
        ch.send(msgs.Parity(r.name, ref_name, p.max_abs_diff, p.cosine, **answers))


def _timed_rounds(ch: Channel, runners: list, cfg: dict, timed: list, batch: int, seq: int, hook) -> None:
    """The timed runs, round robin; with text each round's batch is fed outside the timed span."""
    perf = _t.perf_counter
    for i in range(int(cfg["runs"])):
        feeds = timed[i % len(timed)] if len(timed) > 1 else None
        shape = tuple(int(x) for x in feeds["input_ids"].shape) if feeds is not None else (batch, seq)
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
            ch.send(msgs.Sample(r.name, i, ms, shape=shape))
            fault(hook, "sample")


def _bench(ch: Channel, job: msgs.BenchJob, workdir: Path) -> None:
    """Build, warm up, check parity, floor, then the timed rounds (see the module doc)."""
    cfg = job.cfg
    threads, batch, seq = int(cfg["threads"]), int(cfg["batch"]), int(cfg["seq"])
    runners = build_runners(ch, job, workdir)
    fault(job.fault, "build")
    send_ready(ch, runners, threads)
    # Real text: tokenized batches of mixed lengths, cycled through round by round (the same batch for
    # every variant in a round); otherwise one seeded random batch at the configured shape.
    text = job.text
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
    if job.floor:
        ch.status("floor", None, 0, 1)
        ch.send(msgs.Floor(floor_report(runners, threads, batch, seq)))
    _timed_rounds(ch, runners, cfg, timed, batch, seq, job.fault)
    ch.send(msgs.Memory(peak_rss_mb()))
    for r in runners:
        r.close()


def _run_job(ch: Channel, job, workdir: Path) -> None:
    """The job its type names (the throughput and profile jobs' code loads only for them)."""
    if isinstance(job, msgs.ProfileJob):
        profile_job(ch, job, workdir)
    elif isinstance(job, msgs.ThroughputJob):
        throughput_job(ch, job, workdir)
    elif isinstance(job, msgs.BenchJob):
        _bench(ch, job, workdir)
    else:
        raise TypeError(f"not a worker job: {type(job).__name__}")


def worker_main(conn, env: dict | None = None) -> None:
    """Entry point of the spawned process."""
    os.environ.update(env or {})
    ch = Channel(conn)
    workdir = Path(tempfile.mkdtemp(prefix="workbench-worker-"))
    try:
        job = conn.recv()
        _run_job(ch, job, workdir)
        ch.send(msgs.Done(stopped=False))
    except Stopped:
        _safe_send(ch, msgs.Done(stopped=True))
    except BaseException as e:  # every failure goes back as data; the caller decides
        if isinstance(e, WorkbenchError):
            _safe_send(ch, msgs.Error(type(e).__name__, str(e)))
        elif is_oom(e):
            _safe_send(ch, msgs.Error("BenchmarkError", "out of memory: use a smaller batch or sequence"))
        else:
            _safe_send(ch, msgs.Error("internal", f"{type(e).__name__}: {first_line(e)}", traceback.format_exc()))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        try:
            conn.close()
        except OSError:
            pass


def _safe_send(ch: Channel, msg: msgs.Message) -> None:
    try:
        ch.send(msg)
    except (OSError, ValueError):
        pass  # the caller is gone

