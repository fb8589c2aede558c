"""The whole-model view's groups: what reads like an architecture diagram (embeddings, attention mask, layers, head).

Pure data. :func:`view_groups` gives every node the box it is drawn in when the whole model is shown:
its encoder layer or the embeddings (``NodeInfo.group``), else the module the exporter recorded for it
(``final_norm`` → "final norm", ``pooler``, ``rotary_emb`` → "rotary embedding"), else "attention mask" for
what computes the mask from the graph's mask input (named with the sliding window when the graph has one),
else the one group every reader of it belongs to. Nothing here knows a model family: it reads names,
module scopes and the graph's own constants.
"""

from __future__ import annotations

import re

from .nodes import EMBEDDINGS, NodeTable, group_of_name

MASK = "attention mask"
SIZES = "input sizes"
#: Abbreviations in module names, in words (a group's name is what a user reads).
WORDS = {"emb": "embedding", "embs": "embeddings", "cls": "head", "attn": "attention", "mlp": "feed-forward",
         "ln": "norm", "lm": "language model"}
#: Fused ops that are the embedding block (ONNX Runtime's).
EMBED_OPS = ("EmbedLayerNormalization", "QEmbedLayerNormalization")
#: Module names that hold the encoder's layers or embeddings (where the base model's path ends).
_CONTAINERS = {"embeddings", "encoder", "layer", "layers", "h", "block", "blocks"}
#: Comparisons a sliding-window mask makes between |i - j| and its half-width.
_WINDOW_OPS = ("LessOrEqual", "Less", "GreaterOrEqual", "Greater")


def module_words(name: str) -> str:
    """A module's attribute name in words: ``rotary_emb_1`` → "rotary embedding", ``final_norm`` → "final norm"."""
    name = re.sub(r"[_.]\d+$", "", name)
    return " ".join(WORDS.get(w, w) for w in re.split(r"[_.]+", name) if w) or name


def view_groups(table: NodeTable) -> dict[str, str]:
    """Node id → the group the whole-model view draws it in (nodes in no group are left out).

    In this order: the node's layer or the embeddings; the model's own top-level module under the
    base model (what the exporter's scopes say); the attention mask's computation (every node that
    reads the graph's mask input, directly or not, and the size arithmetic only it uses); then, until
    nothing changes, a node whose every reader is in one group joins it; what is still left before the
    first layer joins the mask when it computes booleans, and "input sizes" when it computes integers.
    """
    # A node's own module scope wins over the group the node table lent it from its readers: the mask
    # computed at the model's top level is not layer 0's, even when layer 0 reads it first.
    groups = {n.id: n.group for n in table.nodes
              if n.group and not (n.scope and group_of_name("/".join(n.scope)) is None)}
    base = _base_prefix(table)
    for n in table.nodes:
        if n.id not in groups and n.op_type in EMBED_OPS:  # a fused embedding block is the embeddings
            groups[n.id] = EMBEDDINGS
        elif n.id not in groups and len(n.scope) > len(base) and n.scope[:len(base)] == base:
            groups[n.id] = module_words(n.scope[len(base)])
    mask = _mask_nodes(table, groups)
    name = _mask_name(table, mask) if mask else ""
    for nid in mask:
        groups[nid] = name
    _join_readers(table, groups)
    _join_last(table, groups)
    # What is left before the first layer: boolean arithmetic is more of the mask (position-only masks),
    # integer arithmetic the sizes read from the inputs.
    early = _before_layers(table, groups)
    for kind, group in (("bool", name), ("int", SIZES)):
        for nid in early:
            dtype = table.shapes.get(table.by_id[nid].outputs[0] if table.by_id[nid].outputs else "", "")
            if group and nid not in groups and dtype.startswith(kind):
                groups[nid] = group
        _join_readers(table, groups)
    return groups


def _before_layers(table: NodeTable, groups: dict[str, str]) -> list[str]:
    """Nodes in no group that no encoder layer feeds (directly or not), in graph order."""
    after: set[str] = set()
    for n in table.nodes:
        if n.layer is not None or any(table.producer.get(t) in after for t in n.inputs):
            after.add(n.id)
    return [n.id for n in table.nodes if n.id not in groups and n.id not in after]


