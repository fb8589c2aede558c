"""Save a tune's recommendations ready to serve: DIR/model.onnx, the OpenVINO IR, config, tokenizer, README.md.

What the folder holds (decided here, said in the card):

* ``model.onnx``: the ONNX Runtime variant recommended for a workload (the throughput one when both
  workloads have an ONNX Runtime winner), exactly the file that session timed; when no workload's
  winner is an ONNX Runtime variant (PyTorch or OpenVINO won), the fastest ONNX Runtime variant
  whose answers hold, so plain ``onnxruntime`` always works. The card's lines open it under the same
  graph optimizations and the save checks that they reproduce the timed session (``saved_max_abs_diff``);
* ``openvino/openvino_model.xml`` / ``.bin`` when an OpenVINO variant won a workload: the IR it ran
  (the NNCF int8 IR, or the export converted without compressing its weights); the card's OpenVINO
  lines compile it with the settings that were timed, and the save checks they reproduce the timed
  outputs (``saved_max_abs_diff_openvino``);
* a sentence-transformers source folder's ``modules.json``, pooling and normalization folders and
  ``config_sentence_transformers.json``, so the folder stays a sentence-transformers model.

A folder that exists and is not empty is never written (one-line error); the folder is written in a
temporary sibling and renamed into place, so a failure leaves nothing half-written.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import onnx

from ...cache.atomic import atomic_write_text
from ...errors import ConfigError, WorkbenchError
from ...folder_checks import st_modules
from ...modelio import copy_model
from ...models import ModelSource, resolve
from ...ort.inputs import InputSpec, make_inputs
from ...ort.openvino_ep import add_openvino
from ...ort.session import create_session
from ...path_checks import check_output_path
from ..worker.peer_runners import OpenVinoRunner, ov_config
from ..worker.peers import import_openvino
from .card import CARD_TEXT, model_card
from .result import SessionSpec, TuneResult

#: What makes a model folder a sentence-transformers one, copied beside the model when present.
ST_FILES = ("modules.json", "config_sentence_transformers.json", "sentence_bert_config.json")


def check_target(out_dir) -> Path:
    """The folder to write, or one line before any work: a file, under ``/proc``, through a file, unwritable
    (:func:`~workbench.path_checks.check_output_path`), or a folder that exists and is not empty."""
    out = check_output_path(out_dir, folder=True)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"{out} exists and is not empty: choose a new folder (tune never overwrites)")
    return out


def saved_variants(result: TuneResult) -> dict:
    """``{"onnxruntime": variant, "openvino": variant or None}``: what the folder holds for each engine."""
    recs = result.recommended
    order = [recs[w].variant for w in ("throughput", "latency") if w in recs]
    ort = next((n for n in order if result.engine_kind(n) == "onnx"), None)
    if ort is None:
        ok = [r for r in result.variants if r.holds and r.p50_ms and result.engine_kind(r.name) == "onnx"]
        if not ok:
            raise ConfigError("no ONNX Runtime variant kept the answers: nothing deployable to save")
        ort = min(ok, key=lambda r: r.p50_ms).name
    ov = next((n for n in order if result.engine_kind(n) == "openvino"), None)
    return {"onnxruntime": ort, "openvino": ov}


def _write_ir(result: TuneResult, variant: str, dest: Path) -> None:
    """The OpenVINO IR the variant ran, as ``dest/openvino_model.xml`` + ``.bin``."""
    dest.mkdir()
    ir = result.sessions[variant].options.get("ir")
    if ir:
        shutil.copyfile(ir, dest / "openvino_model.xml")
        shutil.copyfile(Path(ir).with_suffix(".bin"), dest / "openvino_model.bin")
        return
    ov = import_openvino()
    model = ov.Core().read_model(result.paths[variant])
    ov.save_model(model, str(dest / "openvino_model.xml"), compress_to_fp16=False)  # the weights it ran, not halved


def _fusions(path: Path) -> str:
    """Contrib (fused or quantized) operators in the model, counted: "Attention 12, SkipLayerNormalization 24"."""
    counts: dict[str, int] = {}
    for n in onnx.load(str(path), load_external_data=False).graph.node:
        if n.domain == "com.microsoft" or n.op_type.startswith(("DynamicQuantize", "MatMulInteger", "QAttention",
                                                                  "QuantizeLinear", "DequantizeLinear")):
            counts[n.op_type] = counts.get(n.op_type, 0) + 1
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))


def _card_feeds(src, names: set) -> dict:
    """The card's own sentence through the model's tokenizer (seeded random ids without one)."""
    try:
        enc = src.tokenizer()([CARD_TEXT], return_tensors="np")
        return {k: np.asarray(v, dtype=np.int64) for k, v in enc.items() if k in names}
    except Exception:  # noqa: BLE001 - no tokenizer: the card says to feed ids

        spec = InputSpec(names=src.input_names, vocab_size=src.vocab_size, max_positions=src.max_positions)
        return {k: v for k, v in make_inputs(spec, 1, 8, seed=0).items() if k in names}


def reproduce(saved: Path, session: SessionSpec, threads: int, feeds_of) -> float:
    """Max abs diff between the card's plain onnxruntime session and the session the tune timed."""
    import onnxruntime as ort

    ep = (session.options or {}).get("ep")
    settings = ov_config(threads, session.options.get("precision"), shipped=True) if ep else None
    timed = create_session(saved, "cpu", level=session.level or "all", threads=threads,
                           disabled_optimizers=tuple(session.disabled_optimizers), ep=ep, ep_settings=settings)
    kw = {"disabled_optimizers": list(session.disabled_optimizers)} if session.disabled_optimizers else {}
    if ep:  # the card's lines: OpenVINO's execution provider in front of the CPU one, as the tune timed it
        so = ort.SessionOptions()
        add_openvino(so, settings)
        plain = ort.InferenceSession(str(saved), so, **kw)
    else:
        plain = ort.InferenceSession(str(saved), providers=["CPUExecutionProvider"], **kw)
    feeds = feeds_of({i.name for i in plain.get_inputs()})
    a, b = timed.run(None, feeds)[0], plain.run(None, feeds)[0]
    return float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max())


