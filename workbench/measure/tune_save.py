"""Save a tune's recommendation ready to deploy: DIR/model.onnx, config.json, tokenizer files, README.md.

Which file is saved (decided here, said in the card):

* an ONNX Runtime variant won: exactly the file that session timed; the card's lines open it with
  plain ``onnxruntime`` under the same graph optimizations (ONNX Runtime's default level, plus the
  session transformers the plan keeps off), and the save checks that they reproduce the timed
  session's outputs (``saved_max_abs_diff``, 0 when they do);
* an OpenVINO variant won: the ONNX file OpenVINO ran (the export); its speed needs OpenVINO, so the
  card shows OpenVINO's lines first, and ONNX Runtime's lines for the same file (slower);
* a PyTorch variant won: the fastest ONNX Runtime variant whose answers hold, and the card says that
  PyTorch was faster on this machine.

A folder that exists and is not empty is never written (one-line error); the folder is written in
a temporary sibling and renamed into place, so a failure leaves nothing half-written.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from ..errors import ConfigError

CARD_TEXT = "The cat sat on the mat."


def check_target(out_dir) -> Path:
    """The folder to write, or a one-line ConfigError when it exists and is not empty (or is a file)."""
    out = Path(out_dir).expanduser()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"{out} exists and is not empty: choose a new folder (tune never overwrites)")
    return out


def saved_variant(result: dict) -> tuple[str, str]:
    """``(variant, engine)``: what the folder holds and which engine gives its timed speed."""
    rec = result["recommended"]["variant"]
    kind = result["sessions"].get(rec, {}).get("kind")
    if kind == "openvino":
        return rec, "openvino"
    if kind == "torch":
        ort_ok = [r for r in result["variants"] if r["holds"] and r["p50_ms"]
                  and result["sessions"].get(r["name"], {}).get("kind") == "onnx"]
        if not ort_ok:
            raise ConfigError("no ONNX Runtime variant kept the answers: nothing deployable to save")
        return min(ort_ok, key=lambda r: r["p50_ms"])["name"], "onnxruntime"
    return rec, "onnxruntime"


def _copy_model(src: Path, dest: Path) -> None:
    import onnx

    from ..modelio import load_model, save_model

    proto = onnx.load(str(src), load_external_data=False)
    external = any(i.data_location == onnx.TensorProto.EXTERNAL for i in proto.graph.initializer)
    if external or src.stat().st_size > 2_000_000_000:
        save_model(load_model(src, check=False), dest, external_data=True)
    else:
        shutil.copyfile(src, dest)


def _fusions(path: Path) -> str:
    """Contrib (fused or quantized) operators in the model, counted: "Attention 12, SkipLayerNormalization 24"."""
    import onnx

    counts: dict[str, int] = {}
    for n in onnx.load(str(path), load_external_data=False).graph.node:
        if n.domain == "com.microsoft" or n.op_type.startswith(("DynamicQuantize", "MatMulInteger", "QAttention")):
            counts[n.op_type] = counts.get(n.op_type, 0) + 1
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))


def _feeds(text, names: set) -> dict:
    return {k: v for k, v in text.batches[0].items() if k in names}


def reproduce(saved: Path, session: dict, threads: int, text) -> float:
    """Max abs diff between the card's plain onnxruntime session and the session the tune timed."""
    import numpy as np
    import onnxruntime as ort

    from ..ort.session import create_session

    timed = create_session(saved, "cpu", level=session.get("level", "all"), threads=threads,
                           disabled_optimizers=tuple(session.get("disabled_optimizers") or ()))
    kw = {"disabled_optimizers": list(session["disabled_optimizers"])} if session.get("disabled_optimizers") else {}
    plain = ort.InferenceSession(str(saved), providers=["CPUExecutionProvider"], **kw)
    names = {i.name for i in plain.get_inputs()}
    a = timed.run(None, _feeds(text, names))[0]
    b = plain.run(None, _feeds(text, names))[0]
    return float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max())


def _write_model_files(src, tmp: Path) -> bool:
    """config.json and the tokenizer files; returns whether a tokenizer was saved."""
    from ..errors import WorkbenchError

    cfg = (Path(src.path) / "config.json") if src.kind == "folder" and src.path else None
    if cfg is not None and cfg.is_file():
        shutil.copyfile(cfg, tmp / "config.json")
    elif src.config_dict:
        (tmp / "config.json").write_text(json.dumps(src.config_dict, indent=1, default=str))
    try:
        src.tokenizer().save_pretrained(str(tmp))
        return True
    except (WorkbenchError, OSError, ValueError):
        return False


def save(result: dict, out_dir, source, *, text=None) -> dict:
    """Write the folder; returns ``{"dir", "variant", "engine", "files", "saved_max_abs_diff"}``.

    ``source``: the model the tune ran (name, folder or ModelSource), for its config and tokenizer.
    """
    from ..models import ModelSource, resolve
    from ..paths import atomic_write_text
    from .recipes_extra import guard_text
    from .tune_card import model_card

    out = check_target(out_dir)
    variant, engine = saved_variant(result)
    src_model = Path(result["paths"][variant])
    src = source if isinstance(source, ModelSource) else resolve(source)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.tmp-"))
    try:
        _copy_model(src_model, tmp / "model.onnx")
        has_tok = _write_model_files(src, tmp)
        session = result["sessions"].get(variant, {})
        diff = None
        if engine == "onnxruntime":
            diff = reproduce(tmp / "model.onnx", session, result["threads"], text or guard_text(src))
        info = {"dir": str(out), "variant": variant, "engine": engine, "saved_max_abs_diff": diff,
                "tokenizer": has_tok, "fusions": _fusions(src_model)}
        atomic_write_text(tmp / "README.md", model_card(result, info, str(out)))
        info["files"] = sorted(p.name for p in tmp.iterdir())
        check_target(out)  # still free: another process may have written it meanwhile
        if out.exists():
            out.rmdir()
        os.rename(tmp, out)
        return info
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


__all__ = ["save", "check_target", "saved_variant", "reproduce", "CARD_TEXT"]
