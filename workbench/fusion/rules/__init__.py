"""The workbench's own fusion rules, for patterns neither engine fuses: one object per fusion, one file each.

Each rule (``rule.Rule`` or, matched by onnxscript's pattern matcher, ``rule.PatternRule``) carries its
catalog row, the chains it joins and after which step, its anchors, ``match`` and ``rewrite``;
:data:`BUILTIN` lists them in the order they are registered (``fusion/registry.py``).
"""

from __future__ import annotations

from .activations import SiluRule
from .attention_as_mha import AttentionAsMhaRule
from .attention_as_standard import AttentionAsStandardRule
from .encoder_attention import EncoderAttentionRule, SoftmaxAttentionRule
from .norms import RmsNormRule, SkipNormRule
from .rotary import RotaryRule
from .sdpa_attention import SdpaAttentionFusion, fuse_sdpa_attention, sdpa_attention_rules
from .standard_attention import (
    StandardAttention3DFusion,
    StandardAttentionFusion,
    StandardAttentionRule,
    fuse_standard_attention,
    standard_attention_rules,
)
from .tanh_gelu import TanhGeluRule


def builtin() -> tuple:
    """A fresh instance of every built-in rule, in registration order."""
    return (StandardAttentionRule(), SdpaAttentionFusion(), RmsNormRule(), SkipNormRule(), RotaryRule(),
            EncoderAttentionRule(), SoftmaxAttentionRule(), TanhGeluRule(), SiluRule(), AttentionAsMhaRule(),
            AttentionAsStandardRule())


__all__ = ["builtin", "SdpaAttentionFusion", "sdpa_attention_rules", "fuse_sdpa_attention", "StandardAttentionFusion",
           "StandardAttention3DFusion", "StandardAttentionRule", "standard_attention_rules", "fuse_standard_attention",
           "SiluRule", "EncoderAttentionRule", "SoftmaxAttentionRule", "RmsNormRule", "SkipNormRule", "RotaryRule",
           "TanhGeluRule", "AttentionAsMhaRule", "AttentionAsStandardRule"]
