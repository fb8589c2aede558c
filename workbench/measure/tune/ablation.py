"""What each fusion buys on this machine: the full plan against the plan without one step, side by side.

For every fusion step that fired, the model is fused again with that step
switched off (and ONNX Runtime's own session transformer for it switched off
too, so the session does not quietly redo it), and all of them are timed
interleaved in one worker with the full plan twice: the two copies of the full
plan measure the noise, so a step is only called helpful or harmful when its
effect is larger than that. Effects are ratios within each interleaved round
(the median over rounds), so load that comes and goes on a shared machine
does not decide them. A step asked for by name that the plan leaves off
is measured the other way round, switched on, and the tuned plan switches it
on where that helps beyond the noise.

The answer is per machine: a kernel that wins on one CPU can lose on another
(on an Intel Xeon with AVX-512, ONNX Runtime 1.31's SkipLayerNormalization
kernel measured slower than the Add + LayerNormalization it replaces).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import onnx

from ...config import BenchConfig, ExportConfig, FusionPlan
from ...export import export
from ...fusion.catalog import BY_NAME, alternatives, session_optimizers_off
from ...fusion.engines import engine_steps
from ...fusion.timeline import run_fusion
from ...graph.summary import histogram
from ...models import ModelSource, resolve
from ...ort.answer_policy import holds
from ...ort.machine import machine_line
from ..harness.bench import benchmark
from ..harness.load import busy_warning
from ..harness.results import Variant
from ..variants.models import fuse_bert
from .check import round_ratio
from .served import Workload, ep_options, timed_config

Progress = Callable[[str, float], None]
FULL, AGAIN, UNFUSED = "full plan", "full plan (again)", "unfused"
#: The most an alternative kernel's outputs may move from the full plan's (fp32 rounding is ~1e-6).
ALT_MAX_ABS_DIFF = 1e-3


@dataclass
class AblationRow:
    """One fusion step: the model's latency without it against with it.

    Attributes:
        step: catalog step name.
        fused_here: op types the step emitted (in the plan that runs it), counted.
        graph_change: op type → change in count when the step is left out
            (what the session runs instead), e.g. ``{"SkipLayerNormalization":
            -24, "LayerNormalization": 24, "Add": 48}``. ONNX's standard
            ``Attention`` counts as "Attention (standard)", apart from the
            contrib op.
        p50_without_ms: p50 of the plan without this step.
        saves_ms: what the step saves, in ms of the full plan's p50: positive
            when the step helps.
        saves_pct: the same in percent: the median over the interleaved
            rounds of (time without / time with) - 1, which load that comes
            and goes does not move (a difference of p50s it does).
        verdict: "helps", "hurts" or "within noise".
        switched: "off" when the row leaves out a step of the plan (the
            full plan is the "with" side), "on" when it switches on a step
            the plan leaves off (the full plan is the "without" side).
        p50_with_ms: p50 of the plan with this step.
        alternative_to: for a step that runs another step's fused op on another kernel (``catalog.alternatives``:
            the packed Attention as MultiHeadAttention or ONNX's standard Attention), that step; it is timed
            switched on, and the tuned plan keeps the fastest kernel whose outputs and answers hold.
        answers: the answer check against the full plan on the workload's text (None without text).
    """

    step: str
    fused_here: dict
    graph_change: dict
    p50_without_ms: float
    saves_ms: float
    saves_pct: float
    verdict: str
    parity_max_abs_diff: float | None = None
    switched: str = "off"
    p50_with_ms: float | None = None
    alternative_to: str = ""
    answers: dict | None = None


@dataclass
class AblationResult:
    """The full plan, each step's row, the noise band and the plan that keeps only what helps."""

    model: str
    engine: str
    rows: list[AblationRow]
    full_p50_ms: float
    noise_pct: float
    unfused_p50_ms: float | None
    floor_ms: float | None
    matmul_bound_ms: float | None
    machine: dict
    config: dict
    plan: FusionPlan = field(default_factory=FusionPlan)
    #: The floor as computed from the measured rate, before the plausibility check (``floor_ms`` is None
    #: when this exceeds a measured time); None only when no rate could be measured.
    floor_computed_ms: float | None = None
    #: How busy the machine was while the plans were timed (:meth:`.load.MachineLoad.to_dict`), None if unsampled.
    machine_load: dict | None = None
    #: What the plans were timed on (:meth:`.served.Workload.to_dict`): each sentence alone, padded batches, a shape.
    workload: dict | None = None
    #: The full plan's speed against the unfused graph, round by round (1.10: 10% faster; below 1: fusion loses).
    full_speed: float | None = None

    @property
    def tuned_plan(self) -> FusionPlan:
        """The plan with every step that measured harmful switched off, and every helpful one left off switched on."""
        best: dict[str, AblationRow] = {}  # per step with alternative kernels: the fastest that helps
        for r in self.rows:
            if r.alternative_to and r.verdict == "helps":
                if r.alternative_to not in best or r.saves_pct > best[r.alternative_to].saves_pct:
                    best[r.alternative_to] = r
        off = {r.step: r for r in self.rows if r.verdict == "hurts" and r.switched == "off"}
        # A step whose alternative kernel helps more than leaving the step out stays on with it (the alternative
        # works on its output); where leaving it out buys more, it goes and the alternative with it.
        best = {k: r for k, r in best.items() if k not in off or r.saves_pct > -off[k].saves_pct}
        hurt = set(off) - set(best)
        plan = FusionPlan(engine=self.engine or self.plan.engine, disabled=frozenset(self.plan.disabled | hurt),
                          opted_in=self.plan.opted_in)
        for r in [*(r for r in self.rows if r.switched == "on" and r.verdict == "helps" and not r.alternative_to),
                  *best.values()]:
            plan = plan.with_step(r.step, True)
        return plan

    def to_markdown(self, measured: str = "") -> str:
        """The result as a markdown table with the machine and the tuned plan."""
        c = self.config
        on = (self.workload or {}).get("words") or f"batch {c.get('batch')}, sequence {c.get('seq')}"
        timed, total = (c.get("text") or {}).get("sentences"), (self.workload or {}).get("sentences")
        if timed and total and timed < total:
            on += f" ({timed} of them timed, spread over their lengths)"
        if (self.workload or {}).get("ep"):
            on += f", on ONNX Runtime's {self.workload['ep']} execution provider"
        lines = [f"Measured {measured + ' ' if measured else ''}on: {machine_line(self.machine)}", "",
                 f"{self.model}, engine {self.engine}, timed on {on}, "
                 f"{c.get('threads')} threads, {c.get('runs')} runs per plan, interleaved, spinning off"
                 + (f", session.dynamic_block_base {c['dynamic_block_base']}" if c.get("dynamic_block_base") else "")
                 + f". Full plan p50 {self.full_p50_ms:.2f} ms {self._per()}(unfused {self.unfused_p50_ms or 0:.2f} ms"
                 + (f"; hardware floor {self.floor_ms:.2f} ms" if self.floor_ms else "")
                 + (f"; MatMuls alone with weights from memory {self.matmul_bound_ms:.2f} ms"
                    if self.matmul_bound_ms else "") + f"). Noise band ±{self.noise_pct:.1f}% (twice the round-by-round "
                 f"gap between two copies of the full plan, at least 1%; savings are round-by-round ratios).", "",
                 "| step left out | what it fuses | the graph without it | p50 without it (ms) | the step saves | verdict |",
                 "|---|---|---|---|---|---|"]
        for r in self.rows:
            fused = ", ".join(f"{k} {v}" for k, v in sorted(r.fused_here.items()))
            change = ", ".join(f"{k} {v:+d}" for k, v in r.graph_change.items())
            name = (r.step if r.switched == "off" else
                    f"{r.step} (another kernel for {r.alternative_to}; timed switched on, {r.p50_with_ms:.2f} ms)"
                    if r.alternative_to else f"{r.step} (off in the plan; timed switched on, {r.p50_with_ms:.2f} ms)")
            lines.append(f"| {name} | {fused} | {change or 'unchanged'} | {r.p50_without_ms:.2f} | "
                         f"{r.saves_ms:+.2f} ms ({r.saves_pct:+.1f}%) | {r.verdict} |")
        t = self.tuned_plan
        off = ",".join(sorted(t.disabled - self.plan.disabled))
        on = ",".join(sorted(t.opted_in - self.plan.opted_in))
        advice = [f"switch off {off}" if off else "", f"switch on {on}" if on else ""]
        cmd = " ".join(x for x in (f"--disable {','.join(sorted(t.disabled))}" if t.disabled else "",
                                   f"--enable {','.join(sorted(t.opted_in))}" if t.opted_in else "") if x)
        busy = busy_warning(self.machine_load)  # "" when the machine was quiet
        lines += [""] + ([busy, ""] if busy else []) + [
            "The ablation's plan for this machine: " + (f"{' and '.join(a for a in advice if a)} (`workbench bench "
                                               f"{self.model} {cmd}`)" if off or on else
                                               "the plan as it is (no step measured harmful, none left "
                                               "off measured helpful)")]
        return "\n".join(lines) + "\n"

    def _per(self) -> str:
        kind = (self.workload or {}).get("kind")
        return "per sentence " if kind == "latency" else "per batch " if kind in ("throughput", "batches") else ""

    def to_frame(self):
        import pandas as pd
        return pd.DataFrame([r.__dict__ for r in self.rows])

    def to_dict(self) -> dict:
        t = self.tuned_plan
        return {"model": self.model, "engine": self.engine, "full_p50_ms": self.full_p50_ms,
                "noise_pct": self.noise_pct, "unfused_p50_ms": self.unfused_p50_ms, "floor_ms": self.floor_ms,
                "matmul_bound_ms": self.matmul_bound_ms, "floor_computed_ms": self.floor_computed_ms,
                "machine": self.machine, "config": self.config,
                "rows": [dict(r.__dict__) for r in self.rows],
                "machine_load": self.machine_load, "workload": self.workload, "full_speed": self.full_speed,
                "tuned_plan": {"engine": t.engine, "disabled": sorted(t.disabled), "enabled": sorted(t.opted_in)},
                "plan": {"engine": self.plan.engine, "disabled": sorted(self.plan.disabled),
                         "enabled": sorted(self.plan.opted_in)}}

    @classmethod
    def from_dict(cls, d: dict) -> "AblationResult":
        """Back from :meth:`to_dict` (a cached plan's ablation)."""
        p = d.get("plan") or {"engine": d.get("engine") or "auto", "disabled": [], "enabled": []}
        rows = [AblationRow(**{k: v for k, v in r.items() if k in AblationRow.__dataclass_fields__})
                for r in d.get("rows") or []]
        return cls(d["model"], d["engine"], rows, d["full_p50_ms"], d["noise_pct"], d.get("unfused_p50_ms"),
                   d.get("floor_ms"), d.get("matmul_bound_ms"), d.get("machine") or {}, d.get("config") or {},
                   FusionPlan(engine=p["engine"], disabled=frozenset(p["disabled"]), opted_in=frozenset(p["enabled"])),
                   d.get("floor_computed_ms"), d.get("machine_load"), d.get("workload"), d.get("full_speed"))


