"""Graph views as data: summaries, layer grouping, diff and provenance, layout."""

from .diff import Diff, diff_models, provenance_chain
from .summary import (FUSED_OPS, HEADLINE_OPS, count_layers, ensure_node_names, fused_counts, group_by_layer,
                      headline, histogram, layer_map, node_layer)

__all__ = ["Diff", "diff_models", "provenance_chain", "FUSED_OPS", "HEADLINE_OPS", "count_layers",
           "ensure_node_names", "fused_counts", "group_by_layer", "headline", "histogram", "layer_map",
           "node_layer"]