def reproduce_openvino(result: TuneResult, variant: str, xml: Path, feeds_of) -> float:
    """Max abs diff between the card's OpenVINO lines (the saved IR) and the runner the tune timed."""
    s = result.sessions[variant]
    timed = OpenVinoRunner({"name": variant, "provider": "cpu", "model": result.paths[variant],
                            "options": s.options}, result.threads, xml.parent)
    feeds = feeds_of(set(timed.input_names))
    timed.prepare(feeds)
    a = timed.output()
    ov = import_openvino()
    card = ov.Core().compile_model(str(xml), "CPU", ov_config(result.threads, s.options.get("precision"),
                                                              shipped=True))
    b = card({k: feeds[k] for k in (i.get_any_name() for i in card.inputs)})[0]
    timed.close()
    return float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max())


def _write_model_files(src, tmp: Path) -> bool:
    """config.json, the tokenizer files and a sentence-transformers folder's modules; whether a tokenizer was saved."""
    folder = Path(src.path) if src.kind == "folder" and src.path else None
    if folder is not None and (folder / "config.json").is_file():
        shutil.copyfile(folder / "config.json", tmp / "config.json")
    elif src.config_dict:
        (tmp / "config.json").write_text(json.dumps(src.config_dict, indent=1, default=str))
    if folder is not None and (folder / "modules.json").is_file():
        for name in ST_FILES:
            if (folder / name).is_file():
                shutil.copyfile(folder / name, tmp / name)
        for m in st_modules(folder):
            sub = folder / m.get("path", "")
            if m.get("path") and sub.is_dir() and sub.resolve().parent == folder.resolve():
                shutil.copytree(sub, tmp / m["path"])
    try:
        src.tokenizer().save_pretrained(str(tmp))
        return True
    except (WorkbenchError, OSError, ValueError):
        return False


def save(result: TuneResult, out_dir, source) -> dict:
    """Write the folder; returns ``{"dir", "variant", "engine", "openvino", "files", "saved_max_abs_diff",
    "saved_max_abs_diff_openvino"}`` (``variant``/``engine``: the recommendation the folder is for first).

    ``source``: the model the tune ran (name, folder or ModelSource), for its config, tokenizer and modules.
    """
    out = check_target(out_dir)
    held = saved_variants(result)
    src = source if isinstance(source, ModelSource) else resolve(source)
    first = result.recommended[result.workloads[-1]].variant
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.tmp-"))
    try:
        ort_model = Path(result.paths[held["onnxruntime"]])
        copy_model(ort_model, tmp / "model.onnx")
        has_tok = _write_model_files(src, tmp)
        feeds_of = lambda names: _card_feeds(src, names)  # noqa: E731
        info = {"dir": str(out), "variant": first, "engine": "openvino" if first == held["openvino"] else
                "onnxruntime", "onnxruntime": held["onnxruntime"], "openvino": held["openvino"],
                "tokenizer": has_tok, "fusions": _fusions(ort_model), "sentence_transformers":
                (tmp / "modules.json").is_file(), "saved_max_abs_diff_openvino": None,
                "saved_max_abs_diff": reproduce(tmp / "model.onnx", result.sessions[held["onnxruntime"]],
                                                result.threads, feeds_of)}
        if held["openvino"]:
            _write_ir(result, held["openvino"], tmp / "openvino")
            info["saved_max_abs_diff_openvino"] = reproduce_openvino(result, held["openvino"],
                                                                     tmp / "openvino" / "openvino_model.xml", feeds_of)
        atomic_write_text(tmp / "README.md", model_card(result, info, str(out)))
        info["files"] = sorted(p.name for p in tmp.iterdir())
        check_target(out)  # still free: another process may have written it meanwhile
        if out.exists():
            out.rmdir()
        os.rename(tmp, out)
        return info
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


__all__ = ["save", "check_target", "saved_variants", "reproduce", "reproduce_openvino"]
