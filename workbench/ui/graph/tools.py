"""The graph tools feature: what else shows the selected snapshot, ONNX Runtime's session layer and Netron.

:class:`GraphTools` writes ``state.session_line`` and ``state.netron_html`` of the one
:class:`~workbench.ui.state.AppState`; its work runs as jobs of the controller's job runner (the model lane).
"""

from __future__ import annotations

import os

from .views import step_name
from ...ort.session import LEVELS
from ...viz.netron import NetronViewer
from .. import arguments as check


class GraphTools:
    """The session layer on top of the selected snapshot, and that snapshot served in Netron.

    Args:
        app: the controller: its ``state``, ``timeline``, ``runner``, ``say`` and ``pair_indices``.
    """

    def __init__(self, app):
        self.app = app
        #: What the last :meth:`show_session_layer` found (``Timeline.session_layer``'s dict), or None.
        self.session_layer: dict | None = None
        self._netron = None

    def show_session_layer(self, level: str = "all") -> None:
        """Show what ONNX Runtime's session adds on top of the selected snapshot (the second layer); ``level``
        is one of :data:`workbench.ort.session.LEVELS` (another raises)."""
        app = self.app
        check.choice("level", level, LEVELS)
        if app.timeline is None or not app.state.snapshots:
            app.say("load a model first", "error")
            return
        i = app.pair_indices()[1]

        def work(job) -> None:
            snaps = app.state.snapshots
            job.progress(f"asking ONNX Runtime what its session ({level}) does to this snapshot")
            extra = app.timeline.session_layer(i, level)
            self.session_layer = extra
            added = ", ".join(f"{op} {n}" for op, n in sorted(extra["added_ops"].items())) or "nothing new"
            kept = f"; kept off as the plan says: {', '.join(extra['kept_off'])}" if extra.get("kept_off") else ""
            app.state.session_line = (f"ORT session ({level}) on top of {step_name(snaps[i].step)}: "
                                      f"{snaps[i].nodes} → {extra['nodes']} nodes; adds {added}{kept}")
            app.say("session layer shown", "ok")

        app.runner.start("session layer", work)

    def open_netron(self) -> None:
        """Serve the selected snapshot in Netron (private copy, 127.0.0.1) and embed it."""
        app = self.app
        if not app.state.snapshots:
            app.say("load a model first", "error")
            return

        def work(job) -> None:
            self.close_netron()
            snap = app.state.snapshots[app.pair_indices()[1]]
            job.progress("starting Netron")
            self._netron = NetronViewer(snap.model, name=f"{step_name(snap.step)}.onnx").start()
            app.state.netron_html = self._netron.iframe_html(os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/"))
            app.say(f"Netron is serving {step_name(snap.step)} on {self._netron.url}", "ok")

        app.runner.start("netron", work)

    def close_netron(self) -> None:
        """Stop the Netron server, if one runs, and take its frame away."""
        if self._netron is not None:
            self._netron.close()
            self._netron = None
            self.app.state.netron_html = ""


__all__ = ["GraphTools"]
