"""The width the app really gets, measured in the browser, and the pane sizes that follow from it.

A plotly FigureWidget does not follow its flex box, and JupyterLab's side bar changes the notebook
column without a window resize event. So a zero-height probe watches its own width with a
``ResizeObserver`` and reports it; :func:`pane_sizes` (plain arithmetic, tested without a browser)
turns it into pane widths; the app redraws its figures to fit.
"""
from __future__ import annotations

import anywidget
import traitlets

#: Below this output width the before/after panes stack; at or above it they stand side by side.
SIDE_BY_SIDE_PX = 800
#: Space between two panes and around a figure inside its box (borders, scroll bar slack).
GAP_PX = 16
MIN_PANE_PX = 240


def pane_sizes(width_px: int) -> tuple[int, bool]:
    """``(pane width, side by side)`` for an output area ``width_px`` wide.

    Two panes side by side when the area is at least :data:`SIDE_BY_SIDE_PX` wide, each half of it
    less the gap; one full-width pane per row below that. Never wider than the area.
    """
    w = max(int(width_px), MIN_PANE_PX + GAP_PX)
    if w >= SIDE_BY_SIDE_PX:
        return max(MIN_PANE_PX, (w - 2 * GAP_PX) // 2), True
    return max(MIN_PANE_PX, w - GAP_PX), False


class WidthProbe(anywidget.AnyWidget):
    """Reports the pixel width of the space it is placed in (0 until drawn)."""

    _esm = """
    export default {
      render({ model, el }) {
        el.style.width = "100%";
        el.style.height = "0px";
        el.classList.add("wb-width-probe");
        const ro = new ResizeObserver((entries) => {
          const w = Math.floor(entries[0].contentRect.width);
          if (w > 0 && Math.abs(w - model.get("width")) >= 8) {
            model.set("width", w);
            model.save_changes();
          }
        });
        ro.observe(el);
        return () => ro.disconnect();
      },
    };
    """
    width = traitlets.Int(0).tag(sync=True)


__all__ = ["WidthProbe", "pane_sizes", "SIDE_BY_SIDE_PX"]
