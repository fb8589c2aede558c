"""The before/after link, from outside both panes: a click in either pane goes to the controller, whose
new selection both panes then draw (the fused node on the right, the nodes it replaced on the left)."""

from __future__ import annotations


def link_panes(before, after, controller) -> None:
    """Wire two :class:`~workbench.ui.graph.panel.GraphPane` clicks to ``controller.click``.

    A click on a node in the "after" pane selects it (and rings what it replaced in "before"); a click
    on a collapsed layer in either pane opens or folds that layer in both.
    """
    before.on_click = lambda item: controller.click(item, "before")
    after.on_click = lambda item: controller.click(item, "after")


__all__ = ["link_panes"]