def _noop(stage: str, fraction: float) -> None:
    pass


def _op_counts(path) -> dict:
    """Op type → count; ONNX's standard ``Attention`` apart from the contrib op of the same name."""
    model = onnx.load(str(path), load_external_data=False)
    counts = histogram(model)
    std = sum(1 for n in model.graph.node if n.op_type == "Attention" and n.domain in ("", "ai.onnx"))
    if std:
        counts["Attention"] -= std
        if not counts["Attention"]:
            del counts["Attention"]
        counts["Attention (standard)"] = std
    return counts


def _round_by_round(slower, faster) -> float:
    """How many times slower ``slower`` ran than ``faster``, round by round (:func:`.check.round_ratio`).

    Variants run round robin, so run i of each falls in the same round. Load that comes and goes on a
    shared machine (measured here: rounds twice as slow as their neighbours) moves p50s apart by more
    than the effect of one step; a ratio within a round it barely moves.
    """
    r = round_ratio(slower.samples_ms, faster.samples_ms)
    return r if r is not None else slower.p50_ms / faster.p50_ms


def _change(full: dict, other: dict) -> dict:
    return {k: other.get(k, 0) - full.get(k, 0) for k in sorted(set(full) | set(other))
            if other.get(k, 0) != full.get(k, 0)}


