"""The parity feature: every snapshot checked against the unfused export, the rows' badges filled as results come.

:class:`ParityChecks` runs as jobs of the controller's job runner (the "parity" lane). Automatic checks
after each run hold back while a click waits or the warm-up has not yet computed the toggle of the step the
user looks at: parity on bert-base builds whole sessions, and a click that computed its plan beside one
took 3 s instead of 1 s.
"""

from __future__ import annotations

import time

from ...errors import WorkbenchError
from .. import arguments as check
from ..graph.views import step_name
from .providers import ProviderCounts


class ParityChecks:
    """Check the snapshots shown; the badges of ``state.rows`` follow.

    Args:
        app: the controller: ``state``, ``timeline``, ``scheduler``, ``runner``, ``say``, ``update_rows``,
            ``pair_indices``, ``generation``, ``clicks_in_flight``, ``looking_at``, ``auto_parity``,
            ``background``, ``closed``.
    """

    def __init__(self, app):
        self.app = app
        #: Which provider runs each snapshot's nodes, filled after its parity (the rows' count per provider).
        self.providers = ProviderCounts(app)

    def check(self, wait: bool | None = None) -> None:
        """Check every snapshot against the unfused export; badges turn green or red as results arrive.

        With ``background=False`` (or ``wait=True``) it returns when every badge is filled.
        """
        app = self.app
        check.optional_flag("wait", wait)
        if app.timeline is None:
            app.say("load a model first", "error")
            return
        if wait if wait is not None else not app.background:
            try:
                self.run_pass(None, report=True)
            except WorkbenchError as e:
                app.say(f"parity check failed: {e}", "error")
            return
        app.runner.kick("parity", lambda job: self.run_pass(job, report=True))

    def kick_auto(self) -> None:
        """Start the automatic checks of the snapshots shown (after a load or a toggle), if switched on."""
        app = self.app
        if app.auto_parity and app.timeline is not None and not app.closed:
            app.runner.kick("parity", lambda job: self.run_pass(job, report=False))

    def order(self) -> list[int]:
        """Snapshots to check, most useful first: the selected step, the final model, then in order."""
        n = len(self.app.state.snapshots)
        first = [self.app.pair_indices()[1], n - 1]
        return [i for i in dict.fromkeys(first + list(range(1, n))) if 0 < i < n]

    def wait(self, timeout: float | None = 600) -> bool:
        """Wait for the background parity checks; True when every badge is filled."""
        self.app.runner.wait("parity", timeout)
        return all(sn.parity is not None for sn in self.app.state.snapshots[1:])

    def run_pass(self, job, report: bool = False) -> bool:
        """Fill the parity of the current snapshots; False when they changed under it (a toggle)."""
        app = self.app
        tl, snaps, gen = app.timeline, list(app.state.snapshots), app.generation
        if tl is None:
            return True
        texting = tl.text is not None

        def same_as_before(i: int) -> bool:  # the step changed nothing: its outputs are its predecessor's
            return i > 1 and getattr(snaps[i].diff, "empty", False)

        def done(sn) -> bool:
            return sn.parity is not None and (not texting or sn.task_parity is not None)

        def propagate() -> None:
            for i in range(2, len(snaps)):
                if not done(snaps[i]) and same_as_before(i) and done(snaps[i - 1]):
                    snaps[i].parity, snaps[i].task_parity = snaps[i - 1].parity, snaps[i - 1].task_parity
                if snaps[i].assignment is None and same_as_before(i):
                    snaps[i].assignment = snaps[i - 1].assignment

        todo = [i for i in self.order() if not same_as_before(i)]
        todo += [i for i in range(1, len(snaps)) if i not in todo]  # whatever propagation cannot fill
        for i in todo:
            propagate()
            if not report:
                self._yield_to_toggles(job, gen)
            if app.generation != gen or app.closed or (job is not None and job.cancelled):
                return False  # a toggle or reload: start over on the new snapshots
            sn = snaps[i]
            changed = not done(sn)
            if changed:
                if report:
                    app.say(f"parity: checking {step_name(sn.step)} ({i} of {len(snaps) - 1})", "busy")
                if tl.snapshots and i < len(tl.snapshots) and tl.snapshots[i] is sn:
                    tl.check_parity(i)
                else:
                    sn.check_parity(reference=tl.reference())
            filled = self.providers.fill(sn)
            changed = filled or changed
            if changed and app.generation == gen:
                app.update_rows()
            if filled and app.generation == gen and i in app.pair_indices():
                app.refresh(rows=False)  # the panes shown get their provider per node
        propagate()
        if app.generation != gen:
            return False
        app.update_rows()
        if report:
            self._say_result(snaps)
        return True

    def _say_result(self, snaps) -> None:
        bad = [step_name(sn.step) for sn in snaps[1:] if sn.parity is not None and not sn.parity.ok]
        self.app.say("parity: every step within atol 1e-4, rtol 1e-3" if not bad else
                     f"parity: {', '.join(bad)} differ from the unfused model beyond atol 1e-4",
                     "ok" if not bad else "error")

    def _toggle_first(self) -> bool:
        """Whether automatic parity should hold back: a click waits, or the warm-up has not yet computed the
        toggle of the step the user looks at (the click most likely to come next)."""
        app = self.app
        if app.clicks_in_flight:
            return True
        sch, chosen = app.scheduler, app.looking_at
        return bool(sch is not None and sch.warming and chosen and not sch.toggle_ready(chosen))

    def _yield_to_toggles(self, job, gen: int) -> None:
        app = self.app
        while (self._toggle_first() and app.generation == gen and not app.closed
               and not (job is not None and job.cancelled)):
            time.sleep(0.05)


__all__ = ["ParityChecks"]
