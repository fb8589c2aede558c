"""The tuning feature: what each fusion buys here (ablation), and ``workbench tune`` from the app.

:class:`Tuning` writes ``state.ablation`` and ``state.tune`` of the one :class:`~workbench.ui.state.AppState`;
its work runs in the job runner's measure lane (:data:`~workbench.ui.measuring.feature.MEASURE_LANE`), one
measurement at a time.
"""

from __future__ import annotations

from pathlib import Path

from ...measure.harness.load import busy_words
from ...measure.tune import run as tune_run  # its ``tune``: this feature's own method is named so too
from ...measure.tune.plan import plan_for, verdict
from ...measure.tune.rows import fig
from ...measure.tune.save import check_target, save
from ...measure.tune.served import app_workloads
from .. import arguments as check
from ..jobs import Job
from .feature import MEASURE_LANE


class Tuning:
    """``ablate`` and ``tune``.

    Args:
        app: the controller: its ``state``, ``export_result``, ``timeline``, ``text``, ``runner``, ``say``
            and ``measuring`` (``ready``).
    """

    def __init__(self, app):
        self.app = app

    def ablate(self, steps: list[str] | None = None) -> None:
        """What each fusion buys here, on the workload the app measures: the plan without each fired step, timed
        against the full plan, then the plan that keeps only what helps, checked against the unfused graph and the
        full plan (on the app's text as served, each sentence alone and in padded batches, when the benchmark times
        the text; else at the benchmark's shape). ``steps``: those steps of the engine's chain
        instead; another name raises."""
        app = self.app
        chain = app.timeline.steps() if app.timeline is not None else None
        steps = check.names("steps", steps, chain, what="fusion step")
        if not app.measuring.ready():
            return
        s = app.state

        def work(job: Job) -> None:
            text = app.text if (app.text is not None and s.bench_on_text) else None
            loads = app_workloads(text, s.bench_config())
            plans = {}
            for i, w in enumerate(loads):
                plans[w.kind] = plan_for(
                    app.export_result.source, app.export_result.path, app.timeline.plan, s.bench_config(),
                    workload=w, exporter=s.exporter, attention=s.attention, opset=s.opset, steps=steps,
                    progress=lambda stage, f, i=i, k=w.kind: job.progress(f"what each fusion buys ({k}): {stage}",
                                                                          (i + f) / len(loads)))
            s.plans = plans
            first = next(iter(plans.values()))
            s.ablation = first.ablation_result()
            app.update_rows()  # each step's row: what it buys on each workload, why it loses (profiled)
            busy = busy_words(first.ablation.get("machine_load"))  # "" when the machine was quiet
            app.say("each fusion measured; " + "; ".join(f"{k}: {verdict(p)}" for k, p in plans.items())
                    + (f"; {busy}" if busy else ""), "ok")

        app.runner.start("ablation", work, lane=MEASURE_LANE)

    def tune(self, out: str | Path | None = None) -> None:
        """The fastest variant whose answers hold here, against PyTorch, torch.compile and OpenVINO
        (``workbench tune``); with ``out``, saved there ready to deploy (a new or empty folder: another raises
        before anything is measured)."""
        app = self.app
        out = check.path("out", out, optional=True)
        if out is not None:
            check_target(out)
        if not app.measuring.ready():
            return
        s = app.state

        def work(job: Job) -> None:
            src = app.export_result.source
            text = app.text if (app.text is not None and s.bench_on_text) else None
            res = tune_run.tune(src, text=text, cfg=s.bench_config(), plan=app.timeline.plan, exporter=s.exporter,
                                attention=s.attention, progress=lambda stage, f: job.progress(f"tune: {stage}", f))
            if out is not None:
                res.saved = save(res, out, src)
            s.tune = res
            recs = ", ".join(f"{w} {r.variant} {fig(w, r.figure)}" for w, r in res.recommended.items())
            app.say(f"tuned: {recs}" + (f", saved to {res.saved['dir']}" if res.saved else ""), "ok")

        app.runner.start("tune", work, lane=MEASURE_LANE)


__all__ = ["Tuning"]
