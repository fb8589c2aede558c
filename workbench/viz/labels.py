"""Display labels for benchmark variants: the one table is :mod:`workbench.measure.variants.labels` (re-exported here,
so figures, the app and the report read the same names as the tune's tables and model card)."""
from __future__ import annotations

from ..measure.variants.labels import GPU_TAG, MODES, VARIANT_LABELS, WITHOUT, on_gpu, variant_label, workload_figure

__all__ = ["VARIANT_LABELS", "WITHOUT", "GPU_TAG", "on_gpu", "MODES", "variant_label", "workload_figure"]