def fusion_ablation(model="bert-base", cfg: BenchConfig | None = None, *, plan: FusionPlan | None = None,
                    exporter: str = "torchscript", attention: str = "eager", opset: int | None = None,
                    steps: list[str] | None = None, workload: Workload | None = None, ep: str | None = None,
                    progress: Progress | None = None, timeout: float | None = 3600) -> AblationResult:
    """Time the full fusion plan against the plan without each fusion step, interleaved, on one workload.

    Args:
        model: preset, folder, hub id or .onnx file.
        cfg: threads and runs, and the shape when no workload is given (default: batch 1, sequence 128,
            2 threads, 30 runs).
        workload: what every plan is timed on (:class:`.served.Workload`: each sentence alone, padded batches,
            or a shape); default: ``cfg``'s shape with seeded random ids. A text workload's runs cycle through its
            batches, every plan on the same batch in a round, so the round-by-round ratios compare like with like.
        plan: the full plan (default: engine "auto", every default step on).
        ep: another execution provider every plan runs on (:data:`.served.EPS`: "openvino", ONNX Runtime's
            OpenVINO provider); default ``cfg.provider``'s own. What a fusion buys differs per provider.
        exporter, attention, opset: how the model is exported.
        steps: the steps to leave out one at a time (default: every fusion
            step that emitted something in the full plan); a step of the
            engine's chain that the plan leaves off is timed switched on
            instead, and the tuned plan switches it on where that helps.

    Raises:
        BenchmarkError, ConfigError: as :func:`workbench.measure.harness.bench.benchmark`.
    """
    progress = progress or _noop
    cfg, plan = cfg or BenchConfig(), plan or FusionPlan()
    src = model if isinstance(model, ModelSource) else resolve(model)
    progress("export", 0.02)
    exp = export(src, ExportConfig(exporter=exporter, attention=attention, opset=opset))
    args = src.timeline_args()
    progress("fusion timeline", 0.05)
    tl = run_fusion(exp.path, plan, **args)
    engine = tl.engine_used or plan.engine
    todo, switch_on, emitted = _steps(tl, engine, steps)
    base = FusionPlan(engine=engine, disabled=plan.disabled, opted_in=plan.opted_in)
    full = fuse_bert(exp.path, plan=base, **args)
    keep_off = session_optimizers_off(base.disabled)
    opts = ep_options(ep)  # None: the provider's own; else the execution provider every plan runs on
    variants = [Variant(n, full, provider=cfg.provider, disabled_optimizers=keep_off, options=opts)
                for n in (FULL, AGAIN)]
    change = _each_step(variants, tl, exp.path, base, full, todo, switch_on, emitted, args, cfg.provider, opts,
                        progress)
    variants.append(Variant(UNFUSED, exp.path, provider=cfg.provider, level="disable", options=opts))
    progress("measuring", 0.75)
    w = workload or Workload.shape(cfg.batch, cfg.seq)
    timed, cfg = timed_config(src, w, cfg)
    res = benchmark(variants, cfg, text=timed, floor=timed is None, timeout=timeout)
    rows, band = _rows(res, todo, switch_on, emitted, change)
    progress("done", 1.0)
    return AblationResult(src.name, engine, rows, res[FULL].p50_ms, band, res[UNFUSED].p50_ms, res.floor_ms,
                          res.matmul_bound_ms, res.machine, dict(res.config), plan, res.floor.get("floor_ms"),
                          res.machine_load.to_dict() if res.machine_load else None, {**w.to_dict(), "ep": ep},
                          _round_by_round(res[UNFUSED], res[FULL]))


