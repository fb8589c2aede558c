"""Fusion: the step catalog, the engines' chains, the rule protocol and its registry, the timeline, the exporter matrix."""

from .catalog import BY_NAME, CATALOG, get_step
from .matrix import exporter_matrix
from .registry import register_rule, unregister_rule
from .rule import Match, PatternRule, Rewrite, Rule
from .steps import Step
from .timeline import ParityReference, Snapshot, Timeline, run_fusion

__all__ = ["BY_NAME", "CATALOG", "Step", "get_step", "Snapshot", "Timeline", "ParityReference", "run_fusion",
           "exporter_matrix", "Rule", "PatternRule", "Match", "Rewrite", "register_rule", "unregister_rule"]
