"""How busy the machine was: the rule on given figures, and a real ``workbench bench`` beside real CPU hogs."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from workbench.measure.harness.load import SPREAD, RULE, LoadSampler, MachineLoad, busy_words, shape_spread

BUSY_START = "the machine was busy while measuring ("


# ------------------------------------------------------------------ the rule on given samples
def test_a_quiet_machine_gets_no_words():
    quiet = MachineLoad(cores=2, threads=2, seconds=8, other_cores=0.1, steal=0.01, runnable=2.2,
                        loadavg=(0.4, 1.1), cpus=2)
    assert not quiet.busy() and quiet.words() == "" and quiet.reasons() == []
    assert quiet.to_dict()["busy"] is False and quiet.to_dict()["words"] == ""


def test_other_processes_beyond_a_quarter_of_the_cores_used_are_busy():
    # 2 threads on 2 cores: more than 0.5 of a core used by others is busy.
    hogs = MachineLoad(cores=2, threads=2, seconds=8, other_cores=1.2, steal=0.0, runnable=4.1, cpus=2)
    assert hogs.busy()
    assert hogs.words() == ("the machine was busy while measuring (other processes used 1.2 of its 2 cores; load 4.1 "
                            "on 2 cores): these figures may be off by 2x; rerun when it is quiet")
    assert not MachineLoad(cores=2, threads=2, seconds=8, other_cores=0.5).busy()
    assert MachineLoad(cores=2, threads=2, seconds=8, other_cores=0.51).busy()
    # 1 thread on 2 cores leaves a core free: another process on it does not disturb, more than that does.
    assert not MachineLoad(cores=2, threads=1, seconds=8, other_cores=1.0).busy()
    assert MachineLoad(cores=2, threads=1, seconds=8, other_cores=1.3).busy()


def test_steal_and_spread_are_busy_and_the_load_average_alone_is_not():
    assert MachineLoad(cores=2, threads=2, seconds=8, other_cores=0.0, steal=0.15).busy()
    assert not MachineLoad(cores=2, threads=2, seconds=8, other_cores=0.0, steal=0.05).busy()
    # The 1-minute load average lags the run (and counts our own threads): quoted, never judged.
    assert not MachineLoad(cores=2, threads=2, seconds=8, other_cores=0.0, loadavg=(3.0, 3.1), cpus=2).busy()
    spread = MachineLoad(cores=2, threads=2, seconds=8, other_cores=0.0, runnable=2.0, cpus=2).with_spread(
        [{"name": "torch", "p50_ms": 135.0, "p90_ms": 150.0, "runs": 20},
         {"name": "fused", "p50_ms": 60.0, "p90_ms": 114.0, "runs": 20}])
    assert spread.spread == pytest.approx(1.9) and spread.spread_variant == "fused"
    assert spread.words() == ("the machine was busy while measuring (load 2.0 on 2 cores; p90 is 1.9x p50 for fused): "
                              "these figures may be off by 2x; rerun when it is quiet")


def test_spread_counts_only_runs_long_and_many_enough():
    few = MachineLoad(cores=2, threads=2, seconds=8).with_spread(
        [{"name": "a", "p50_ms": 50, "p90_ms": 100, "runs": 5}])
    short = MachineLoad(cores=2, threads=2, seconds=8).with_spread(
        [{"name": "a", "p50_ms": 0.3, "p90_ms": 2.0, "runs": 30}])  # a timer tick makes that on a quiet machine
    assert few.spread is None and short.spread is None and not few.busy() and not short.busy()


# Real runs of the packaged MiniLM, unfused, `workbench bench minilm --text builtin --runs 20 --samples` on 2 threads,
# AMD EPYC Zen 5, quiet (other processes 0.35 cores, load average 1.0): the built-in text's batches of 8 x 16
# and 3 x 128 tokens, in the order they ran (the worker feeds batch i % 6 in round i).
MIX = [((8, 16), 11.87), ((8, 16), 11.77), ((3, 128), 28.10), ((8, 16), 9.65), ((8, 16), 9.78), ((3, 128), 24.27),
       ((8, 16), 9.67), ((8, 16), 9.61), ((3, 128), 23.84), ((8, 16), 9.68)]


def _variant(name: str, runs: list) -> dict:
    return {"name": name, "samples_ms": [ms for _, ms in runs], "sample_shapes": [shape for shape, _ in runs],
            "runs": len(runs)}


def test_a_quiet_machine_serving_two_shapes_is_not_busy_by_their_mix():
    """Pooled, the mix reads p90 2.3x p50 (the 128-token batches beside the 16-token ones); shape by shape each run
    is within 1.22x of its own shape's median: quiet."""
    pooled = shape_spread([ms for _, ms in MIX])  # no shapes: every run one shape, as the rule judged before
    assert pooled is not None and pooled[0] > 2.0 and pooled[1] == 1
    load = MachineLoad(cores=2, threads=2, seconds=3, other_cores=0.35, runnable=2.6, cpus=2).with_spread(
        [_variant("unfused", MIX)])
    assert load.spread == pytest.approx(1.22, abs=0.01) and load.spread_shapes == 2
    assert not load.busy() and load.words() == "" and load.to_dict()["spread_shapes"] == 2


