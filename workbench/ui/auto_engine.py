"""The controller's engine actions: auto's comparison after the likely engine is shown, and the warm-up line.

Part of :class:`~workbench.ui.controller.Controller` (a mixin, so the controller file stays short).
"""

from __future__ import annotations

import dataclasses

from .step_rows import engine_summary
from ..fusion.timeline import auto_choice


class EngineActions:
    def _compare_engines(self, sch, job) -> None:
        """What auto decides on, after the likely engine's timeline is shown: both engines under the
        plan, the engine line and note; a switch (and a status line saying so) if the other fuses more."""

        # In the app, after the warm-up: an engine step holds the engine turn for up to seconds on
        # bert-base, and the user's first clicks should wait for the warm-up's steps only.
        runs = sch.compare_engines(lambda: job.cancelled or self.closed or sch is not self.scheduler,
                                   after_warm_up=self.background)
        if runs is None or sch is not self.scheduler:
            return
        s = self.state
        winner, note = auto_choice(runs)
        s.engine_note = note
        s.engine_line = engine_summary("auto", winner, {e: r[-1].fused for e, r in runs.items() if r})
        if winner != sch.timeline.plan.engine and sch is self.scheduler:
            self.runner.start("switch engine", lambda job: self._switch_engine(sch, winner))

    def _switch_engine(self, sch, engine: str) -> None:
        if sch is not self.scheduler:
            return
        was = sch.timeline.plan.engine
        self._set_snapshots(sch.set_plan(dataclasses.replace(sch.timeline.plan, engine=engine)))
        self.say(f"auto switched from {was} to {engine}: it fuses more of this model", "ok")

    def warm_text(self) -> str:
        """One line on the background precomputation of single toggles (what a click will cost)."""
        sch = self.scheduler
        if sch is None:
            return ""
        if sch.warming:
            return "precomputing every toggle in the background… until then a click may take a few seconds"
        if sch.warm_error:
            return f"precomputing toggles stopped: {' '.join(str(sch.warm_error).split())[:160]}"
        if sch.warm_s is not None:
            return f"✔ every single toggle precomputed ({sch.warm_s:.0f} s): a click is a lookup"
        return ""

    def _watch_warm(self) -> bool:
        self.state.warm = self.warm_text()
        return not self.closed


__all__ = ["EngineActions"]
