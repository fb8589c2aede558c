"""The report feature: everything on screen as plain data, and the HTML file.

:class:`Reporting` reads the one :class:`~workbench.ui.state.AppState` and writes only ``state.report_path``
(and the status line, through the controller's ``say``).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from ... import __version__
from ...errors import OutputPathError
from ...path_checks import check_output_path
from ...report.html import write_report
from .. import arguments as check
from ..graph.views import step_name


class Reporting:
    """``report_data`` and ``save_report``.

    Args:
        app: the controller: its ``state``, ``export_result``, ``timeline``, ``text`` and ``say``.
    """

    def __init__(self, app):
        self.app = app

    def report_data(self) -> dict:
        """Plain data for :func:`workbench.report.html.write_report`."""

        app = self.app
        s = app.state
        data: dict[str, Any] = {"version": __version__, "created": time.strftime("%Y-%m-%d %H:%M:%S"), "errors": []}
        if app.export_result is not None:
            data["model"] = app.export_result.source.describe()
            data["export"] = app.export_result.to_dict()
        if s.snapshots:
            data["fusion"] = {"engine": getattr(app.timeline, "engine_used", s.engine),
                              "engine_note": s.engine_note or getattr(app.timeline, "engine_note", ""),
                              "steps": [_snap_dict(sn) for sn in s.snapshots]}
        if app.text is not None:
            data["text"] = app.text.describe()
        if s.bench_result is not None:
            data["bench"] = s.bench_result.to_dict(samples=True)
        if s.ablation is not None:
            data["ablation"] = s.ablation.to_dict()
        if s.plans:
            data["plans"] = {k: p.to_dict() for k, p in s.plans.items()}
        if s.tune is not None:
            data["tune"] = s.tune.to_json(drop=("paths", "ablation") + (() if s.tune.saved else ("saved",)))
        if s.answers:
            data["answers"] = [dict(a) for a in s.answers]
        if s.error:
            data["errors"].append(s.error)
        return data

    def save_report(self, path: str | os.PathLike | None = None) -> Path:
        """Write the HTML report (default: ``workbench-report-<time>.html`` in the current folder) and return
        its path. A path that is not a new file in a folder this process can write to raises, at the call
        (:class:`~workbench.errors.OutputPathError`; the workbench never overwrites a file)."""
        dest = check.path("path", path, optional=True)
        dest = check_output_path(dest or Path.cwd() / f"workbench-report-{time.strftime('%Y%m%d-%H%M%S')}.html")
        try:
            out = write_report(self.report_data(), dest)
        except OSError as e:
            raise OutputPathError(f"could not write the report to {dest}: {e.strerror or e}") from None
        self.app.state.report_path = str(out)
        self.app.say(f"report saved to {out}", "ok")
        return out


def _snap_dict(sn) -> dict:
    try:
        d = dict(sn.to_dict())
    except Exception:
        d = {}
    d["name"] = step_name(d.get("name", sn.step)) if not isinstance(d.get("name"), str) else d["name"]
    d.setdefault("nodes", sn.nodes)
    if getattr(sn, "task_parity", None) is not None:
        d.setdefault("task_parity", sn.task_parity)
    return d


__all__ = ["Reporting"]
