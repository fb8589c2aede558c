"""How busy the machine was while a benchmark ran, and whether its figures can be trusted.

A :class:`LoadSampler` is started before a benchmark's worker and stopped after it has been joined.
It reads, on the cores this process may run on (its CPU affinity):

* the CPU time every process spent there (``/proc/stat``'s per-CPU lines) minus this process's own and
  its finished children's (``os.times()``: the benchmark worker, once joined): **other processes' CPU**;
* the time a hypervisor took from those cores (``/proc/stat``'s steal column);
* every 0.25 s, the threads ready to run (``/proc/stat``'s ``procs_running``, less the sampler reading it):
  a direct load, where the 1-minute load average lags (two CPU hogs started 10 s before a short run
  add only about 0.3 to it); the load average is kept beside it, not judged.

:class:`MachineLoad` holds those figures and the spread of the timed runs (p90 over p50, judged shape by shape:
runs over text cycle through batches of different shapes, and a batch of 16 tokens beside one of 128 is the
workload's mix, not noise; see :func:`shape_spread`), judges them with :data:`RULE` and words them in one
sentence. Linux gives every figure; elsewhere only the load average and the spread are known, and the rule
judges what is known.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from ...concurrency import Thread, new_flag, spawn

#: Busy when other processes used more than this share of the cores the benchmark's threads used
#: (beyond the cores its threads left free) ...
OTHER_SHARE = 0.25
#: ... or a hypervisor took more than this share of the time on those cores ...
STEAL_SHARE = 0.10
#: ... or a variant's p90 is more than this many times its p50, each run taken against the median of the runs
#: of its own shape, counted only for variants with :data:`SPREAD_MIN_RUNS` runs or more so judged, in shapes
#: run :data:`SHAPE_MIN_RUNS` times or more with a median of :data:`SPREAD_MIN_MS` or more (under a millisecond
#: a single timer interrupt or page fault makes such a spread on a quiet machine).
SPREAD = 1.5
SPREAD_MIN_RUNS = 10
SPREAD_MIN_MS = 1.0
#: Of two runs the median is their mean, and a run twice the other reads only 1.33x it: a shape is judged
#: from three runs on (one sentence per run at its own length is rarely judged: the CPU time judges it).
SHAPE_MIN_RUNS = 3
#: A window shorter than this cannot be judged by CPU time (``/proc/stat`` counts in 10 ms ticks): a
#: benchmark that ends sooner (a warm worker timing a tiny model) is judged on a window stretched to this
#: length, the stretch read while the benchmark is idle (a neighbour that is busy then was busy before).
MIN_SECONDS = 0.5
#: The rule in words, as the docs and the report state it.
RULE = (f"busy when other processes used more than {OTHER_SHARE:.0%} of the cores the benchmark's threads used "
        f"(beyond the cores they left free), or a hypervisor stole more than {STEAL_SHARE:.0%} of the time on those "
        f"cores, or a variant's p90 is more than {SPREAD:g}x its p50, each run against the median of its own shape's "
        f"runs (variants with at least {SPREAD_MIN_RUNS} runs so judged, in shapes run at least {SHAPE_MIN_RUNS} times "
        f"with a median of at least {SPREAD_MIN_MS:g} ms)")

_BUSY_COLUMNS = (0, 1, 2, 5, 6)  # user, nice, system, irq, softirq (guest time is inside user)
_STEAL_COLUMN = 7


@dataclass
class MachineLoad:
    """The machine's load while one benchmark ran (None: not known on this platform or too short a window).

    Attributes:
        cores: CPUs the benchmark could run on (this process's affinity).
        threads: threads each variant ran with.
        seconds: length of the sampled window.
        other_cores: cores' worth of CPU other processes used on those CPUs, on average.
        steal: share of the time on those CPUs a hypervisor gave to other machines.
        runnable: threads ready to run, on average over the window (all CPUs of the machine).
        loadavg: the 1-minute load average at the start and at the end.
        cpus: CPUs of the whole machine (what ``runnable`` and ``loadavg`` are against).
        spread: the largest p90/p50 among the variants the rule counts, shape by shape (:func:`shape_spread`);
            ``spread_variant`` is that variant, ``spread_shapes`` how many shapes its runs were judged in.
    """

    cores: int
    threads: int | None = None
    seconds: float = 0.0
    other_cores: float | None = None
    steal: float | None = None
    runnable: float | None = None
    loadavg: tuple[float, float] | None = None
    cpus: int | None = None
    spread: float | None = None
    spread_variant: str | None = None
    spread_shapes: int | None = None
    rule: str = field(default=RULE)

    def reasons(self) -> list[str]:
        """The figures that make the machine busy under :data:`RULE`, in words; empty when it was quiet."""
        out = []
        threads = min(self.threads or self.cores, self.cores)
        if self.other_cores is not None and self.other_cores > (self.cores - threads) + OTHER_SHARE * threads:
            out.append(f"other processes used {self.other_cores:.1f} of its {self.cores} cores")
        if self.steal is not None and self.steal > STEAL_SHARE:
            out.append(f"the hypervisor took {self.steal:.0%} of the time")
        if self.spread is not None and self.spread > SPREAD:
            of = f" for {self.spread_variant}" if self.spread_variant else ""
            mix = ", shape by shape" if (self.spread_shapes or 1) > 1 else ""
            out.append(f"p90 is {self.spread:.1f}x p50{of}{mix}")
        return out

    def busy(self) -> bool:
        """Whether the machine was busy under :data:`RULE`."""
        return bool(self.reasons())

    @property
    def load(self) -> float | None:
        """The load to quote: threads ready to run during the window, else the 1-minute load average at its end."""
        if self.runnable is not None:
            return self.runnable
        return self.loadavg[1] if self.loadavg else None

    def words(self) -> str:
        """One sentence when busy, "" when quiet: "the machine was busy while measuring (other processes used
        1.1 of its 2 cores; load 3.1 on 2 cores; p90 is 1.9x p50): these figures may be off by 2x; rerun when
        it is quiet"."""
        reasons = self.reasons()
        if not reasons:
            return ""
        spread = [r for r in reasons if r.startswith("p90")]
        parts = [r for r in reasons if r not in spread]
        if self.load is not None:
            parts.append(f"load {self.load:.1f} on {self.cpus or self.cores} cores")
        return (f"the machine was busy while measuring ({'; '.join(parts + spread)}): these figures may be off "
                f"by 2x; rerun when it is quiet")

    def with_spread(self, variants) -> "MachineLoad":
        """This load with the spread of ``variants`` (``VariantStats`` or their dicts): from each run and its shape
        (``samples_ms``, ``sample_shapes``) by :func:`shape_spread`; from ``p50_ms``, ``p90_ms`` and ``runs`` (one
        shape) only where the runs were not kept."""
        best = (None, None, None)
        for v in variants:
            get = v.get if isinstance(v, dict) else lambda k, v=v: getattr(v, k, None)
            if get("samples_ms"):
                judged = shape_spread(get("samples_ms"), get("sample_shapes") or ())
            else:
                p50, p90, runs = get("p50_ms"), get("p90_ms"), get("runs") or 0
                ok = p50 and p90 and p50 >= SPREAD_MIN_MS and runs >= SPREAD_MIN_RUNS
                judged = (p90 / p50, 1) if ok else None
            if judged and (best[0] is None or judged[0] > best[0]):
                best = (judged[0], get("name"), judged[1])
        self.spread, self.spread_variant, self.spread_shapes = best
        return self

    def to_dict(self) -> dict:
        """JSON-ready: the figures, ``busy``, ``words`` ("" when quiet) and the ``rule``."""
        d = {k: round(v, 3) if isinstance(v, float) else v for k, v in asdict(self).items()}
        d["loadavg"] = [round(x, 2) for x in self.loadavg] if self.loadavg else None
        d["load"] = round(self.load, 3) if self.load is not None else None
        d["busy"] = self.busy()
        d["words"] = self.words()
        return d

    @classmethod
    def from_dict(cls, d: dict | None) -> "MachineLoad | None":
        """Back from :meth:`to_dict` (a report's data); None for None."""
        if not d:
            return None
        keep = {k: d.get(k) for k in cls.__dataclass_fields__ if k in d}
        if keep.get("loadavg"):
            keep["loadavg"] = tuple(keep["loadavg"])
        keep.pop("rule", None)
        return cls(**keep)


