"""This machine's fusion plan for one workload: an ablation on that workload, then the check that keeps it honest.

:func:`plan_for` measures what each step buys on the workload (:func:`~.ablation.fusion_ablation`: each sentence
alone, padded batches at the throughput search's batch, bench's batches, or a shape), takes the plan that keeps
only what helps, and checks it once more against the unfused graph and the full plan, interleaved, on the same
workload (:func:`.check.decide`): the :class:`WorkloadPlan` ships the fastest of the three, never a plan slower
than the graph it started from. :func:`machine_plan` caches it per export, plan, processor, threads and workload
(``cache/plans/<key>.json``). The ``tuned`` recipe does not compute it: its caller (:func:`.run.tune`,
``workbench bench``) hands it in as ``Build.tuned_plan`` (a :class:`~..variants.recipe.ShippedPlan`, or
:func:`tuned_plan_of` to compute it when the recipe first asks), so variants never import tune.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from ...cache.atomic import atomic_write_text
from ...cache.identity import file_identity
from ...cache.root import cache_root
from ...config import BenchConfig, FusionPlan
from ...fusion.catalog import session_optimizers_off
from ...ort.machine import describe_machine
from ..harness.bench import benchmark, throughput
from ..harness.results import Variant
from ..variants.models import fuse_bert
from ..variants.recipe import ShippedPlan
from ..variants.split import one_at_a_time
from .ablation import AblationResult, fusion_ablation
from .check import FULL, TUNED, UNFUSED, PlanCheck, decide, round_ratio
from .kernels import losing_kernels
from .served import Workload, ep_options, timed_config
from .workload import pad_id_of, serve_job

PLAN_VERSION = 2


def plan_words(base: FusionPlan, plan: FusionPlan) -> str:
    """What ``plan`` changes against ``base``: "switch off skip_layer_norm and switch on attention_as_mha"."""
    off, on = sorted(plan.disabled - base.disabled), sorted(plan.opted_in - base.opted_in)
    return " and ".join(x for x in (f"switch off {', '.join(off)}" if off else "",
                                    f"switch on {', '.join(on)}" if on else "") if x)


def _plan_dict(p: FusionPlan) -> dict:
    return {"engine": p.engine, "disabled": sorted(p.disabled), "enabled": sorted(p.opted_in)}


def _plan_of(d: dict) -> FusionPlan:
    return FusionPlan(engine=d["engine"], disabled=frozenset(d["disabled"]), opted_in=frozenset(d["enabled"]))


@dataclass
class WorkloadPlan:
    """This machine's plan for one workload, checked: ``plan`` (what the ablation kept), ``base`` (the full plan
    it started from), ``check`` (which graph ships and why), the ``ablation`` (its dict) and the ``workload``."""

    workload: dict
    plan: FusionPlan
    base: FusionPlan
    check: PlanCheck
    ablation: dict
    #: Why a step (or the fused graph) loses here, in the kernels' words (:meth:`.kernels.KernelCost.to_dict`).
    kernels: list = field(default_factory=list)

    @property
    def shipped_plan(self) -> FusionPlan | None:
        """The fusion plan that ships; None: the unfused graph ships."""
        return {TUNED: self.plan, FULL: self.base, UNFUSED: None}[self.check.ships]

    def shipped(self) -> ShippedPlan:
        """What the ``tuned`` recipe builds for this workload."""
        return ShippedPlan(self.shipped_plan, self.check.words(), self.workload.get("words", ""))

    def words(self) -> str:
        return self.check.words()

    def ablation_result(self) -> AblationResult:
        """The ablation behind the plan, typed."""
        return AblationResult.from_dict(self.ablation)

    def to_dict(self) -> dict:
        shipped = self.shipped_plan
        return {"workload": self.workload, "plan": _plan_dict(self.plan), "base": _plan_dict(self.base),
                "check": self.check.to_dict(), "ships": self.check.ships,
                "shipped_plan": _plan_dict(shipped) if shipped is not None else None, "ablation": self.ablation,
                "kernels": list(self.kernels)}

    @classmethod
    def from_dict(cls, d: dict) -> "WorkloadPlan":
        return cls(d["workload"], _plan_of(d["plan"]), _plan_of(d["base"]), PlanCheck.from_dict(d["check"]),
                   d["ablation"], list(d.get("kernels") or []))

    def kernel_lines(self) -> list[str]:
        """Why a step (or the fused graph) loses on this workload, one line each."""
        return [k["words"] for k in self.kernels]


def _fused_variant(name: str, export_path: Path, plan: FusionPlan, src, provider: str, opts=None) -> Variant:
    path = fuse_bert(export_path, plan=plan, **src.timeline_args())
    return Variant(name, path, provider=provider, disabled_optimizers=session_optimizers_off(plan.disabled),
                   options=opts)


def search_batch(src, export_path: Path, plan: FusionPlan, cfg: BenchConfig, w: Workload,
                 timeout: float | None = 3600) -> int:
    """The batch size the throughput search picks for the full plan on ``w``'s sentences (the corpus the tune
    serves: the text repeated to 256 sentences, sorted by length, each batch padded to its longest)."""
    text = one_at_a_time(src, w.sentences)
    job = serve_job(text, {}, pad_id_of(src))
    full = _fused_variant(FULL, export_path, plan, src, cfg.provider)
    out, _ = throughput([full], cfg, job, passes=1, timeout=timeout)
    return int(out[FULL]["batch"])


def _check(src, export_path, base, tuned, ab, cfg, w: Workload, timeout, ep=None) -> PlanCheck:
    """Decide which graph ships: from the ablation's own full-vs-unfused runs when the plan is the full plan,
    else from one more interleaved run of the three on the same workload."""
    words = plan_words(base, tuned)
    if tuned == base:
        return decide({FULL: ab.full_speed}, ab.noise_pct, "in the ablation", w.words())
    opts = ep_options(ep)
    vs = [_fused_variant(TUNED, export_path, tuned, src, cfg.provider, opts),
          _fused_variant(FULL, export_path, base, src, cfg.provider, opts),
          Variant(UNFUSED, export_path, provider=cfg.provider, level="disable", options=opts)]
    timed, c = timed_config(src, w, cfg)
    res = benchmark(vs, c, text=timed, floor=False, timeout=timeout)
    speed = {g: round_ratio(res[UNFUSED].samples_ms, res[g].samples_ms) for g in (TUNED, FULL)}
    return decide(speed, ab.noise_pct, "in one interleaved run after the ablation", w.words(), words)


def plan_for(src, export_path: Path, plan: FusionPlan | None = None, cfg: BenchConfig | None = None, *,
             workload: Workload | None = None, exporter: str = "torchscript", attention: str = "eager",
             opset: int | None = None, steps=None, progress=None, timeout: float | None = 3600,
             ep: str | None = None) -> WorkloadPlan:
    """This machine's plan for ``workload`` (default: ``cfg``'s shape), measured and checked (see the module doc);
    ``ep``: on that execution provider (:data:`.served.EPS`) instead of ``cfg.provider``'s own."""
    say = progress or (lambda stage, f: None)
    cfg, plan = cfg or BenchConfig(), plan or FusionPlan()
    w = workload or Workload.shape(cfg.batch, cfg.seq)
    if w.kind == "throughput" and not w.batch:
        say("throughput batch-size search", 0.02)
        w = w.with_batch(search_batch(src, export_path, plan, cfg, w, timeout))
    ep_options(ep)  # refused in one line before any work where that provider cannot run here
    ab = fusion_ablation(src, cfg, plan=plan, exporter=exporter, attention=attention, opset=opset, workload=w,
                         steps=steps, ep=ep,
                         progress=lambda s, f: say(s, 0.05 + 0.8 * f), timeout=timeout)
    base = FusionPlan(engine=ab.engine or plan.engine, disabled=plan.disabled, opted_in=plan.opted_in)
    say("checking the plan against the unfused graph and the full plan", 0.88)
    check = _check(src, export_path, base, ab.tuned_plan, ab, cfg, w, timeout, ep)
    say("profiling what loses", 0.94)  # ONNX Runtime's CPU kernels (another provider's profile has no per-op times)
    kernels = [] if ep else losing_kernels(src, export_path, base, ab, timed_config(src, w, cfg)[0], cfg)
    say("done", 1.0)
    return WorkloadPlan({**w.to_dict(), "ep": ep}, ab.tuned_plan, base, check, ab.to_dict(),
                        [k.to_dict() for k in kernels])


