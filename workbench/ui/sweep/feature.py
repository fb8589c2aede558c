"""The sweep feature: a fleet sweep (``workbench.measure.fleet.run``) from the app's sweep panel.

:class:`Sweep` writes ``state.sweep`` of the one :class:`~workbench.ui.state.AppState` as rows come; its
work runs in the job runner's measure lane (:data:`~workbench.ui.measuring.feature.MEASURE_LANE`).
"""

from __future__ import annotations

from pathlib import Path

from ...errors import ConfigError
from ...measure.fleet import run as fleet_run  # its ``run_sweep``: this feature's own method is named so too
from ...measure.fleet.spec import safe_yaml
from ..jobs import Job
from ..measuring.feature import MEASURE_LANE


class Sweep:
    """``run_sweep`` and ``stop_sweep``.

    Args:
        app: the controller: its ``state``, ``runner``, ``say`` and ``measuring`` (``busy``).
    """

    def __init__(self, app):
        self.app = app

    def run_sweep(self, spec: dict | str, executor: str = "local", *, address: str | None = None,
                  out: str | None = None) -> None:
        """Run a fleet sweep (``workbench.measure.fleet.run``); rows land in ``state.sweep`` as they come."""
        app = self.app
        if app.measuring.busy():
            app.say("a measurement is already running: wait for it or stop it first", "error")
            return
        s = app.state

        def work(job: Job) -> None:
            spec_ = spec
            if isinstance(spec, str) and not Path(spec).expanduser().is_file():
                spec_ = safe_yaml(spec, "the sweep spec")  # alias bombs refused before anything is built
                if not isinstance(spec_, dict):
                    raise ConfigError("the sweep spec must be a YAML mapping of axes, e.g. 'models: [bert-tiny]'")
            rows: list[dict] = []

            def progress(row: dict, done: int, total: int) -> None:
                rows.append(row)
                s.sweep = {"rows": list(rows), "total": total, "running": True}
                job.progress(f"sweep: {done} of {total} measured", done / max(1, total))

            res = fleet_run.run_sweep(spec_, executor, address=address, out=out, progress=progress,
                                      cancel=lambda: job.cancelled)
            s.sweep = {**res, "running": False}
            app.say(f"sweep done: {len(res['rows'])} rows on {len(res.get('nodes', []))} node(s)", "ok")

        app.runner.start("sweep", work, lane=MEASURE_LANE)

    def stop_sweep(self) -> None:
        self.app.runner.cancel("sweep")


__all__ = ["Sweep"]
