"""Fusion: the step catalog, the two engine adapters, the timeline, the exporter matrix."""

from .catalog import BY_NAME, CATALOG, Step, get_step
from .matrix import exporter_matrix
from .timeline import ParityReference, Snapshot, Timeline, run_fusion

__all__ = ["BY_NAME", "CATALOG", "Step", "get_step", "Snapshot", "Timeline", "ParityReference", "run_fusion",
           "exporter_matrix"]
