"""The workbench's own onnxscript rewrite rules, for patterns neither engine fuses.

Each rule set is an onnxscript ``RewriteRuleSet``: onnxscript's matcher finds
the pattern, the rule's ``check`` says in a ``MatchResult`` why a candidate
does not qualify, and its ``rewrite`` emits ONNX Runtime contrib ops.
"""

from __future__ import annotations

from .sdpa_attention import SdpaAttentionFusion, sdpa_attention_rules
from .standard_attention import StandardAttention3DFusion, StandardAttentionFusion, standard_attention_rules


def fuse_sdpa_attention(model) -> int:
    """Fuse TorchScript-exported SDPA attention in an ``onnx_ir.Model``, in place; return how many.

    Nodes left unused by the rewrite (the old mask computation, shape
    arithmetic) are removed.
    """
    import onnx_ir.passes.common as common_passes

    count = sdpa_attention_rules().apply_to_model(model)
    if count:
        common_passes.RemoveUnusedNodesPass()(model)
    return int(count)


def fuse_standard_attention(model) -> int:
    """Map ONNX's standard ``Attention`` to ``com.microsoft.MultiHeadAttention`` in an ``onnx_ir.Model``; return how many.

    The head-split Reshapes and Transposes the rule leaves unused are removed.
    """
    import onnx_ir.passes.common as common_passes

    count = standard_attention_rules().apply_to_model(model)
    if count:
        common_passes.RemoveUnusedNodesPass()(model)
    return int(count)


__all__ = ["SdpaAttentionFusion", "sdpa_attention_rules", "fuse_sdpa_attention", "StandardAttentionFusion",
           "StandardAttention3DFusion", "standard_attention_rules", "fuse_standard_attention"]