def test_one_shape_slowed_twofold_in_a_stretch_is_busy_and_named():
    """The same runs with a busy stretch: three runs of 8 x 16 in a row take twice as long. Against their shape's
    median they read 1.6x: busy, and the sentence names the spread shape by shape (the load is quoted, not judged)."""
    stretch = [(shape, ms * 2 if 3 <= i <= 6 and shape == (8, 16) else ms) for i, (shape, ms) in enumerate(MIX)]
    load = MachineLoad(cores=2, threads=2, seconds=3, other_cores=0.35, runnable=2.6, cpus=2).with_spread(
        [_variant("unfused", MIX), _variant("fused", stretch)])
    assert load.spread_variant == "fused" and load.spread > 1.5 and load.busy()
    assert load.words() == ("the machine was busy while measuring (load 2.6 on 2 cores; p90 is 1.6x p50 for fused, "
                            "shape by shape): these figures may be off by 2x; rerun when it is quiet")
    assert busy_words(json.loads(json.dumps(load.to_dict()))) == load.words()


def test_a_shape_run_fewer_than_three_times_is_not_judged():
    """Of two runs the median is their mean: a shape needs three. One sentence per run at its own length (tune's
    latency workload) leaves the spread unjudged; the CPU-time figures still judge the machine."""
    once_each = [((1, 4 + i), 2.0 + 0.3 * i) for i in range(30)]
    assert shape_spread([ms for _, ms in once_each], [s for s, _ in once_each]) is None
    load = MachineLoad(cores=2, threads=2, seconds=3, other_cores=1.2).with_spread([_variant("fused", once_each)])
    assert load.spread is None and load.busy() and "p90" not in load.words()


def test_unknown_figures_judge_nothing_and_the_dict_round_trips():
    unknown = MachineLoad(cores=2)  # no /proc/stat: only what is known is judged
    assert not unknown.busy() and busy_words(None) == "" and busy_words(unknown.to_dict()) == ""
    busy = MachineLoad(cores=2, threads=2, seconds=8, other_cores=1.2, runnable=4.1, loadavg=(1.0, 2.0), cpus=2)
    assert busy_words(json.loads(json.dumps(busy.to_dict()))) == busy.words()
    assert "25%" in RULE and "10%" in RULE and "1.5x" in RULE


def test_the_sampler_counts_a_hog_beside_it_and_not_its_own_children():
    """Another process's CPU on our cores is counted; a child we waited for is ours."""
    cores = sorted(os.sched_getaffinity(0))[:1]
    pin = {"preexec_fn": lambda: os.sched_setaffinity(0, cores)}
    old = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cores)
    try:
        sampler = LoadSampler(threads=1).start()
        ours = subprocess.run([sys.executable, "-c", "import time\nt=time.time()\nwhile time.time()-t<1.5: pass"],
                              **pin)
        assert ours.returncode == 0
        own = sampler.stop()
    finally:
        os.sched_setaffinity(0, old)
    assert own.seconds >= 1.4 and own.cores == 1
    # Our own child's 1.5 s of CPU is not "other" (a neighbour may add some; our child alone would be ~1.0).
    assert own.other_cores is not None and own.other_cores < 0.9


