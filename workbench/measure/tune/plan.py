"""This machine's fusion plan: the tuned plan of a short :func:`~.ablation.fusion_ablation`, cached.

Runs once per export, plan, processor and thread count (``cache/plans/<key>.json``). The ``tuned`` variant
recipe does not compute it: its caller (:func:`.run.tune`, ``workbench bench``) hands the plan in as
``Build.tuned_plan`` (a plan, or :func:`tuned_plan_of` to compute it when the recipe first asks), so
variants never import tune.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ...cache.atomic import atomic_write_text
from ...cache.identity import file_identity
from ...cache.root import cache_root
from ...config import BenchConfig, FusionPlan
from ...ort.machine import describe_machine
from .ablation import fusion_ablation

PLAN_VERSION = 1


def machine_plan(src, export_path: Path, plan=None, *, threads: int = 2, runs: int = 12, progress=None,
                 exporter: str = "torchscript", attention: str = "eager") -> tuple[object, dict]:
    """This machine's fusion plan (the ablation's tuned plan) and the ablation's result as a dict, cached."""
    plan = plan or FusionPlan()
    cpu = describe_machine(threads, check_cuda=False).get("cpu")
    key = hashlib.sha256(json.dumps([file_identity(Path(export_path)), plan.engine, sorted(plan.disabled),
                                     sorted(plan.opted_in), cpu, threads, PLAN_VERSION]).encode()).hexdigest()[:24]
    path = cache_root() / "plans" / f"{key}.json"
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        res = fusion_ablation(src, BenchConfig(threads=threads, runs=runs, warmup=2), plan=plan, exporter=exporter,
                              attention=attention, progress=progress)
        doc = res.to_dict()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(path, json.dumps(doc, default=str))
        except OSError:
            pass  # a read-only or full cache only costs the ablation again next time
    t = doc["tuned_plan"]
    return FusionPlan(engine=t["engine"], disabled=frozenset(t["disabled"]), opted_in=frozenset(t["enabled"])), doc


def tuned_plan_of(ctx):
    """This machine's plan for a variant ``Build`` context (its model, export, plan and threads): for
    ``Build.tuned_plan`` where the caller has not run the ablation itself."""
    plan, _ = machine_plan(ctx.src, ctx.export_path, ctx.plan, threads=ctx.threads, progress=None)
    return plan


__all__ = ["machine_plan", "tuned_plan_of", "PLAN_VERSION"]
