"""Building variants from a model: :func:`build_variants` (any recipe's name), :func:`default_variants` (what
``workbench bench`` and the report time when no names are given) and :func:`standard_variants` (the first five).

Derived models are cached beside the export (:func:`workbench.measure.variants.models.cached`), keyed by the
export's content, the recipe and the runtime's version.
"""

from __future__ import annotations

from typing import Callable

from ...errors import BenchmarkError, ConfigError
from ...models import ModelSource, resolve
from .recipe import TORCH_SKIPPED, Build
from .registry import BY_NAME, RECIPES, STANDARD, check_fixed_shape, refuse_devices

Progress = Callable[[str, float], None]


def _noop(stage: str, fraction: float) -> None:
    pass


def _source(model):
    return model if isinstance(model, ModelSource) else resolve(model)


def _refuse(src, recipes, provider: str, text_given: bool) -> None:
    """One line for a recipe that cannot run on ``provider``, on a text, or cannot be built from ``src``."""
    refuse_devices([r.name for r in recipes], provider)
    check_fixed_shape([r.name for r in recipes], text_given)
    for r in recipes:
        if "pytorch" in r.needs and src.kind == "onnx":
            raise BenchmarkError(f"{src.name} is an ONNX file: {TORCH_SKIPPED}; drop {r.name} from --variants")
        why = r.supports(src) if r.supports else ""
        if why:
            raise BenchmarkError(f"{r.name}: {why}; drop it from --variants")


def build_variants(model="bert-base", names=("torch", "unfused", "fused", "int8"), *, provider: str = "cpu",
                   attention: str = "eager", progress: Progress | None = None, plan=None,
                   exporter: str = "torchscript", opset: int | None = None, extra: dict | None = None,
                   snapshot=None) -> list:
    """Build (or find in the cache) the models behind the named variants, in the order given.

    Args:
        model: preset, folder, hub id, .onnx file or ModelSource.
        names: recipe names (:data:`~.registry.RECIPES`).
        provider: "cpu" or "cuda" for every variant (the int8 and OpenVINO ones run on the CPU only, the
            CUDA-graph and TensorRT ones on the GPU only; ``torch-compile`` runs each device's way).
        plan: the :class:`~workbench.config.FusionPlan` behind every fused model (default: engine "auto",
            every default step on); steps it switches off stay off in the sessions too.
        extra: ``text``, ``search_text``, ``threads``, ``tuned_plan`` (:class:`~.recipe.Build`).
        snapshot: the app's fused snapshot, timed as "fused" (and quantized as "int8") instead of the cached file.

    Raises:
        ConfigError: an unknown name. BenchmarkError: a variant this model cannot give.
        RuntimeUnavailableError: a CPU-only variant on CUDA, a GPU-only one on the CPU.
        ConfigError: a CUDA-graph variant (one captured shape) with ``extra["text"]``.
    """
    say = progress or _noop
    names = [n.strip() for n in names if n.strip()]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown or not names:
        raise ConfigError(f"unknown variant(s) {', '.join(unknown) or '(none)'}; choose from {', '.join(BY_NAME)}")
    recipes = [BY_NAME[n] for n in names]
    src = _source(model)
    more = {k: v for k, v in (extra or {}).items() if k in ("text", "search_text", "threads", "tuned_plan")}
    _refuse(src, recipes, provider, more.get("text") is not None)
    ctx = Build(src, provider=provider, attention=attention, exporter=exporter, opset=opset, plan=plan,
                progress=say, snapshot=snapshot, **more)
    say("export", 0.05)
    ctx.export_path
    if any("fused" in r.needs for r in recipes) and snapshot is None:
        ctx.fused
    say("fusions", 0.5)
    out = [r.make(ctx) for r in recipes]
    say("ready", 1.0)
    return out


def standard_variants(model="bert-base", names=("torch", "unfused", "fused", "int8"), **kwargs) -> list:
    """:func:`build_variants` for the names of :data:`~.registry.STANDARD` only (torch, unfused, fused, int8, fp16)."""
    other = [n for n in names if n.strip() and n.strip() not in STANDARD]
    if other:
        raise ConfigError(f"unknown variant(s) {', '.join(other)}; choose from {', '.join(STANDARD)}")
    return build_variants(model, names, **kwargs)


def default_variants(model, provider: str = "cpu") -> tuple[list[str], list[dict]]:
    """The variants timed by default on ``provider`` (torch, unfused, fused, and int8 on the CPU or fp16 on
    CUDA), and those left out for this model with why.

    Returns:
        ``(names, skipped)``: names in display order; ``skipped`` as ``[{"name", "why"}]``.
    """
    src = _source(model)
    names, skipped = [], []
    for r in RECIPES:
        if provider in r.default_on:
            ok, why = r.available(src, provider)
            if ok:
                names.append(r.name)
            else:
                skipped.append({"name": r.name, "why": why})
    return names, skipped


def summary_peers(model, provider: str = "cpu") -> list[str]:
    """The quick peers ``workbench report`` times beside its default variants (:attr:`~.recipe.Recipe.summary_peer`)
    where they are installed and take this model."""
    src = _source(model)
    return [r.name for r in RECIPES if r.summary_peer and provider in r.devices and r.available(src, provider)[0]]


__all__ = ["build_variants", "standard_variants", "default_variants", "summary_peers"]