def shape_spread(samples_ms, shapes=()) -> tuple[float, int] | None:
    """``(p90 over p50, shapes judged)`` of each run divided by the median of the runs of its own shape; None when
    fewer than :data:`SPREAD_MIN_RUNS` runs can be judged.

    Dividing by the shape's median takes the workload's mix out and leaves the machine's noise: a quiet machine
    serving batches of 16 and of 128 tokens has ratios near 1 in both, where one pooled p90/p50 would read 2x. The
    ratios are pooled, so a hiccup in one shape weighs as it would in one. Shapes with fewer than
    :data:`SHAPE_MIN_RUNS` runs, or a median under :data:`SPREAD_MIN_MS`, are left out. ``shapes`` (one per run,
    e.g. ``(batch, sequence)``): absent or of another length, every run is one shape (then this is p90/p50).
    """
    keys = [tuple(s) if s is not None else None for s in shapes] if len(shapes) == len(samples_ms) else None
    groups: dict = {}
    for i, ms in enumerate(samples_ms):
        groups.setdefault(keys[i] if keys else None, []).append(float(ms))
    ratios, judged = [], 0
    for runs in groups.values():
        mid = float(np.median(runs))
        if len(runs) >= SHAPE_MIN_RUNS and mid >= SPREAD_MIN_MS:
            ratios += [ms / mid for ms in runs]
            judged += 1
    if len(ratios) < SPREAD_MIN_RUNS:
        return None
    p50, p90 = np.percentile(ratios, [50, 90])
    return float(p90 / p50), judged