def test_a_window_too_short_for_cpu_ticks_is_stretched_and_judged():
    """A warm benchmark of a tiny model can end in 0.1 s; /proc/stat counts 10 ms ticks: the window is stretched
    to half a second so a hog beside it is still seen (CI once printed no warning beside two hogs)."""
    cores = sorted(os.sched_getaffinity(0))[:1]
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=lambda: os.sched_setaffinity(0, cores))
    old = os.sched_getaffinity(0)
    try:
        time.sleep(0.5)
        os.sched_setaffinity(0, cores)
        load = LoadSampler(threads=1).start().stop()
    finally:
        os.sched_setaffinity(0, old)
        hog.kill()
        hog.wait(10)
    assert load.seconds >= 0.5 and load.other_cores is not None and load.busy(), load


# ------------------------------------------------------------------ a real benchmark beside real hogs
def _two_cores() -> list[int]:
    return sorted(os.sched_getaffinity(0))[:2]


def _cli(cores: list[int], *args: str) -> subprocess.CompletedProcess:
    """``workbench ARGS`` pinned to ``cores`` (as on a 2-core machine)."""
    return subprocess.run([sys.executable, "-c", "import sys; from workbench.cli import main; sys.exit(main())", *args],
                          capture_output=True, text=True, timeout=600,
                          preexec_fn=lambda: os.sched_setaffinity(0, cores))


def _bench(cores: list[int], *extra: str) -> subprocess.CompletedProcess:
    """``workbench bench`` on bert-tiny pinned to ``cores`` (as on a 2-core machine), short."""
    return _cli(cores, "bench", "bert-tiny", "--seq", "16", "--runs", "20", "--warmup", "2", "--threads",
                str(len(cores)), "--variants", "unfused,fused", *extra)


def _ablate(cores: list[int], *extra: str) -> subprocess.CompletedProcess:
    """``workbench ablate`` on bert-tiny pinned to ``cores``, one step left out, short."""
    return _cli(cores, "ablate", "bert-tiny", "--steps", "bias_gelu", "--seq", "16", "--runs", "20", "--warmup", "2",
                "--threads", str(len(cores)), *extra)