def verdict(p: WorkloadPlan) -> str:
    """A few words on what ships: "switch off skip_layer_norm", "the full plan", "the unfused graph (fusion costs time
    here)"."""
    if p.check.ships == TUNED:
        return plan_words(p.base, p.plan) or "the full plan"
    if p.check.ships == FULL:
        return "the full plan" + (f" ({plan_words(p.base, p.plan)} measured slower in the check)" if p.plan != p.base
                                  else "")
    return "the unfused graph (the fused steps cost time on this workload)"


def machine_plan(src, export_path: Path, plan=None, *, threads: int = 2, runs: int = 12, progress=None,
                 exporter: str = "torchscript", attention: str = "eager", workload: Workload | None = None,
                 provider: str = "cpu", ep: str | None = None) -> WorkloadPlan:
    """:func:`plan_for` with a short ablation, cached per export, plan, processor, threads, provider and workload."""
    plan = plan or FusionPlan()
    cfg = BenchConfig(provider=provider, threads=threads, runs=runs, warmup=2)
    w = workload or Workload.shape(cfg.batch, cfg.seq)
    m = describe_machine(threads, check_cuda=False)
    cpu = [m.get("cpu"), m.get("microarch"), m.get("isa")]  # the brand string alone is "AMD EPYC" on Zen 3, 4 and 5
    key = hashlib.sha256(json.dumps([file_identity(Path(export_path)), plan.engine, sorted(plan.disabled),
                                     sorted(plan.opted_in), cpu, threads, provider, ep, w.key(),
                                     PLAN_VERSION]).encode()).hexdigest()[:24]
    path = cache_root() / "plans" / f"{key}.json"
    try:
        return WorkloadPlan.from_dict(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        pass
    res = plan_for(src, export_path, plan, cfg, workload=w, exporter=exporter, attention=attention,
                   progress=progress, ep=ep)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(res.to_dict(), default=str))
    except OSError:
        pass  # a read-only or full cache only costs the ablation again next time
    return res


def tuned_plan_of(ctx, workload: Workload | None = None) -> ShippedPlan:
    """This machine's checked plan for a variant ``Build`` context (its model, export, plan and threads), on
    ``workload`` (default: ``ctx.text`` as bench times it, else batch 1 × sequence 128): for ``Build.tuned_plan``
    where the caller has not run the ablation itself."""
    if workload is None and ctx.text is not None and ctx.text.sentences:
        batch = max(int(b["input_ids"].shape[0]) for b in ctx.text.batches)
        workload = Workload.of_text("batches", ctx.text.sentences, batch=batch)
    wp = machine_plan(ctx.src, ctx.export_path, ctx.plan, threads=ctx.threads, workload=workload,
                      provider=ctx.provider)
    return wp.shipped()


__all__ = ["machine_plan", "plan_for", "tuned_plan_of", "search_batch", "plan_words", "verdict", "WorkloadPlan",
           "PLAN_VERSION"]
