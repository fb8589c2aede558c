"""Graph summaries: op histogram, fused-op counts, encoder-layer grouping.

Plain functions over ``onnx.ModelProto`` (or any object with a ``graph`` of
nodes), so the fusion timeline, the CLI and the views share one definition
of "how many Attention nodes" and "which encoder layer is this node in".
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Iterable

import onnx

#: Op types the fusion engines emit (ORT's ``get_fused_operator_statistics``
#: list, plus onnxscript's extra outputs). LayerNormalization is here because
#: ORT's LayerNorm fusion emits it, although dynamo exports already have it.
FUSED_OPS: tuple[str, ...] = (
    "EmbedLayerNormalization", "Attention", "MultiHeadAttention", "GroupQueryAttention",
    "Gelu", "FastGelu", "BiasGelu", "GemmFastGelu", "QuickGelu",
    "LayerNormalization", "SimplifiedLayerNormalization", "SkipLayerNormalization",
    "SkipSimplifiedLayerNormalization", "RotaryEmbedding", "FusedMatMul", "BiasSoftmax",
    "QOrderedAttention", "QOrderedGelu", "QOrderedLayerNormalization", "QOrderedMatMul",
)
#: The headline counts every report shows, in this order.
HEADLINE_OPS: tuple[str, ...] = ("Attention", "MultiHeadAttention", "SkipLayerNormalization", "BiasGelu",
                                 "EmbedLayerNormalization", "LayerNormalization", "Gelu", "FastGelu")

#: A node name's (or metadata value's) encoder layer number: ``encoder/layer.3/...`` -> 3.
LAYER_RE = re.compile(r"(?:^|[/._: '])(?:layer|layers)[._/](\d+)(?=[/._: ']|$)")
_SCOPE_KEYS = ("pkg.torch.onnx.name_scopes", "namespace")


def histogram(model) -> dict[str, int]:
    """Count nodes per op type, most frequent first."""
    counts = Counter(n.op_type for n in _graph(model).node)
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def fused_counts(model, *, all_ops: bool = False) -> dict[str, int]:
    """Count nodes of fused op types (see :data:`FUSED_OPS`).

    Args:
        model: a ModelProto.
        all_ops: include fused op types with a count of 0.
    """
    counts = Counter(n.op_type for n in _graph(model).node if n.op_type in FUSED_OPS)
    if all_ops:
        return {op: counts.get(op, 0) for op in FUSED_OPS}
    return {op: counts[op] for op in FUSED_OPS if counts.get(op)}


#: Attention ops of every kind: (domain, op type) → the name reports use.
ATTENTION_KINDS: dict[tuple[str, str], str] = {
    ("", "Attention"): "standard",  # ONNX's own op (opset 23+), written by the dynamo exporter for sdpa
    ("com.microsoft", "Attention"): "contrib",
    ("com.microsoft", "MultiHeadAttention"): "multi_head",
    ("com.microsoft", "GroupQueryAttention"): "group_query",
}


def attention_kinds(model) -> dict[str, int]:
    """Attention nodes per kind (every kind listed, zeros included).

    A standard ``Attention`` present in the export is the exporter's doing, not a fusion's: reports
    compare these counts before and after the timeline to say who fused what.
    """
    counts = Counter(ATTENTION_KINDS.get(("" if n.domain in ("", "ai.onnx") else n.domain, n.op_type))
                     for n in _graph(model).node)
    return {kind: counts.get(kind, 0) for kind in ATTENTION_KINDS.values()}


def node_layer(node: onnx.NodeProto) -> int | None:
    """The encoder layer a node belongs to, from its name or export scope.

    TorchScript names carry the module path (``/encoder/layer.3/...``); the
    dynamo exporter puts it in the node metadata (``name_scopes``).
    """
    m = LAYER_RE.search(node.name)
    if m:
        return int(m.group(1))
    for prop in node.metadata_props:
        if prop.key in _SCOPE_KEYS:
            m = LAYER_RE.search(prop.value)
            if m:
                return int(m.group(1))
    return None


def layer_map(model) -> dict[str, int | None]:
    """Node name → encoder layer (None for embeddings, pooler and glue)."""
    return {n.name: node_layer(n) for n in _graph(model).node}


def count_layers(model) -> int:
    """How many encoder layers the node names or scopes reveal (0 if none)."""
    layers = {node_layer(n) for n in _graph(model).node}
    layers.discard(None)
    return max(layers) + 1 if layers else 0


def group_by_layer(model) -> dict[int | None, list[str]]:
    """Encoder layer → node names, in graph order; key None holds the rest."""
    groups: dict[int | None, list[str]] = {}
    for n in _graph(model).node:
        groups.setdefault(node_layer(n), []).append(n.name)
    return groups


def ensure_node_names(model: onnx.ModelProto, prefix: str = "wb") -> int:
    """Give every unnamed or duplicate-named node a unique name, in place.

    Diffs and provenance are keyed by node name, so each must be unique.
    Names do not change what a model computes. Returns how many were renamed.
    """
    return name_nodes(model.graph.node, prefix)


def name_nodes(nodes, prefix: str = "wb") -> int:
    """:func:`ensure_node_names` over any nodes with ``name`` and ``op_type`` (protobuf or onnx_ir)."""
    seen: set[str] = set()
    renamed = 0
    for i, n in enumerate(nodes):
        if not n.name or n.name in seen:
            base = f"{n.op_type}_{prefix}{i}"
            name, k = base, 0
            while name in seen:
                k += 1
                name = f"{base}_{k}"
            n.name = name
            renamed += 1
        seen.add(n.name)
    return renamed


def _graph(model) -> onnx.GraphProto:
    return model.graph if hasattr(model, "graph") else model


def headline(counts: dict[str, int], ops: Iterable[str] = HEADLINE_OPS) -> dict[str, int]:
    """The headline fused counts, 0 where absent, in a fixed order."""
    return {op: int(counts.get(op, 0)) for op in ops}
