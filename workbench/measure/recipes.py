"""The standard comparison: PyTorch eager, unfused, fused, int8 and fp16 variants of one model.

One place builds these so the CLI, the article script and the notebook
compare the same things:

``torch``    PyTorch eager on the same weights (the "before" users know);
``unfused``  the TorchScript export with every ONNX Runtime optimization off;
``fused``    that export after the fusion timeline (the BERT fusions of
             ONNX Runtime's transformers optimizer, or onnxscript's, engine
             "auto"), session level "all";
``int8``     ``fused`` after dynamic int8 quantization;
``fp16``     ``fused`` (GPU fusions) in float16 with fp32 inputs/outputs;
``torch-compile``  ``torch.compile`` (inductor) on the PyTorch model;
``tuned``    the export fused under this machine's plan (``workbench ablate``'s tuned plan, cached);
``int8-guarded``   the fastest int8 model whose answers hold on the sentences (:mod:`.guarded`);
``int8-static``    ``fused`` after static QDQ int8, calibrated on the text's search part (:mod:`.static_int8`);
``openvino-f32``, ``openvino``  OpenVINO on the export (f32, or its default precision on this CPU);
``openvino-int8``, ``openvino-int8-guarded``  NNCF's static int8 of the export, plain or accuracy-controlled
                   (:mod:`.ov_quant`).

The last eight are built by :func:`workbench.measure.recipes_extra.variants`, which takes every
name; the peers (torch-compile, openvino*) are skipped with a reason where they cannot run
(:func:`workbench.measure.recipes_extra.available`).

Derived models are cached beside the export, keyed by the export's content,
the recipe and the onnxruntime version.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Callable

from ..errors import BenchmarkError, ConfigError, RuntimeUnavailableError
from .bench import Variant

STANDARD = ("torch", "unfused", "fused", "int8", "fp16")
EXTRA = ("torch-compile", "tuned", "int8-guarded", "int8-static", "openvino-f32", "openvino", "openvino-int8",
         "openvino-int8-guarded")
ALL = STANDARD + EXTRA
RECIPE_VERSION = 2
Progress = Callable[[str, float], None]


def _noop(stage: str, fraction: float) -> None:
    pass


def _derived_key(export_path: Path, recipe: str) -> str:
    from ..models import file_identity
    from ..ort.machine import _version

    key = json.dumps([file_identity(Path(export_path)), recipe, RECIPE_VERSION,
                      _version("onnxruntime-gpu") or _version("onnxruntime")])
    return hashlib.sha256(key.encode()).hexdigest()[:24]


def _cached(export_path: Path, recipe: str, build: Callable[[Path], None], name: str = "model.onnx") -> Path:
    """Build the variant ``recipe`` of ``export_path`` once, in the export's group of the cache (its weights
    shared with the export's: :mod:`workbench.cache.store`); later calls are a lookup. ``build(out)`` writes
    an ONNX file at ``out`` in a temporary folder; other files it writes there are kept as side files
    (``modelstore.sidecar``). ``name``: the file a lookup returns; a build that is no ONNX model (an OpenVINO
    IR's ``openvino_model.xml``) is kept whole in a folder of its own."""
    import shutil

    from ..cache import store as modelstore

    key, group = _derived_key(export_path, recipe), modelstore.group_of_model(Path(export_path))
    hit = modelstore.find("variants", key, group, name)  # leased: `workbench cache` leaves it alone
    if hit is not None:
        return hit[0]
    tmp = modelstore.staging(group)
    try:
        build(tmp / "model.onnx")
        # What it was built from, for `workbench cache` (which model, which recipe).
        return modelstore.publish(tmp / name, kind="variants", key=key, group=group,
                                  meta={"export": str(export_path), "recipe": recipe})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def fuse_bert(export_path: Path, *, num_heads: int = 0, hidden_size: int = 0, use_gpu: bool = False,
              plan=None) -> Path:
    """The export after the fusion timeline's last step (the BERT fusions), cached.

    CPU: the same :class:`~workbench.fusion.timeline.Timeline` the notebook
    and ``workbench fuse`` show, with ``plan`` (default: engine "auto", every
    default step on), so what is timed is what was shown, on either exporter
    and attention. GPU (``use_gpu``): ONNX Runtime's optimizer with its GPU
    options. Python fusions only, so the session's own level decides the
    rest and the file runs on any provider.
    """
    from ..config import FusionPlan

    plan = plan or FusionPlan()

    def build_gpu(out: Path) -> None:
        import logging

        from onnxruntime.transformers.optimizer import optimize_model
        from ..modelio import save_model

        log = logging.getLogger("onnxruntime.transformers")
        old = log.level
        log.setLevel(logging.ERROR)
        try:
            opt = optimize_model(str(export_path), model_type="bert", num_heads=num_heads, hidden_size=hidden_size,
                                 opt_level=0, use_gpu=True)
        except Exception as e:
            raise BenchmarkError(f"the BERT fusions failed on {Path(export_path).name}: "
                                 f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from e
        finally:
            log.setLevel(old)
        model = opt.model
        domains = {n.domain for n in model.graph.node if n.domain}
        have = {o.domain for o in model.opset_import}
        for d in sorted(domains - have):  # the optimizer adds contrib nodes without declaring their domain
            model.opset_import.append(__import__("onnx").helper.make_opsetid(d, 1))
        save_model(model, out)

    def build(out: Path) -> None:
        from ..errors import WorkbenchError
        from ..fusion.timeline import run_fusion
        from ..modelio import save_model

        try:
            tl = run_fusion(Path(export_path), plan, num_heads=num_heads or None, hidden_size=hidden_size or None)
        except WorkbenchError:
            raise
        except Exception as e:
            raise BenchmarkError(f"the BERT fusions failed on {Path(export_path).name}: "
                                 f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from e
        save_model(tl.final.model, out)

    if use_gpu:
        return _cached(Path(export_path), f"fused-h{num_heads}-d{hidden_size}-gpu1", build_gpu)
    from ..fusion.registry import plan_key  # the plan, and the rules added at run time (app.add_rule) it runs

    key = f"timeline-{plan_key(plan)}"
    return _cached(Path(export_path), f"fused-h{num_heads}-d{hidden_size}-{key}", build)


def int8_of(fused_path: Path) -> Path:
    """Dynamic int8 quantization of a (fused) model with per-channel weight scales, cached.

    Per channel, because on real weights per-tensor scales change the answers (all-MiniLM-L6-v2:
    similarity-ranking Spearman 0.946 per tensor, 0.986 per channel) while the speed is the same
    (bert-base on an AVX2 EPYC: 113.9 against 113.2 ms).
    """
    from .precision import quantize_int8
    return _cached(Path(fused_path), "int8-per-channel",
                   lambda out: quantize_int8(fused_path, out, per_channel=True))


def fp16_of(fused_path: Path) -> Path:
    """float16 conversion keeping fp32 inputs/outputs, cached."""
    from .precision import to_fp16
    return _cached(Path(fused_path), "fp16", lambda out: to_fp16(fused_path, out))


#: Why a variant is left out of the default comparison for a kind of model source.
TORCH_SKIPPED = "an ONNX file carries no PyTorch model, so there is no PyTorch eager variant to time"


def default_variants(model, provider: str = "cpu") -> tuple[list[str], list[dict]]:
    """The variants that make sense for this model and provider, and those left out with why.

    Returns:
        ``(names, skipped)``: names in report order; ``skipped`` as ``[{"name", "why"}]`` (plain
        data for the CLI's JSON, its one-line notice and the app).
    """
    from ..models import ModelSource, resolve

    src = model if isinstance(model, ModelSource) else resolve(model)
    names = ["torch", "unfused", "fused", "int8" if provider == "cpu" else "fp16"]
    skipped = []
    if src.kind == "onnx":
        names.remove("torch")
        skipped.append({"name": "torch", "why": TORCH_SKIPPED})
    return names, skipped


def standard_variants(model="bert-base", names=("torch", "unfused", "fused", "int8"), *, provider: str = "cpu",
                      attention: str = "eager", progress: Progress | None = None, plan=None,
                      exporter: str = "torchscript", opset: int | None = None) -> list[Variant]:
    """Build (or find in the cache) the models behind the standard variants.

    Args:
        model: preset, folder, hub id or .onnx file (no ``torch`` variant then).
        names: a subset of :data:`STANDARD`, in the order to report them.
        provider: "cpu" or "cuda" for every variant (int8 is CPU-only).
        attention: transformers attention for the export and the torch variant.
        plan: the :class:`~workbench.config.FusionPlan` behind ``fused`` and
            ``int8`` (default: engine "auto", every default step on). Steps
            it switches off stay off in the sessions too (ONNX Runtime's own
            transformers for them are disabled).
        exporter: "torchscript" or "dynamo".
        opset: the export's opset (None: the exporter's default).

    Raises:
        ConfigError: an unknown variant name.
        BenchmarkError: a variant that cannot be built for this model.
        RuntimeUnavailableError: int8 on CUDA.
    """
    from ..config import ExportConfig
    from ..export import export
    from ..models import ModelSource, resolve

    progress = progress or _noop
    names = [n.strip() for n in names if n.strip()]
    unknown = [n for n in names if n not in STANDARD]
    if unknown or not names:
        hint = (f" ({', '.join(n for n in unknown if n in EXTRA)}: use workbench.measure.recipes_extra.variants)"
                if any(n in EXTRA for n in unknown) else "")
        raise ConfigError(f"unknown variant(s) {', '.join(unknown) or '(none)'}; choose from "
                          f"{', '.join(STANDARD)}{hint}")
    if provider == "cuda" and ({"int8", "int8-guarded", "openvino", "openvino-f32"} & set(names)):
        raise RuntimeUnavailableError("int8 dynamic quantization runs on the CPU execution provider only; "
                                      "drop int8 or use --provider cpu")
    src = model if isinstance(model, ModelSource) else resolve(model)
    for t in ("torch", "torch-compile"):
        if src.kind == "onnx" and t in names:
            raise BenchmarkError(f"{src.name} is an ONNX file: {TORCH_SKIPPED}; drop {t} from --variants")
    progress("export", 0.05)
    exp = export(src, ExportConfig(exporter=exporter, attention=attention, opset=opset))
    heads, hidden = src.num_heads or 0, src.hidden_size or 0
    out: list[Variant] = []
    need_fused = any(n in names for n in ("fused", "int8"))
    fused = fuse_bert(exp.path, num_heads=heads, hidden_size=hidden, plan=plan) if need_fused else None
    from ..fusion.catalog import session_optimizers_off
    keep_off = session_optimizers_off(plan.disabled) if plan is not None else ()
    progress("fusions", 0.5)
    for n in names:
        if n == "torch":
            ts = {"model": str(src.path) if src.kind == "folder" else src.name, "attention": attention,
                  "seed": src.seed}
            out.append(Variant("torch", provider=provider, kind="torch", torch_source=ts))
        elif n == "unfused":
            out.append(Variant("unfused", exp.path, provider=provider, level="disable"))
        elif n == "fused":
            out.append(Variant("fused", fused, provider=provider, level="all", disabled_optimizers=keep_off))
        elif n == "int8":
            progress("int8 quantization", 0.7)
            out.append(Variant("int8", int8_of(fused), provider="cpu", level="all", disabled_optimizers=keep_off))
        elif n == "fp16":
            progress("fp16 conversion", 0.85)
            from ..families import ort_optimizes
            if src.model_type and not ort_optimizes(src.model_type):
                # ONNX Runtime's GPU optimizer has no rules for these families (and crashes on a bias-free
                # LayerNorm): the workbench's own fused graph is converted instead.
                gpu_fused = fuse_bert(exp.path, num_heads=heads, hidden_size=hidden, plan=plan)
            else:
                gpu_fused = fuse_bert(exp.path, num_heads=heads, hidden_size=hidden, use_gpu=True)
            out.append(Variant("fp16", fp16_of(gpu_fused), provider=provider, level="all"))
    progress("ready", 1.0)
    return out


__all__ = ["STANDARD", "EXTRA", "ALL", "default_variants", "standard_variants", "fuse_bert", "int8_of", "fp16_of"]
