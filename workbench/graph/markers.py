"""The one-layer view's markers: what stands for the nodes outside the layer (its inputs' producers, its consumers).

Pure data, used by :func:`workbench.graph.layout.layout_graph`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from .nodes import EMBEDDINGS, NodeInfo, NodeTable, html_escape, layer_order, shorten

@dataclass(frozen=True)
class Marker:
    """One labelled item standing for what a layer view leaves out (its inputs' producers, its consumers)."""

    id: str
    label: str
    role: str
    members: tuple[str, ...]  # the node ids it stands for
    tensors: frozenset[str]  # the tensors it carries into (or out of) the layer
    hover: str


@dataclass(frozen=True)
class LayerIO:
    markers: list[Marker]
    out: Marker | None


#: Input roles of a layer view, in the order their markers claim nodes: (role, label, what it stands for).
INPUT_ROLES = (
    ("hidden", "hidden states", "the hidden states this layer transforms"),
    ("mask", "attention mask", "the attention mask, as the graph prepares it for attention"),
    ("shape", "shape", "batch and sequence sizes read from an input's shape"),
    ("other", "other inputs", "other values computed outside this layer"),
)
INPUT_ROLES_LABEL = tuple((r, label) for r, label, _ in INPUT_ROLES)
_INT_TYPES = ("int", "uint", "bool")


def _op_counts(table: NodeTable, ids: Iterable[str], top: int = 6) -> str:
    ops: dict[str, int] = {}
    for i in ids:
        op = table.by_id[i].op_type
        ops[op] = ops.get(op, 0) + 1
    ranked = sorted(ops.items(), key=lambda kv: (-kv[1], kv[0]))
    text = ", ".join(f"{op} {c}" for op, c in ranked[:top])
    return text + (f", {len(ranked) - top} more op types" if len(ranked) > top else "")


def layer_io(table: NodeTable, layer: int, inside: list[NodeInfo], inside_ids: set[str]) -> LayerIO:
    """The markers of a one-layer view: one per role of what flows in, one for what flows out.

    A tensor from outside the layer is "hidden" when an embedding block or another
    layer makes it (or it is EmbedLayerNormalization's first output), "mask" when
    its out-of-layer ancestry reads an input named like a mask (or it is
    EmbedLayerNormalization's mask index), "shape" when it is an integer, else
    "other". Each marker stands for the producers of its tensors and for their
    out-of-layer, out-of-group ancestors (the mask and shape plumbing), each node
    counted under the first role that claims it.
    """
    ext = _external_inputs(table, inside, inside_ids)
    roles, cones = _roles(table, ext, inside_ids)
    return LayerIO(markers=_input_markers(table, layer, ext, roles, cones),
                   out=_out_marker(table, layer, inside_ids))


def _external_inputs(table: NodeTable, inside: list[NodeInfo], inside_ids: set[str]) -> dict[str, str | None]:
    """Tensor read inside the layer but made outside it → its producer (None: a graph input)."""
    ext: dict[str, str | None] = {}
    for n in inside:
        for t in n.inputs:
            if not t or t in table.initializers or t in ext:
                continue
            p = table.producer.get(t)
            if p in inside_ids:
                continue
            if p is None and t not in table.graph_inputs:
                continue
            ext[t] = p
    return ext


def _roles(table: NodeTable, ext: dict[str, str | None],
           inside_ids: set[str]) -> tuple[dict[str, str], dict[str, set[str]]]:
    """Each outside tensor's role, and the cone of out-of-group nodes behind it (what its marker stands for)."""

    def ancestry(p: str) -> set[str]:
        """``p`` and its ancestors that sit in no group (stops at embeddings and layers)."""
        seen, stack = set(), [p]
        while stack:
            u = stack.pop()
            if u in seen or u in inside_ids:
                continue
            seen.add(u)
            if table.by_id[u].group is not None:
                continue
            for t in table.by_id[u].inputs:
                q = table.producer.get(t)
                if q is not None and q not in seen:
                    stack.append(q)
        return seen

    def reads_mask(ids: set[str]) -> bool:
        return any(table.by_id[u].group is None and any(t in table.graph_inputs and "mask" in t.lower()
                                                        for t in table.by_id[u].inputs) for u in ids)

    roles: dict[str, str] = {}
    cones: dict[str, set[str]] = {}
    for t, p in ext.items():
        dtype = table.shapes.get(t, "").split("[")[0]
        if p is None:
            roles[t] = "mask" if "mask" in t.lower() else "shape" if dtype.startswith(_INT_TYPES) else "other"
            cones[t] = set()
            continue
        pn = table.by_id[p]
        cones[t] = cone = ancestry(p)
        if pn.op_type == "EmbedLayerNormalization":
            roles[t] = "mask" if t in pn.outputs[1:2] else "hidden"
        elif pn.group is not None and not dtype.startswith(_INT_TYPES):
            roles[t] = "hidden"
        elif reads_mask(cone):
            roles[t] = "mask"
        elif dtype.startswith(_INT_TYPES) or pn.op_type in ("Shape", "Size"):
            roles[t] = "shape"
        else:
            roles[t] = "other"
    return roles, cones


def _input_markers(table: NodeTable, layer: int, ext: dict[str, str | None], roles: dict[str, str],
                   cones: dict[str, set[str]]) -> list[Marker]:
    """One marker per role that has tensors, standing for their producers and the plumbing behind them."""
    g = f"layer {layer}"
    # Each tensor's own producer belongs to its role's marker; then the plumbing behind it, first come first served.
    claimed: dict[str, str] = {}
    for role, _, _ in INPUT_ROLES:
        for t, p in ext.items():
            if p is not None and roles[t] == role:
                claimed.setdefault(p, role)
    for role, _, _ in INPUT_ROLES:
        for t in ext:
            if roles[t] == role:
                for u in cones[t]:
                    claimed.setdefault(u, role)
    order = {n.id: k for k, n in enumerate(table.nodes)}
    markers = []
    for role, label, what in INPUT_ROLES:
        tensors = [t for t in ext if roles[t] == role]
        if not tensors:
            continue
        ids = sorted((u for u, r in claimed.items() if r == role), key=order.__getitem__)
        origin = ""
        if role == "hidden":
            srcs = sorted({table.by_id[ext[t]].group or table.by_id[ext[t]].op_type for t in tensors if ext[t]})
            origin = "from " + (", ".join(srcs) if srcs else "the graph inputs")
        lines = [f"<b>{label}</b>{' ' + html_escape(origin) if origin else ''}", f"<i>{what}</i>"]
        if ids:
            lines.append(f"stands for {len(ids)} node{'s' if len(ids) != 1 else ''} outside {g}: "
                         f"{_op_counts(table, ids)}")
        else:  # its producers are another marker's (EmbedLayerNormalization makes hidden states and mask index)
            owners = sorted({dict(INPUT_ROLES_LABEL)[claimed[ext[t]]] for t in tensors if ext[t] in claimed})
            if owners:
                lines.append(f"made by the node{'s' if len(owners) > 1 else ''} behind {html_escape(', '.join(owners))}")
        for t in tensors[:4]:
            src = f" ← {table.by_id[ext[t]].op_type}" if ext[t] else " (graph input)"
            lines.append(f"in: {html_escape(shorten(t, 40))} {table.shapes.get(t, '')}{html_escape(src)}")
        if len(tensors) > 4:
            lines.append(f"in: ... {len(tensors) - 4} more")
        markers.append(Marker(id=f"in:{role}", label=label, role=role, members=tuple(ids),
                              tensors=frozenset(tensors), hover="<br>".join(lines)))
    return markers


def _out_marker(table: NodeTable, layer: int, inside_ids: set[str]) -> Marker | None:
    """What leaves the layer: tensors read by nodes outside it, or graph outputs."""
    g = f"layer {layer}"
    outs: dict[str, list[str]] = {}
    for n in table.nodes:
        if n.id in inside_ids:
            continue
        for t in n.inputs:
            if t and table.producer.get(t) in inside_ids:
                outs.setdefault(t, []).append(n.id)
    for t in table.graph_outputs:
        if table.producer.get(t) in inside_ids:
            outs.setdefault(t, [])
    # Integer values handed on (dynamo shares a layer's shape Concat with the next) are named in the hover,
    # not drawn: an edge from deep in the layer's plumbing to "out" reads as a second output.
    sizes = [t for t in outs if table.shapes.get(t, "").startswith(_INT_TYPES)]
    if len(sizes) < len(outs):
        outs = {t: cs for t, cs in outs.items() if t not in sizes}
    else:
        sizes = []
    if not outs:
        return None
    order = {n.id: k for k, n in enumerate(table.nodes)}
    consumers = sorted({c for cs in outs.values() for c in cs}, key=order.__getitem__)
    dests = sorted({table.by_id[c].group or table.by_id[c].op_type for c in consumers},
                   key=lambda d: layer_order(d) if d == EMBEDDINGS or d.startswith("layer ") else (3, 0))
    if any(t in table.graph_outputs for t in outs):
        dests.append("graph output")
    label = "to " + (dests[0] if len(dests) == 1 else f"{dests[0]} +{len(dests) - 1}")
    lines = [f"<b>out</b>: what {g} passes on, to {html_escape(', '.join(dests))}"]
    if consumers:
        lines.append(f"stands for the {len(consumers)} node{'s' if len(consumers) != 1 else ''} that read it: "
                     f"{_op_counts(table, consumers)}")
    for t in list(outs)[:4]:
        lines.append(f"out: {html_escape(shorten(t, 40))} {table.shapes.get(t, '')}")
    if sizes:
        lines.append(f"also hands on {len(sizes)} shape value{'s' if len(sizes) != 1 else ''} (not drawn)")
    return Marker(id="out:", label=label, role="out", members=tuple(consumers), tensors=frozenset(outs),
                  hover="<br>".join(lines))
