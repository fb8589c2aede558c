"""OpenVINO int8 through NNCF, as sentence-transformers ships it, and its answer-guarded form.

* ``openvino-int8``: NNCF static int8 (``nncf.quantize``, ``model_type=TRANSFORMER``, the rest at
  OpenVINO's default precision) on the unfused export, calibrated on the **search part** of the text
  (one sentence per sample, at its own length). This is the recipe behind sentence-transformers'
  ``export_static_quantized_openvino_model`` (optimum-intel's ``OVQuantizationConfig``, whose default
  model type is the transformer one), calibrated on the user's sentences instead of GLUE SST-2.
* ``openvino-int8-guarded``: NNCF's own ``quantize_with_accuracy_control``, given a validation
  function written from the text's answers (:func:`answers_metric` of the candidate's outputs
  against OpenVINO f32 on the search part; a changed nearest neighbour costs more than the 0.01 the
  drop may be), so NNCF keeps out of int8 the operations whose quantization breaks the answers.
  NNCF validates its candidates with everything not quantized in f32, so the guarded model is served
  that way too (precision hint f32): its answers are the ones NNCF checked. The check part is never
  seen here.

Both are written as OpenVINO IR (``openvino_model.xml`` / ``.bin``) in the variants cache, keyed by the
export, the sentences, the recipe and the versions of NNCF and OpenVINO.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

OV_VERSION = 1
#: The most the guarded model's answers metric may drop below the unquantized model's (absolute).
MAX_DROP = 0.01
#: Revert steps NNCF may take (each one validates a candidate): a bound on the search's time; a model that
#: still falls short after them is reported as not holding, never as guarded.
MAX_ITERATIONS = 8


def answers_metric(tp: dict) -> float:
    """One number for NNCF, higher is better: Spearman (or agreement), less 0.011 when a top-1 answer changed,
    so a model whose answers do not hold is always more than :data:`MAX_DROP` below a perfect 1.0."""
    if not tp or tp.get("too_small"):
        return 0.0
    main = tp.get("spearman")
    if main is None:
        main = tp.get("top1_agreement") if tp.get("kind") == "masked_lm" else tp.get("label_agreement")
    top1 = tp.get("top1_agreement", tp.get("label_agreement"))
    return float(main or 0.0) - (0.011 if top1 is not None and top1 < 1.0 else 0.0)


def _key(text, recipe: str) -> str:
    import nncf

    from ..ort.machine import _version

    doc = [list(text.sentences), text.kind, recipe, OV_VERSION, nncf.__version__, _version("openvino"), MAX_DROP,
           MAX_ITERATIONS]
    return hashlib.sha256(json.dumps(doc).encode()).hexdigest()[:16]


def _items(text) -> list[dict]:
    return [{k: v for k, v in b.items()} for b in text.batches]


def _quiet():
    """NNCF's progress bars and info lines off (the workbench reports its own stages)."""
    log = logging.getLogger("nncf")
    old = log.level
    log.setLevel(logging.ERROR)
    return log, old


def openvino_int8_of(export_path: Path, search_text) -> Path:
    """The NNCF static int8 IR of the export, calibrated on ``search_text``'s sentences, cached."""
    from .peers import import_openvino
    from .recipes import _cached

    def build(out: Path) -> None:
        import nncf

        ov = import_openvino()
        log, old = _quiet()
        try:
            model = ov.Core().read_model(str(export_path))
            data = _items(search_text)
            q = nncf.quantize(model, nncf.Dataset(data), model_type=nncf.ModelType.TRANSFORMER,
                              subset_size=len(data))
        finally:
            log.setLevel(old)
        ov.save_model(q, str(out.parent / "openvino_model.xml"))
        (out.parent / "recipe.json").write_text(json.dumps({"recipe": "nncf.quantize", "model_type": "TRANSFORMER",
                                                            "calibration_sentences": len(data)}))

    return _cached(Path(export_path), f"openvino-int8-{_key(search_text, 'static')}", build,
                   name="openvino_model.xml")


def _validation(core, model, search_text, threads: int):
    """The validation function NNCF calls: the answers of a compiled candidate against OpenVINO f32."""
    from ..ort.task_parity import task_parity
    from .peer_runners import ov_config

    ref = core.compile_model(model, "CPU", ov_config(threads, "f32"))
    items = _items(search_text)
    reference = {it["input_ids"].tobytes(): ref(it)[0] for it in items}

    def validate(compiled, data) -> float:
        data = list(data)
        outs = [compiled(it)[0] for it in data]
        refs = [reference[it["input_ids"].tobytes()] for it in data]
        return answers_metric(task_parity(search_text.kind, refs, outs, data,
                                          mask_token_id=search_text.mask_token_id))

    return items, validate


def openvino_int8_guarded_of(export_path: Path, search_text, *, threads: int = 2) -> Path:
    """NNCF's accuracy-controlled int8 IR of the export, guarded on ``search_text``'s answers, cached.

    ``report.json`` beside it says what NNCF kept out of int8 and the answers metric it reached.
    """
    from .peers import import_openvino
    from .recipes import _cached

    def build(out: Path) -> None:
        import nncf

        from .peer_runners import ov_config

        import time

        t0 = time.perf_counter()
        ov = import_openvino()
        core = ov.Core()
        model = core.read_model(str(export_path))
        items, validate = _validation(core, model, search_text, threads)
        log, old = _quiet()
        from nncf.quantization.advanced_parameters import AdvancedAccuracyRestorerParameters

        try:
            q = nncf.quantize_with_accuracy_control(
                model, nncf.Dataset(items), nncf.Dataset(items), validate, max_drop=MAX_DROP,
                drop_type=nncf.DropType.ABSOLUTE, model_type=nncf.ModelType.TRANSFORMER, subset_size=len(items),
                advanced_accuracy_restorer_parameters=AdvancedAccuracyRestorerParameters(
                    max_num_iterations=MAX_ITERATIONS))
        finally:
            log.setLevel(old)
        ov.save_model(q, str(out.parent / "openvino_model.xml"))
        fq = sum(1 for op in q.get_ops() if op.get_type_name() == "FakeQuantize")
        reached = validate(core.compile_model(q, "CPU", ov_config(threads, "f32")), items)
        (out.parent / "report.json").write_text(json.dumps({
            "recipe": "nncf.quantize_with_accuracy_control", "max_drop": MAX_DROP, "drop_type": "absolute",
            "max_iterations": MAX_ITERATIONS, "seconds": round(time.perf_counter() - t0, 1),
            "metric": "Spearman of the search part's similarities, less 0.011 when a nearest neighbour changed",
            "fake_quantize_nodes": fq, "metric_reached": reached, "search_sentences": len(items)}))

    return _cached(Path(export_path), f"openvino-int8-guarded-{_key(search_text, 'accuracy-control')}", build,
                   name="openvino_model.xml")


def ir_report(xml: Path) -> dict | None:
    """What the guarded recipe recorded beside its IR, or None."""
    try:
        return json.loads((Path(xml).parent / "report.json").read_text())
    except (OSError, ValueError):
        return None


__all__ = ["openvino_int8_of", "openvino_int8_guarded_of", "answers_metric", "ir_report", "MAX_DROP"]
