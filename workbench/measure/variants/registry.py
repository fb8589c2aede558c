"""The registry: :data:`RECIPES` in display order, and the lookups everything else reads.

A new engine's file adds its ``RECIPES`` to the sum below; nothing else lists variants.
"""

from __future__ import annotations

import importlib

from ...errors import ConfigError, RuntimeUnavailableError
from . import ctranslate2, cuda, onnxruntime, openvino, ort_openvino, pytorch
from .recipe import Recipe

RECIPES: tuple[Recipe, ...] = (pytorch.RECIPES + onnxruntime.RECIPES + cuda.RECIPES + openvino.RECIPES
                               + ort_openvino.RECIPES + ctranslate2.RECIPES)
#: How a device is named in a refusal.
DEVICE_WORDS = {"cpu": "CPU", "cuda": "GPU"}
BY_NAME = {r.name: r for r in RECIPES}
#: The first five, as ``workbench bench`` has always called them.
STANDARD = tuple(r.name for r in RECIPES if r.standard)


def recipe(name: str) -> Recipe | None:
    """The recipe called ``name``; None for a name that is no recipe (an app snapshot's step name)."""
    return BY_NAME.get(name)


def get(name: str) -> Recipe:
    """The recipe called ``name``, or a one-line ConfigError listing the names."""
    if name not in BY_NAME:
        raise ConfigError(f"unknown variant {name!r}; choose from {', '.join(BY_NAME)}")
    return BY_NAME[name]


def names(*, tune: bool | None = None, device: str = "cpu") -> tuple[str, ...]:
    """Every recipe's name in display order (``tune=True``: those ``workbench tune`` measures on ``device``,
    the CPU unless ``--provider cuda``; ``tune=False``: the others)."""
    return tuple(r.name for r in RECIPES if tune is None or (device in r.tune) == tune)


def order(name: str) -> int:
    """A name's place in the display order (names that are no recipe last)."""
    return list(BY_NAME).index(name) if name in BY_NAME else len(BY_NAME)


def label(name: str) -> str | None:
    r = BY_NAME.get(name)
    return r.label if r else None


def is_quantized(name: str) -> bool:
    """The variant runs int8 (so its answers are checked even without a text); False for a name that is no recipe."""
    r = BY_NAME.get(name)
    return bool(r and r.quantized)


def peers() -> tuple[str, ...]:
    """What a user would pick instead of ONNX Runtime, as its users ship it."""
    return tuple(r.name for r in RECIPES if r.peer)


def in_app() -> tuple[str, ...]:
    """The recipes the app's latency panel offers beside the snapshots (``Recipe.app``)."""
    return tuple(r.name for r in RECIPES if r.app)


def kinds() -> tuple[str, ...]:
    """The worker's runner kinds (``Variant.kind``)."""
    return tuple(dict.fromkeys(r.kind for r in RECIPES))


def runner_for(kind: str):
    """The worker's runner class for ``kind`` (imported now: call it inside the worker)."""
    spec = next((r.runner for r in RECIPES if r.kind == kind and r.runner), None)
    if spec is None:
        raise ConfigError(f"variant kind must be one of {kinds()}, not {kind!r}")
    module, _, attr = spec.partition(":")
    return getattr(importlib.import_module(module), attr)


def for_precision(precision: str) -> Recipe:
    """The ONNX Runtime recipe that makes the fused model ``precision`` (the fleet sweep's precision axis)."""
    found = {r.precision: r for r in RECIPES if r.from_fused is not None and r.standard}
    if precision not in found:
        raise ConfigError(f"precision {precision!r}: choose {', '.join(found)}")
    return found[precision]


def fleet_precisions() -> tuple[str, ...]:
    return tuple(dict.fromkeys(r.precision for r in RECIPES if r.from_fused is not None and r.standard))


def refuse_devices(names, provider: str) -> None:
    """One line (RuntimeUnavailableError) for recipes among ``names`` that do not run on ``provider``: why
    (each recipe's ``device_note``) and what to do. Names that are no recipe pass."""
    wrong = [BY_NAME[n] for n in names if n in BY_NAME and provider not in BY_NAME[n].devices]
    if wrong:
        where = wrong[0].devices[0]
        why = "; ".join(dict.fromkeys(r.device_note or f"{r.name} runs on the {DEVICE_WORDS[where]} only"
                                      for r in wrong))
        raise RuntimeUnavailableError(f"{why}; drop {', '.join(r.name for r in wrong)} or use --provider {where}")


def check_fixed_shape(names, text_given: bool) -> None:
    """Recipes that replay one captured shape (CUDA graphs) refuse a text's mix of lengths, in one line
    (ConfigError), before any work."""
    fixed = [n for n in names if n in BY_NAME and BY_NAME[n].fixed_shape]
    if fixed and text_given:
        raise ConfigError(f"{', '.join(fixed)} replay one captured shape (batch × sequence), and --text times a mix "
                          f"of lengths: drop --text, or time them at one --batch and --seq")


def available(names, model=None, provider: str = "cpu") -> tuple[list[str], list[dict]]:
    """``(runnable names, skipped [{"name", "why"}])``: each recipe's engine (and, on "cuda", the GPU or
    TensorRT it needs) checked here, and, given the model (a ModelSource), whether it can build that model
    (PyTorch from an ONNX file, a family its converter lacks). Names that are no recipe pass through (the
    build refuses them in one line).

    Raises:
        RuntimeUnavailableError: a recipe that does not run on ``provider`` (:func:`refuse_devices`).
    """
    refuse_devices(names, provider)
    ok, skipped = [], []
    for n in names:
        good, why = BY_NAME[n].available(model, provider) if n in BY_NAME else (True, "")
        if good:
            ok.append(n)
        else:
            skipped.append({"name": n, "why": why})
    return ok, skipped


__all__ = ["RECIPES", "BY_NAME", "STANDARD", "recipe", "get", "names", "order", "label", "is_quantized", "peers", "in_app",
           "kinds", "runner_for", "for_precision", "fleet_precisions", "refuse_devices", "check_fixed_shape",
           "available"]