def _each_step(variants: list, tl, export_path, base, full, todo, switch_on, emitted, args, provider, opts,
               progress) -> dict:
    """Append the plan without (or with) each step to ``variants``; each step's graph change (and, for a step
    switched on, what it emitted, into ``emitted``)."""
    full_ops, change = _op_counts(full), {}
    for i, step in enumerate(todo):
        on = step in switch_on
        progress(f"fusing {'with' if on else 'without'} {step}", 0.1 + 0.6 * i / max(1, len(todo)))
        p = base.with_step(step, on)
        path = fuse_bert(export_path, plan=p, **args)
        ops = _op_counts(path)
        change[step] = _change(ops, full_ops) if on else _change(full_ops, ops)
        if on:
            emitted[step] = next((sn.fused_here for sn in tl.set_plan(p) if sn.step == step), {})
        variants.append(Variant(f"{'with' if on else 'without'} {step}", path, provider=provider, options=opts,
                                disabled_optimizers=session_optimizers_off(p.disabled)))
    return change


def _steps(tl, engine: str, steps: list[str] | None) -> tuple[list[str], set, dict]:
    """The steps to time (those asked for, else every fusion step that emitted something), those of the
    engine's chain the plan leaves off (timed switched on instead), and what each step emitted."""
    fired = [s.step for s in tl.snapshots[1:]
             if s.step in BY_NAME and BY_NAME[s.step].kind == "fusion" and s.fused_here]
    emitted = {s.step: s.fused_here for s in tl.snapshots[1:]}
    todo = [s for s in (steps or fired) if s in BY_NAME]
    # A step of this engine's chain that the plan leaves off is timed switched on instead.
    ran = {s.step for s in tl.snapshots[1:]}
    known = engine in ("ort", "onnxscript")
    chain = {es.name for es in engine_steps(engine)} if known else set()
    if steps is None and known:  # every other kernel the chain has for a step that fired, tried switched on
        alts = alternatives(engine)
        todo += [a for base in list(todo) for a in alts.get(base, ()) if a not in ran and a not in todo]
    return todo, {s for s in todo if s not in ran and s in chain}, emitted


