"""Builders for broken and odd ONNX files, written by the tests that use them."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper as h, numpy_helper


def add_model(ir: int = 8, opset: int = 17) -> onnx.ModelProto:
    """A valid, tiny, non-BERT model: y = x + 1."""
    one = numpy_helper.from_array(np.ones((4,), np.float32), "one")
    g = h.make_graph([h.make_node("Add", ["x", "one"], ["y"], name="add")], "add",
                     [h.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                     [h.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], [one])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = ir
    return m


def external_model(folder: Path, location: str = "weights.bin", *, write_data: bool = True,
                   offset: int = 0, length: int | None = None) -> Path:
    """A MatMul model whose weight lives in an external file named by ``location``."""
    w = np.arange(64, dtype=np.float32).reshape(8, 8)
    t = numpy_helper.from_array(w, "w")
    raw = t.raw_data
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", str(offset)), ("length", str(len(raw) if length is None else length))):
        e = t.external_data.add()
        e.key, e.value = k, v
    g = h.make_graph([h.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "ext",
                     [h.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                     [h.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])], [t])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    folder.mkdir(parents=True, exist_ok=True)
    if write_data and not os.path.isabs(location) and ".." not in location:
        (folder / location).write_bytes(b"\0" * offset + raw)
    path = folder / "model.onnx"
    path.write_bytes(m.SerializeToString())
    return path


def cycle_model() -> onnx.ModelProto:
    g = h.make_graph([h.make_node("Relu", ["b"], ["a"], name="r1"), h.make_node("Relu", ["a"], ["b"], name="r2")],
                     "cycle", [h.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                     [h.make_tensor_value_info("b", TensorProto.FLOAT, [1])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def duplicate_output_model() -> onnx.ModelProto:
    g = h.make_graph([h.make_node("Relu", ["x"], ["y"], name="r1"), h.make_node("Neg", ["x"], ["y"], name="r2")],
                     "dup", [h.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                     [h.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def undeclared_input_model() -> onnx.ModelProto:
    g = h.make_graph([h.make_node("Add", ["x", "ghost"], ["y"], name="add")], "ghost",
                     [h.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                     [h.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def unknown_contrib_model() -> onnx.ModelProto:
    g = h.make_graph([h.make_node("FancyFusedThing", ["x"], ["y"], name="f", domain="com.microsoft")], "contrib",
                     [h.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                     [h.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    return m


PNG = (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x02\x00\x00\x00\x90wS\xde"
       b"\x00\x00\x00\x0cIDATx\x9cc\xf8\x0f\x00\x00\x01\x01\x00\x05\x18\xd8N\x00\x00\x00\x00IEND\xaeB`\x82")


def bad_files(folder: Path, valid: bytes) -> dict[str, Path]:
    """Write the bad-file zoo of issue 6 (item 1) into ``folder``; name → path."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {
        "empty": b"",
        "truncated": valid[: len(valid) // 2],
        "random": np.random.default_rng(0).bytes(4096),
        "image": PNG,
        "text": b"This is a README, not a model.\nIt has two lines.\n",
    }
    out = {}
    for name, data in files.items():
        p = folder / f"{name}.onnx"
        p.write_bytes(data)
        out[name] = p
    (folder / "adir.onnx").mkdir(exist_ok=True)
    out["directory"] = folder / "adir.onnx"
    out["missing"] = folder / "missing.onnx"
    return out


def refusal_problems(r: dict, message: str | None = None, temp_marks: tuple[str, ...] = ()) -> list[str]:
    """What is wrong with one refused case's result (``{"rc", "stderr"}``) as a user sees it: not exit 2, more
    than three lines, a traceback, the expected words missing, or a temporary path of the tool named."""
    lines = [ln for ln in r["stderr"].splitlines() if ln.strip()]
    why = []
    if r["rc"] != 2:
        why.append(f"exit {r['rc']}")
    if len(lines) > 3:
        why.append(f"{len(lines)} lines on stderr")
    if "Traceback" in r["stderr"]:
        why.append("traceback")
    if message is not None and message not in r["stderr"]:
        why.append(f"does not say {message!r}")
    if any(m in r["stderr"] for m in temp_marks):
        why.append("names a temporary path of the tool")
    return why
