"""Building the ONNX Runtime models the variants time, each cached beside the export.

``fuse_bert`` (the export after the fusion timeline, or ONNX Runtime's GPU optimizer), ``int8_of`` (dynamic
int8, per-channel weight scales), ``fp16_of`` (float16 with fp32 inputs/outputs), and :func:`cached`, which
every derived model goes through: built once in a temporary folder of the export's group of the model store
(:mod:`workbench.model_store`), keyed by the export's content, the recipe and the onnxruntime version, and
published with its meta written last. What a variant is (its name, label, engine, needs) is its recipe
(:mod:`workbench.measure.variants`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from pathlib import Path
from typing import Callable

from ...cache import model_store
from ...cache.identity import file_identity
from ...config import FusionPlan
from ...errors import BenchmarkError, WorkbenchError
from ...fusion.registry import plan_key
from ...fusion.timeline import run_fusion
from ...modelio import save_model
from ...ort.machine import package_version
from ..worker.precision import quantize_int8, to_fp16

RECIPE_VERSION = 2


def _derived_key(export_path: Path, recipe: str) -> str:
    key = json.dumps([file_identity(Path(export_path)), recipe, RECIPE_VERSION,
                      package_version("onnxruntime-gpu") or package_version("onnxruntime")])
    return hashlib.sha256(key.encode()).hexdigest()[:24]


def cached(export_path: Path, recipe: str, build: Callable[[Path], None], name: str = "model.onnx") -> Path:
    """Build the variant ``recipe`` of ``export_path`` once, in the export's group of the cache (its weights
    shared with the export's: :mod:`workbench.cache.model_store`); later calls are a lookup. ``build(out)`` writes
    an ONNX file at ``out`` in a temporary folder; other files it writes there are kept as side files
    (``model_store.sidecar``). ``name``: the file a lookup returns; a build that is no ONNX model (an OpenVINO
    IR's ``openvino_model.xml``) is kept whole in a folder of its own."""
    key, group = _derived_key(export_path, recipe), model_store.group_of_model(Path(export_path))
    hit = model_store.find("variants", key, group, name)  # leased: `workbench cache` leaves it alone
    if hit is not None:
        return hit[0]
    tmp = model_store.staging(group)
    try:
        build(tmp / "model.onnx")
        # What it was built from, for `workbench cache` (which model, which recipe).
        return model_store.publish(tmp / name, kind="variants", key=key, group=group,
                                  meta={"export": str(export_path), "recipe": recipe})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def fuse_bert(export_path: Path, *, num_heads: int | None = 0, hidden_size: int | None = 0,
              num_layers: int | None = None, use_gpu: bool = False, plan=None) -> Path:
    """The export after the fusion timeline's last step (the BERT fusions), cached.

    CPU: the same :class:`~workbench.fusion.timeline.Timeline` the notebook
    and ``workbench fuse`` show, with ``plan`` (default: engine "auto", every
    default step on), so what is timed is what was shown, on either exporter
    and attention. GPU (``use_gpu``): ONNX Runtime's optimizer with its GPU
    options. Python fusions only, so the session's own level decides the
    rest and the file runs on any provider.
    """
    plan = plan or FusionPlan()

    def build_gpu(out: Path) -> None:
        from onnxruntime.transformers.optimizer import optimize_model

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
        try:
            tl = run_fusion(Path(export_path), plan, num_heads=num_heads or None, hidden_size=hidden_size or None,
                            num_layers=num_layers or None)
        except WorkbenchError:
            raise
        except Exception as e:
            raise BenchmarkError(f"the BERT fusions failed on {Path(export_path).name}: "
                                 f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from e
        save_model(tl.final.model, out)

    if use_gpu:
        return cached(Path(export_path), f"fused-h{num_heads}-d{hidden_size}-gpu1", build_gpu)

    key = f"timeline-{plan_key(plan)}"
    return cached(Path(export_path), f"fused-h{num_heads}-d{hidden_size}-{key}", build)


def int8_of(fused_path: Path) -> Path:
    """Dynamic int8 quantization of a (fused) model with per-channel weight scales, cached.

    Per channel, because on real weights per-tensor scales change the answers (all-MiniLM-L6-v2:
    similarity-ranking Spearman 0.946 per tensor, 0.986 per channel) while the speed is the same
    (bert-base on an AVX2 EPYC: 113.9 against 113.2 ms).
    """
    return cached(Path(fused_path), "int8-per-channel",
                   lambda out: quantize_int8(fused_path, out, per_channel=True))


def fp16_of(fused_path: Path) -> Path:
    """float16 conversion keeping fp32 inputs/outputs, cached."""
    return cached(Path(fused_path), "fp16", lambda out: to_fp16(fused_path, out))


__all__ = ["cached", "fuse_bert", "int8_of", "fp16_of", "RECIPE_VERSION"]