def _rows(res, todo: list, switch_on: set, emitted: dict, change: dict) -> tuple[list[AblationRow], float]:
    """Each step's row from the interleaved result, and the noise band (twice the gap of the two full plans)."""
    full_p50 = res[FULL].p50_ms
    noise = abs(_round_by_round(res[AGAIN], res[FULL]) - 1.0) * 100.0
    band = max(1.0, 2.0 * noise)
    rows = []
    for step in todo:
        on = step in switch_on
        v = res[f"{'with' if on else 'without'} {step}"]
        without, with_ = (full_p50, v.p50_ms) if on else (v.p50_ms, full_p50)
        pct = (_round_by_round(res[FULL], v) if on else _round_by_round(v, res[FULL])) * 100.0 - 100.0
        verdict = "helps" if pct > band else "hurts" if pct < -band else "within noise"
        diff, alt = (v.parity or {}).get("max_abs_diff"), BY_NAME[step].alternative_to or ""
        if alt and verdict == "helps" and not (diff is not None and diff <= ALT_MAX_ABS_DIFF and holds(v.task_parity)):
            verdict = "changes outputs"  # a faster kernel whose outputs or answers moved is not kept
        rows.append(AblationRow(step, dict(emitted.get(step, {})), change[step], without, full_p50 * pct / 100.0, pct,
                                verdict, diff, "on" if on else "off", with_, alt, v.task_parity))
    return rows, band


__all__ = ["fusion_ablation", "AblationResult", "AblationRow"]