def busy_words(d: "MachineLoad | dict | None") -> str:
    """The busy sentence of a :class:`MachineLoad` or its ``machine_load`` dict (a report's or a result's JSON);
    "" when quiet or absent."""
    load = d if isinstance(d, MachineLoad) else MachineLoad.from_dict(d)
    return load.words() if load else ""


def busy_warning(d: "MachineLoad | dict | None") -> str:
    """The line a terminal or a markdown result prints under its figures: "warning: the machine was busy while
    measuring (...): ..."; "" when quiet or absent (print nothing then)."""
    words = busy_words(d)
    return f"warning: {words}" if words else ""


def _cpu_lines(cores: set[int]) -> tuple[float, float] | None:
    """(busy seconds, steal seconds) summed over ``cores`` since boot, or None without ``/proc/stat``."""
    try:
        with open("/proc/stat") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    tick = os.sysconf("SC_CLK_TCK")
    busy = steal = 0.0
    for line in lines:
        head, _, rest = line.partition(" ")
        if head.startswith("cpu") and head[3:].isdigit() and int(head[3:]) in cores:
            cols = [int(x) for x in rest.split()]
            busy += sum(cols[i] for i in _BUSY_COLUMNS)
            steal += cols[_STEAL_COLUMN] if len(cols) > _STEAL_COLUMN else 0
    return busy / tick, steal / tick


def _procs_running() -> int | None:
    try:
        with open("/proc/stat") as f:
            for line in f:
                if line.startswith("procs_running"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def _own_cpu() -> float:
    """CPU seconds of this process (all its threads) and of its children already waited for."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _affinity() -> set[int]:
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return set(range(os.cpu_count() or 1))


def _loadavg() -> float | None:
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


class LoadSampler:
    """Samples the machine's load from :meth:`start` to :meth:`stop` (a thread reads ``procs_running``).

    Stop it after the benchmark's worker has been joined, so the worker's CPU counts as ours.
    """

    INTERVAL = 0.25

    def __init__(self, threads: int | None = None):
        self.threads = threads
        self._cores = _affinity()
        self._runnable: list[int] = []
        self._stop = new_flag()
        self._thread: Thread | None = None
        self._start: tuple | None = None
        self.result: MachineLoad | None = None

    def start(self) -> "LoadSampler":
        self._start = (time.monotonic(), _cpu_lines(self._cores), _own_cpu(), _loadavg())
        self._thread = spawn("workbench-load", self._sample)
        return self

    def _sample(self) -> None:
        while not self._stop.wait(self.INTERVAL):
            n = _procs_running()
            if n is not None:
                self._runnable.append(max(0, n - 1))  # less this thread, running while it reads

    def stop(self) -> MachineLoad:
        """End the window and return its :class:`MachineLoad` (also kept as ``result``); idempotent."""
        if self.result is not None:
            return self.result
        if self._start is None:
            self.start()
        t0, cpu0, own0, avg0 = self._start
        short = MIN_SECONDS - (time.monotonic() - t0)
        if cpu0 is not None and short > 0:
            time.sleep(short)  # stretch a short window so 10 ms ticks can judge it (see MIN_SECONDS)
        self._stop.set()
        seconds = time.monotonic() - t0
        cpu1, own1, avg1 = _cpu_lines(self._cores), _own_cpu(), _loadavg()
        other = steal = None
        if cpu0 and cpu1 and seconds >= MIN_SECONDS:
            busy, stolen = cpu1[0] - cpu0[0], cpu1[1] - cpu0[1]
            other = max(0.0, busy - (own1 - own0)) / seconds
            steal = max(0.0, stolen) / (seconds * len(self._cores))
        runnable = sum(self._runnable) / len(self._runnable) if self._runnable else None
        self.result = MachineLoad(cores=len(self._cores), threads=self.threads, seconds=round(seconds, 3),
                                  other_cores=other, steal=steal, runnable=runnable,
                                  loadavg=(avg0, avg1) if avg0 is not None and avg1 is not None else None,
                                  cpus=os.cpu_count())
        return self.result


__all__ = ["MachineLoad", "LoadSampler", "busy_words", "busy_warning", "shape_spread", "RULE", "OTHER_SHARE",
           "STEAL_SHARE", "SPREAD", "SPREAD_MIN_RUNS", "SPREAD_MIN_MS", "SHAPE_MIN_RUNS"]
