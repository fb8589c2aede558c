"""Which execution provider runs each node, drawn as the node's outline colour and named in a legend line.

The overlay takes a mapping node id → provider name ("CPU", "OpenVINO", "CUDA", or ONNX Runtime's own
``CPUExecutionProvider``...) the way the graph scene takes a latency per node. An outline takes no room
beside a node, so no label is shortened and no edge moves; without a mapping nothing is added.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Mapping, Sequence

#: Outline colour of each provider a workshop meets (colour-blind safe, apart from the op colours' fills).
PROVIDER_COLOURS = {"CPU": "#0072b2", "CUDA": "#009e73", "OpenVINO": "#e69f00", "TensorRT": "#cc79a7",
                    "DirectML": "#56b4e9", "CoreML": "#d55e00"}
#: Colours for other providers, in the order they first appear.
OTHER_COLOURS = ("#882255", "#44aa99", "#999933", "#aa4499")
#: A collapsed group whose members run on more than one provider.
MIXED = "mixed"
MIXED_COLOUR = "#777777"
#: Outline width (pixels) of a node with a provider.
OUTLINE_PX = 2.0


@dataclass(frozen=True)
class ProviderOverlay:
    """Each item's outline colour ("" for none), the legend's (name, colour) pairs and a hover line per item."""

    outline: list[str]
    legend: list[tuple[str, str]]
    hover: list[str]


def provider_name(name: str) -> str:
    """ONNX Runtime's provider name in a workshop's words: ``OpenVINOExecutionProvider`` → "OpenVINO"."""
    return name[: -len("ExecutionProvider")] if name.endswith("ExecutionProvider") else name


def provider_overlay(ids: Sequence[str], kinds: Sequence[str], members: Mapping[str, Sequence[str]],
                     providers: Mapping[str, str]) -> ProviderOverlay:
    """The overlay for items ``ids`` (a collapsed group takes its members' provider, or :data:`MIXED`)."""
    names: list[str] = []
    for iid, kind in zip(ids, kinds):
        found = {provider_name(providers[m]) for m in (members.get(iid, ()) if kind == "group" else (iid,))
                 if providers.get(m)}
        names.append("" if not found else found.pop() if len(found) == 1 else MIXED)
    colours: dict[str, str] = {}
    others = iter(OTHER_COLOURS * (1 + len(set(names)) // len(OTHER_COLOURS)))
    for name in sorted({n for n in names if n}, key=lambda n: (n == MIXED, n not in PROVIDER_COLOURS, n)):
        colours[name] = MIXED_COLOUR if name == MIXED else PROVIDER_COLOURS.get(name) or next(others)
    return ProviderOverlay(outline=[colours.get(n, "") for n in names], legend=list(colours.items()),
                           hover=[f"<br><b>provider</b>: {html.escape(n)}" if n else "" for n in names])


def plotly_outline(outline: Sequence[str] | None) -> dict:
    """A plotly marker line: each node's provider colour where it has one, else the thin grey edge."""
    if not outline:
        return dict(width=0.5, color="#333")
    return dict(width=[OUTLINE_PX if c else 0.5 for c in outline], color=[c or "#333" for c in outline])


def legend_html(legend: Sequence[Sequence[str]]) -> str:
    """The legend line as plotly's HTML: a dot in each provider's colour before its name."""
    return "  ".join(f"<span style='color:{c}'>\u25cf</span> {html.escape(name)}" for name, c in legend)


__all__ = ["MIXED", "OUTLINE_PX", "PROVIDER_COLOURS", "ProviderOverlay", "legend_html", "plotly_outline", "provider_name", "provider_overlay"]