@contextlib.contextmanager
def _two_hogs(cores: list[int]):
    """Two CPU-bound processes pinned to ``cores``, running (not starting) while the block runs."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"],
                             preexec_fn=lambda: os.sched_setaffinity(0, cores)) for _ in range(2)]
    try:
        time.sleep(1.0)  # they are running, not starting
        yield
    finally:
        for h in hogs:
            h.kill()
        for h in hogs:
            h.wait(10)


def _busy_line(stdout: str) -> str:
    line = next((ln for ln in stdout.splitlines() if BUSY_START in ln), None)
    assert line is not None, stdout
    assert "other processes used" in line and "rerun when it is quiet" in line, line
    return line


def _busy_json(stdout: str, cores: list[int]) -> dict:
    doc = json.loads(stdout)
    load = doc["machine_load"]
    assert load["busy"] is True and load["words"].startswith(BUSY_START), load
    assert load["other_cores"] > 0.5 * load["threads"] and load["cores"] == len(cores)
    return doc


def test_a_busy_machine_is_named_in_the_terminal_and_in_json():
    """Two CPU-bound processes started beside `workbench bench` on 2 cores: the output says the machine was busy."""
    cores = _two_cores()
    with _two_hogs(cores):
        text = _bench(cores)
        doc_run = _bench(cores, "--json")
    assert text.returncode == 0, text.stderr
    _busy_line(text.stdout)
    assert doc_run.returncode == 0, doc_run.stderr
    doc = _busy_json(doc_run.stdout, cores)
    assert {"machine", "variants", "config", "floor_ms"} <= set(doc)  # the keys before it are all still there


def test_a_busy_machine_is_named_by_ablate_as_by_bench():
    """The same two hogs beside `workbench ablate`: its table is followed by bench's sentence, and --json carries
    ``machine_load`` beside every key it had."""
    cores = _two_cores()
    with _two_hogs(cores):
        text = _ablate(cores)
        doc_run = _ablate(cores, "--json")
    assert text.returncode == 0, text.stderr
    line = _busy_line(text.stdout)
    assert line.startswith("warning: ") and text.stdout.index(line) > text.stdout.index("| bias_gelu |"), text.stdout
    assert doc_run.returncode == 0, doc_run.stderr
    doc = _busy_json(doc_run.stdout, cores)
    assert {"model", "engine", "full_p50_ms", "noise_pct", "rows", "tuned_plan", "floor_ms", "config"} <= set(doc)


def test_a_quiet_machine_is_never_named():
    """The same benchmark with nothing beside it: no warning, and --json says quiet. Meaningful only on a quiet
    machine (CI): skipped, with the reason, when the machine is already busy by the same rule before it starts."""
    cores = _two_cores()
    old = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cores)
    try:
        before = LoadSampler(threads=len(cores)).start()
        time.sleep(2.0)
        before = before.stop()
    finally:
        os.sched_setaffinity(0, old)
    if before.busy():
        why = "; ".join(before.reasons())
        pytest.skip(f"the machine is busy before the test starts: {why} (load {before.load:.1f})")
    p = _bench(cores, "--json")
    assert p.returncode == 0, p.stderr
    load = json.loads(p.stdout)["machine_load"]
    assert load["busy"] is False and load["words"] == "", load
    text = _bench(cores)
    assert text.returncode == 0, text.stderr
    assert BUSY_START not in text.stdout and "warning: the machine" not in text.stdout, text.stdout
    ablate = _ablate(cores, "--json")
    assert ablate.returncode == 0, ablate.stderr
    load = json.loads(ablate.stdout)["machine_load"]
    assert load["busy"] is False and load["words"] == "", load


def test_a_quiet_run_over_the_builtin_text_is_not_called_busy_by_its_mix():
    """`workbench bench bert-tiny --text builtin`: six batches of 16 to 128 tokens, fed in turn. Pooled, the runs
    spread past 1.5x (the workload's mix, which the rule once called a busy machine); shape by shape a quiet
    machine's do not. The quiet claim is checked only when the CPU-time figures say nobody else was busy."""
    cores = _two_cores()
    p = _cli(cores, "bench", "bert-tiny", "--text", "builtin", "--runs", "30", "--warmup", "2", "--threads", "1",
             "--variants", "unfused,fused", "--json", "--samples")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    for v in doc["variants"]:
        assert len(v["sample_shapes"]) == len(v["samples_ms"]) == 30, v
        assert {s[1] for s in v["sample_shapes"]} == {int(k) for k in doc["config"]["text"]["bucket_mix"]}
    pooled = [np.percentile(v["samples_ms"], 90) / np.percentile(v["samples_ms"], 50) for v in doc["variants"]]
    assert max(pooled) > SPREAD, pooled  # the mix, pooled: what the rule judged before
    load = MachineLoad.from_dict(doc["machine_load"])
    # One thread leaves a core free, where the rule lets others use it; the worker's parent shares it, so quiet is
    # judged here as for a benchmark on both cores.
    cpu = MachineLoad(cores=load.cores, threads=load.cores, seconds=load.seconds, other_cores=load.other_cores,
                      steal=load.steal)
    if cpu.busy():
        pytest.skip(f"other processes were busy, so quiet cannot be checked: {'; '.join(cpu.reasons())}")
    assert load.spread_shapes >= 2 and load.spread <= SPREAD, doc["machine_load"]
    assert not load.busy() and doc["machine_load"]["words"] == ""
