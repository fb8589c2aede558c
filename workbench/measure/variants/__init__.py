"""The variants: one :class:`~.recipe.Recipe` per variant, one file per engine, and this registry.

:data:`RECIPES` lists them in display order (tables, plots, the tune, the report); everything that names,
labels, orders, checks or builds a variant reads it: ``workbench bench --variants``, ``workbench tune``,
the report, the app and the fleet sweep. Adding a variant is adding a recipe to an engine's file (a new
engine: a new file with its recipes and its runner, its ``RECIPES`` added in :mod:`.registry`, its kind's
runner in :data:`workbench.measure.worker.kinds.RUNNERS`). Beside the registry: the models recipes build from
(:mod:`.models`, :mod:`.extra`, :mod:`.guarded`, :mod:`.smooth`, :mod:`.static_int8`, :mod:`.ov_quant`,
:mod:`.gpu_column`), the text split they tune on (:mod:`.split`), their labels and their answers (:mod:`.answers`). The GPU's recipes are ordinary ones: :mod:`.cuda`
(CUDA graphs, TensorRT) and ``torch-compile``'s CUDA mode.

Third stage of ``measure``: worker ← harness ← variants ← tune (fleet beside tune). Imports the worker and the
harness; never tune or fleet (the ``tuned`` recipe gets this machine's plan from its caller, ``Build.tuned_plan``).
"""

from __future__ import annotations

from .build import build_variants, default_variants, standard_variants
from .recipe import ENGINES, FP16, FP32_GPU, NEEDS, TORCH_SKIPPED, Build, Recipe, Tolerance
from .registry import (BY_NAME, RECIPES, STANDARD, available, check_fixed_shape, fleet_precisions, for_precision, get,
                       in_app, is_quantized, kinds, label, names, order, peers, recipe, refuse_devices, runner_for)

__all__ = ["RECIPES", "BY_NAME", "STANDARD", "Recipe", "Build", "Tolerance", "FP32_GPU", "FP16", "ENGINES", "NEEDS",
           "TORCH_SKIPPED", "recipe", "get", "names", "order", "label", "is_quantized", "peers", "in_app", "kinds",
           "runner_for", "for_precision", "fleet_precisions", "refuse_devices", "check_fixed_shape", "available",
           "build_variants", "standard_variants", "default_variants"]