def _base_prefix(table: NodeTable) -> tuple[str, ...]:
    """The module path the encoder's own modules sit under (``("inner",)``, or ``("inner", "bert")`` for a model
    with a head): the path the embeddings' and the layers' scopes share."""
    scopes = [n.scope for n in table.nodes if n.group and n.scope and group_of_name("/".join(n.scope))]
    if not scopes:
        return ()
    prefix = list(scopes[0])
    for sc in scopes[1:]:
        k = 0
        while k < len(prefix) and k < len(sc) and prefix[k] == sc[k]:
            k += 1
        del prefix[k:]
    # Stop before the encoder's own containers (when every scope is inside one layer list): the groups
    # are named after what sits beside the embeddings and the encoder.
    for k, part in enumerate(prefix):
        if part in _CONTAINERS or part.isdigit():
            return tuple(prefix[:k])
    return tuple(prefix)


def _consumers(table: NodeTable) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for n in table.nodes:
        for t in n.inputs:
            p = table.producer.get(t)
            if p is not None:
                out.setdefault(p, []).append(n.id)
    return out


def _mask_nodes(table: NodeTable, groups: dict[str, str]) -> set[str]:
    """Ungrouped nodes computing the attention mask: downstream of a graph input named like a mask (and not
    of a layer), plus the ungrouped nodes whose every reader is one of them (the sizes the mask is shaped by)."""
    masks = {t for t in table.graph_inputs if "mask" in t.lower() and t not in table.initializers}
    if not masks:
        return set()
    found: set[str] = set()
    for n in table.nodes:  # graph order is topological
        if n.id in groups or _reads_weights(table, n):  # mask arithmetic reads no weight
            continue
        if any(t in masks or table.producer.get(t) in found for t in n.inputs):
            found.add(n.id)
    readers = _consumers(table)
    changed = True
    while changed:
        changed = False
        for n in reversed(table.nodes):
            rs = readers.get(n.id, [])
            if n.id not in groups and n.id not in found and rs and all(r in found for r in rs):
                found.add(n.id)
                changed = True
    return found


def _reads_weights(table: NodeTable, n) -> bool:
    """Whether ``n`` reads a floating-point initializer of more than one value (a weight)."""
    return any(t in table.initializers and t not in table.scalars and table.shapes.get(t, "").startswith(
        ("float", "bfloat", "double")) for t in n.inputs)


def _join_last(table: NodeTable, groups: dict[str, str]) -> None:
    """A node in no group that only the graph's outputs read joins the one group all its inputs come from
    (a fused last norm of the last layer)."""
    readers = _consumers(table)
    for n in table.nodes:
        if n.id in groups or readers.get(n.id):
            continue
        gs = {groups.get(table.producer[t]) for t in n.inputs if t in table.producer}
        if len(gs) == 1 and None not in gs:
            groups[n.id] = gs.pop()


def _mask_name(table: NodeTable, mask: set[str]) -> str:
    """"attention mask", with the sliding window when the mask compares |i - j| with a constant half-width."""
    for nid in mask:
        n = table.by_id[nid]
        if n.op_type not in _WINDOW_OPS or len(n.inputs) < 2:
            continue
        src = table.by_id.get(table.producer.get(n.inputs[0], ""))
        half = table.scalars.get(n.inputs[1])
        if src is not None and src.op_type == "Abs" and half is not None and half > 0:
            return f"{MASK} (window ±{half:g})"
    return MASK


def _join_readers(table: NodeTable, groups: dict[str, str]) -> None:
    """A node in no group whose every reader is in one group joins that group (size and position arithmetic
    made for one layer, the embeddings or the mask), from the last node up, until nothing changes."""
    readers = _consumers(table)
    changed = True
    while changed:
        changed = False
        for n in reversed(table.nodes):
            if n.id in groups:
                continue
            gs = {groups.get(r) for r in readers.get(n.id, [])}
            if len(gs) == 1 and None not in gs:
                groups[n.id] = gs.pop()
                changed = True


def describe(g: str) -> str:
    """What a group computes, in a sentence, for its hover ("" when its name says it all)."""
    m = re.match(re.escape(MASK) + r" \(window ±(\S+)\)", g)
    if m:
        return (f"a sliding window: each token attends to the tokens at most {m.group(1)} positions away, "
                "and not to padding")
    if g.startswith(MASK):
        return "which tokens attend to which: the padding masked out"
    if g == SIZES:
        return "batch and sequence sizes read from the inputs' shapes"
    return ""


def group_key(g: str) -> tuple[int, int, str]:
    """Reading order of groups: embeddings, the mask and other inputs' groups, layers, then the rest."""
    if g == EMBEDDINGS:
        return (0, 0, g)
    if g.startswith(MASK) or g == SIZES:
        return (1, 0, g)
    if g.startswith("layer ") and g[6:].isdigit():
        return (2, int(g[6:]), g)
    return (3, 0, g)


__all__ = ["view_groups", "module_words", "group_key", "describe", "MASK", "SIZES", "WORDS"]
