"""The sweep feature: a fleet sweep (``workbench.measure.fleet.run``) from the app's sweep panel.

:class:`Sweep` writes ``state.sweep`` of the one :class:`~workbench.ui.state.AppState` as rows come; its
work runs in the job runner's measure lane (:data:`~workbench.ui.measuring.feature.MEASURE_LANE`). The spec, the
executor and the output are checked at the call (a wrong one raises there); what fails while measuring goes to
``state.error``.
"""

from __future__ import annotations

import os

from ...errors import ConfigError, ConfigTypeError
from ...measure.fleet import run as fleet_run  # its ``run_sweep``: this feature's own method is named so too
from ...measure.fleet.spec import expand, read_spec_file, safe_yaml
from ...path_checks import check_output_path
from .. import arguments as check
from ..jobs import Job
from ..measuring.feature import MEASURE_LANE

#: Where a sweep runs from the app (``workbench sweep --executor``).
EXECUTORS = ("local", "ray")


def read_spec(spec) -> dict:
    """The sweep spec as a mapping, checked the way the sweep will expand it (one-line errors naming the spec).

    ``spec`` is a dict, a YAML file (a path, or a string naming an existing file), or YAML text; a one-line
    string that reads as neither a mapping nor an existing file is taken for a file name that does not exist.
    """
    if isinstance(spec, dict):
        doc = spec
    elif isinstance(spec, os.PathLike) or (isinstance(spec, str) and os.path.isfile(os.path.expanduser(spec))):
        doc = read_spec_file(check.path("spec", spec))
    elif isinstance(spec, str):
        doc = safe_yaml(spec, "the sweep spec")  # alias bombs refused before anything is built
        if isinstance(doc, str) and "\n" not in spec.strip():
            raise ConfigError(f"spec {spec.strip()!r}: no such file (nor a YAML mapping of axes); give a YAML "
                              f"file, YAML text such as 'models: [bert-tiny]', or a dict")
        if not isinstance(doc, dict):
            raise ConfigError("the sweep spec must be a YAML mapping of axes, e.g. 'models: [bert-tiny]'")
    else:
        raise ConfigTypeError(f"spec must be a dict, a YAML file's path or YAML text, not {check.shown(spec)}")
    expand(doc)  # every axis, plan and precision checked and the points counted, nothing built
    return doc


class Sweep:
    """``run_sweep`` and ``stop_sweep``.

    Args:
        app: the controller: its ``state``, ``runner``, ``say``, ``refuse`` and ``measuring`` (``busy``).
    """

    def __init__(self, app):
        self.app = app

    def run_sweep(self, spec: dict | str | os.PathLike, executor: str = "local", *, address: str | None = None,
                  out: str | os.PathLike | None = None) -> None:
        """Run a fleet sweep (``workbench.measure.fleet.run``); rows land in ``state.sweep`` as they come.

        A spec that cannot be read or expanded, an executor other than :data:`EXECUTORS`, an address that is not a
        string, an output that cannot be written: raises at the call, nothing run."""
        app = self.app
        spec = read_spec(spec)
        check.choice("executor", executor, EXECUTORS)
        check.text("address", address, optional=True)
        out = check.path("out", out, optional=True)
        if out is not None:
            check_output_path(out, existing_ok=True)  # an existing result is resumed, not overwritten
        if app.measuring.busy():
            app.refuse("a measurement is already running: wait for it or stop it first", MEASURE_LANE)
            return
        s = app.state

        def work(job: Job) -> None:
            rows: list[dict] = []

            def progress(row: dict, done: int, total: int) -> None:
                rows.append(row)
                s.sweep = {"rows": list(rows), "total": total, "running": True}
                job.progress(f"sweep: {done} of {total} measured", done / max(1, total))

            res = fleet_run.run_sweep(spec, executor, address=address, out=out, progress=progress,
                                      cancel=lambda: job.cancelled)
            s.sweep = {**res, "running": False}
            app.say(f"sweep done: {len(res['rows'])} rows on {len(res.get('nodes', []))} node(s)", "ok")

        app.runner.start("sweep", work, lane=MEASURE_LANE)

    def stop_sweep(self) -> None:
        self.app.runner.cancel("sweep")


__all__ = ["Sweep", "EXECUTORS", "read_spec"]
