"""Which execution provider runs each step's nodes: the rows' count per provider, filled in the parity lane.

After each snapshot's parity check, :class:`ProviderCounts` opens one more session of it (ONNX Runtime's own
record of which provider got each node: :func:`workbench.fusion.session_layer.providers_of`) on the provider
that says the most here: OpenVINO's execution provider where its plugin offers this CPU (a fused graph's
contrib ops then fall back to the CPU provider, named in the row's hover), else the app's provider (the CPU's
or the GPU's). The result stays on the snapshot (``sn.assignment``), so a toggle's snapshot seen before costs
nothing; one the provider cannot open is left without a count (and not tried again for that provider).
"""

from __future__ import annotations

from ...errors import WorkbenchError
from ...fusion.session_layer import providers_of
from ...ort.openvino_ep import status as openvino_status

#: The app's provider (``state.provider``) → the provider whose assignment the rows show.
_SHORT = {"cpu": "CPU", "cuda": "CUDA", "openvino": "OpenVINO"}


class ProviderCounts:
    """Fill ``sn.assignment`` of the snapshots shown, for :func:`~workbench.ui.steps.rows.step_rows`.

    Args:
        app: the controller: its ``state`` (``provider``, ``disabled``).
    """

    def __init__(self, app):
        self.app = app
        self.failed: dict[tuple, str] = {}  # (id(snapshot), provider) → why its session could not open

    def asked(self) -> str:
        """The provider the rows count for: OpenVINO's where it runs on this CPU, else the app's."""
        p = self.app.state.provider
        return "openvino" if p == "cpu" and openvino_status()[0] else p

    def fill(self, sn) -> bool:
        """Record which provider runs each of ``sn``'s nodes (once per snapshot and provider); whether it did."""
        asked = self.asked()
        have = getattr(sn, "assignment", None)
        if (have is not None and have.asked == _SHORT[asked]) or (id(sn), asked) in self.failed:
            return False
        try:
            providers_of(sn, asked, disabled=tuple(self.app.state.disabled))
        except WorkbenchError as e:
            self.failed[(id(sn), asked)] = str(e)
            return False
        return True


__all__ = ["ProviderCounts"]
