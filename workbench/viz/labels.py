"""Display labels for benchmark variants: the one table is :mod:`workbench.measure.labels` (re-exported here,
so figures, the app and the report read the same names as the tune's tables and model card)."""
from __future__ import annotations

from ..measure.labels import MODES, VARIANT_LABELS, WITHOUT, variant_label, workload_figure

__all__ = ["VARIANT_LABELS", "WITHOUT", "MODES", "variant_label", "workload_figure"]
