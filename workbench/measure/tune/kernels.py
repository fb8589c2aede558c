"""Why a fusion loses, in the kernel's words: the fused kernel's time against the time of what it replaced.

Where the ablation finds a step that costs time on a workload (or the whole fused graph slower than the unfused
one), ONNX Runtime's profiler is run on both graphs at one batch of that workload (the median one: real text,
its padding included), and the op types the step changed are summed on each side: what the fused kernels take,
and what the ops they replaced take (for an op type on both sides, such as ``Add``, only the difference).
:class:`KernelCost` says it in one line, e.g. "Attention ×12 with a padding mask, batch 8, sequence 32: 410 µs
against 260 µs for the MatMul, Softmax and Add it replaced". ``benchmarks/slow_kernel.py`` reproduces such a
kernel alone, on a model built in the script.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from ...fusion.catalog import session_optimizers_off
from ..harness.profile import profile_many
from ..harness.results import Variant
from ..variants.models import fuse_bert
from .check import round_ratio

#: At most this many replaced op types are named.
NAMED = 4
#: At most this many losing steps are profiled per workload (the ones that cost most).
PROFILED = 2


def _join(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


@dataclass(frozen=True)
class KernelCost:
    """One fused kernel against what it replaced, at one shape (microseconds per run, summed over the model).

    Attributes:
        step: the fusion step, or "" for the whole fused graph against the unfused one.
        shape: the batch it was profiled on, in words ("batch 8, sequence 32, 38% padding").
        fused_us: op type → time of the kernels the step wrote (the extra time, for a type on both sides).
        replaced_us: op type → time of the ops it replaced (likewise).
        fused_count: op type → how many nodes the step wrote.
    """

    step: str
    shape: str
    fused_us: dict
    replaced_us: dict
    fused_count: dict

    @property
    def fused_total(self) -> float:
        return sum(self.fused_us.values())

    @property
    def replaced_total(self) -> float:
        return max(0.0, sum(self.replaced_us.values()))

    @property
    def loses(self) -> bool:
        return self.fused_total > self.replaced_total

    def words(self) -> str:
        """One line: the fused kernels, the shape, their time against the time of what they replaced."""
        ops = [f"{op} ×{self.fused_count.get(op, 0)}" if self.fused_count.get(op) else op
               for op in sorted(self.fused_us, key=self.fused_us.get, reverse=True)] or ["the fused kernels"]
        gone = [op for op in sorted(self.replaced_us, key=self.replaced_us.get, reverse=True)
                if self.replaced_us[op] > 0][:NAMED] or ["the ops"]
        who = f"{self.step}: " if self.step else "the fused graph: "
        return (f"{who}{_join(ops)}, {self.shape}: {self.fused_total:.0f} µs per run against "
                f"{self.replaced_total:.0f} µs for the {_join(gone)} {'it' if self.step else 'they'} replaced")

    def to_dict(self) -> dict:
        return {**asdict(self), "words": self.words(), "loses": self.loses}


def kernel_cost(step: str, change: dict, with_us: dict, without_us: dict, shape: str) -> KernelCost:
    """The cost of ``step``'s kernels against what they replaced.

    Args:
        change: op type → change in count when the step is left out (the ablation's ``graph_change``; negative for
            what the step writes, positive for what it replaced). Empty: every op type that differs in time.
        with_us, without_us: op type → µs per run (:meth:`~..harness.profile.OpProfile.op_type_totals`) of the
            graph with the step and without it.
    """
    ops = set(change) or (set(with_us) | set(without_us))
    fused, replaced, count = {}, {}, {}
    for op in ops:
        a, b = with_us.get(op, 0.0), without_us.get(op, 0.0)
        d = change.get(op)
        if d is None:  # no graph change known: the side that spends more on it
            d = -1 if a > b else 1
        if d < 0:
            fused[op] = max(0.0, a - b)
            count[op] = -int(d) if change else 0
        elif d > 0:
            replaced[op] = b - a
    return KernelCost(step, shape, {k: round(v, 1) for k, v in fused.items()},
                      {k: round(v, 1) for k, v in replaced.items()}, count)


def shape_words(feeds: dict | None, batch: int, seq: int) -> str:
    """"batch 8, sequence 32, 38% padding" for a batch of text; "batch 1, sequence 128 (random ids)" otherwise."""
    if feeds is None:
        return f"batch {batch}, sequence {seq} (random ids)"
    mask = feeds["attention_mask"]
    pad = 1 - float(mask.sum()) / mask.size
    return (f"batch {mask.shape[0]}, sequence {mask.shape[1]}" + (f", {pad:.0%} padding" if pad >= 0.005 else
                                                                    ", no padding"))


def median_batch(text) -> dict | None:
    """The batch of a timed text a profile takes: the median one by padded length (None without text)."""
    if text is None or not text.batches:
        return None
    by = sorted(text.batches, key=lambda b: (b["input_ids"].shape[1], b["input_ids"].shape[0]))
    return by[len(by) // 2]


def _variant(name: str, path, level: str = "all", off=()) -> Variant:
    return Variant(name, path, level=level, disabled_optimizers=off)


def losing_kernels(src, export_path, base, ab, text, cfg) -> list[KernelCost]:
    """Profile what loses on this workload: each step the ablation found costing time (the :data:`PROFILED` worst),
    or, where none does and the full plan ran slower than the unfused graph, the whole fused graph against it; all
    in one worker start.

    Args:
        base: the full plan; ab: the :class:`~.ablation.AblationResult`; text: the workload's timed batches (None:
            ``cfg``'s shape with random ids); cfg: threads and runs (the profile's warm-up and runs).
    """
    feeds = median_batch(text)
    shape = shape_words(feeds, cfg.batch, cfg.seq)
    pcfg = replace(cfg, warmup=max(2, cfg.warmup), runs=max(5, min(cfg.runs, 20)))
    hurt = sorted((r for r in ab.rows if r.verdict == "hurts" and r.switched == "off"), key=lambda r: r.saves_pct)
    loses = ab.full_speed is not None and ab.full_speed < 1 - ab.noise_pct / 100
    if not hurt and not loses:
        return []
    full = _variant("full", fuse_bert(export_path, plan=base, **src.timeline_args()),
                    off=session_optimizers_off(base.disabled))
    others = []
    for r in hurt[:PROFILED]:
        p = base.with_step(r.step, False)
        others.append(_variant(r.step, fuse_bert(export_path, plan=p, **src.timeline_args()),
                               off=session_optimizers_off(p.disabled)))
    if not hurt:
        others.append(_variant("unfused", export_path, level="disable"))
    got = {k: v.op_type_totals() for k, v in profile_many([full, *others], pcfg, feeds=feeds).items()}
    if not hurt:
        return [kernel_cost("", {}, got["full"], got["unfused"], shape)]
    return [kernel_cost(r.step, r.graph_change, got["full"], got[r.step], shape) for r in hurt[:PROFILED]]


#: The fused graph "loses" when it ran this much slower than the unfused one, round by round.
LOSS = 0.02


def fused_loses(src, variants, res, cfg, text) -> dict | None:
    """Where a benchmark's ``fused`` variant ran more than :data:`LOSS` slower than ``unfused`` (round by round),
    the profile of both at its median batch (:meth:`KernelCost.to_dict`, with ``speed``: fused against unfused);
    None where it did not lose or either is missing."""
    by = {v.name: v for v in variants}
    names = {s.name for s in res.variants}
    if cfg.provider != "cpu" or not {"fused", "unfused"} <= set(by) & names:
        return None
    speed = round_ratio(res["unfused"].samples_ms, res["fused"].samples_ms)
    if speed is None or speed >= 1 - LOSS:
        return None
    feeds = median_batch(text)
    pcfg = replace(cfg, warmup=max(2, cfg.warmup), runs=max(5, min(cfg.runs, 20)))
    got = {k: v.op_type_totals() for k, v in profile_many([by["fused"], by["unfused"]], pcfg, feeds=feeds).items()}
    cost = kernel_cost("", {}, got["fused"], got["unfused"], shape_words(feeds, cfg.batch, cfg.seq))
    return {**cost.to_dict(), "speed": round(speed, 4), "words": loss_words(cost, speed)}


def loss_words(cost: KernelCost, speed: float) -> str:
    """The fused graph's loss and its profile in one line. Where the profile's fused kernels took less than what
    they replaced, the line says the time went elsewhere rather than blame them (a profile adds a little to every
    node, so the unfused graph's many small ops weigh more in it than in a timed run)."""
    head = f"the fused graph ran at {speed:.2f}x the unfused graph's speed, round by round"
    if cost.loses:
        return f"{head}; profiled, {cost.words()}"
    return (f"{head}, yet in the profile its kernels took {cost.fused_total:.0f} µs per run against "
            f"{cost.replaced_total:.0f} µs for what they replaced ({cost.shape}): the time is lost outside the fused "
            f"kernels or the run was noisy; `workbench ablate` names a losing step")


__all__ = ["KernelCost", "kernel_cost", "shape_words", "median_batch", "losing_kernels", "fused_loses", "loss_words",
           "PROFILED", "LOSS"]
