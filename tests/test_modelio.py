"""The one load/save path: clear one-line errors, external data kept inside the folder, atomic writes."""

import hashlib
import os
import subprocess
import sys

import numpy as np
import onnx
import pytest

from workbench import modelio
from workbench.errors import ModelIOError
from workbench.modelio import load_model, save_model

import badmodels as bm


def _digest(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def test_loads_a_real_export(tiny_export):
    m = load_model(tiny_export().path)
    assert len(m.graph.node) == tiny_export().nodes


@pytest.mark.parametrize("case,message", [
    ("empty", "is empty"), ("truncated", "not a valid ONNX"), ("random", "not"),
    ("image", "PNG image"), ("text", "text file"), ("directory", "is a directory"), ("missing", "no such file")])
def test_bad_files_get_one_clear_line_and_stay_untouched(tmp_path, tiny_export, case, message):
    files = bm.bad_files(tmp_path / "zoo", tiny_export().path.read_bytes())
    before = _digest(tmp_path / "zoo")
    with pytest.raises(ModelIOError, match=message) as e:
        load_model(files[case])
    assert "\n" not in str(e.value)
    assert _digest(tmp_path / "zoo") == before


@pytest.mark.parametrize("location,message", [
    ("../outside.bin", "outside the model's folder"),
    ("/etc/passwd", "absolute path"),
    ("missing.bin", "missing"),
])
def test_external_data_locations_are_confined(tmp_path, location, message):
    path = bm.external_model(tmp_path / "m", location, write_data=location == "never")
    with pytest.raises(ModelIOError, match=message):
        load_model(path)


def test_external_data_symlinks_that_leave_the_folder_are_refused(tmp_path):
    outside = tmp_path / "secret"
    outside.mkdir()
    bm.external_model(outside, "weights.bin")  # real data, outside
    model = bm.external_model(tmp_path / "m", "weights.bin", write_data=False)
    os.symlink(outside / "weights.bin", tmp_path / "m" / "weights.bin")
    with pytest.raises(ModelIOError, match="link that leaves"):
        load_model(model)
    model2 = bm.external_model(tmp_path / "m2", "sub/weights.bin", write_data=False)
    os.symlink(outside, tmp_path / "m2" / "sub")  # a directory link
    with pytest.raises(ModelIOError, match="link that leaves"):
        load_model(model2)


def test_external_data_offset_past_end_is_refused(tmp_path):
    path = bm.external_model(tmp_path / "m", "weights.bin", length=10_000)
    with pytest.raises(ModelIOError, match="only 256 bytes"):
        load_model(path)


def test_external_data_inside_the_folder_loads(tmp_path):
    path = bm.external_model(tmp_path / "m", "weights.bin")
    m = load_model(path)
    w = onnx.numpy_helper.to_array(m.graph.initializer[0])
    assert w[1, 0] == 8.0


def test_newer_ir_or_opset_than_onnxruntime_names_both_versions(tmp_path):
    lim = modelio.runtime_limits()
    p = tmp_path / "ir.onnx"
    p.write_bytes(bm.add_model(ir=lim["max_ir"] + 1).SerializeToString())
    with pytest.raises(ModelIOError, match=f"IR version {lim['max_ir'] + 1}.*at most IR version {lim['max_ir']}"):
        load_model(p)
    p2 = tmp_path / "opset.onnx"
    p2.write_bytes(bm.add_model(opset=lim["max_opset"] + 1).SerializeToString())
    with pytest.raises(ModelIOError, match=f"opset {lim['max_opset'] + 1}.*at most opset {lim['max_opset']}"):
        load_model(p2)


@pytest.mark.parametrize("builder,message", [
    (bm.unknown_contrib_model, "com.microsoft:FancyFusedThing"),
    (bm.cycle_model, "not a valid ONNX graph"),
    (bm.duplicate_output_model, "not a valid ONNX graph"),
    (bm.undeclared_input_model, "not a valid ONNX graph"),
])
def test_invalid_graphs_are_refused(tmp_path, builder, message):
    p = tmp_path / "bad.onnx"
    p.write_bytes(builder().SerializeToString())
    with pytest.raises(ModelIOError, match=message) as e:
        load_model(p)
    assert "\n" not in str(e.value)


def test_no_read_permission(tmp_path):
    import tempfile

    tmp_path = __import__("pathlib").Path(tempfile.mkdtemp(prefix="wb-perm-"))
    tmp_path.chmod(0o755)
    p = tmp_path / "locked.onnx"
    p.write_bytes(bm.add_model().SerializeToString())
    p.chmod(0)
    if os.geteuid() != 0:
        with pytest.raises(ModelIOError, match="permission denied"):
            load_model(p)
        return
    # root reads everything: check as an unprivileged user in a child process.
    code = ("from workbench.modelio import load_model\nfrom workbench.errors import ModelIOError\n"
            f"try:\n    load_model({str(p)!r})\nexcept ModelIOError as e:\n    print(e)\n")
    out = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c", code],
                         capture_output=True, text=True, env={**os.environ, "WORKBENCH_CACHE": str(tmp_path / "c")})
    assert "permission denied" in out.stdout, out.stderr[-500:]


# ---------------------------------------------------------------- saving
def test_save_is_atomic_and_never_overwrites(tmp_path):
    m = bm.add_model()
    dest = save_model(m, tmp_path / "out.onnx")
    assert load_model(dest).graph.node[0].op_type == "Add"
    with pytest.raises(ModelIOError, match="already exists"):
        save_model(m, dest)
    assert [p.name for p in tmp_path.iterdir()] == ["out.onnx"]


def test_save_refuses_the_input_file_even_with_overwrite(tmp_path):
    src = tmp_path / "in.onnx"
    src.write_bytes(bm.add_model().SerializeToString())
    before = src.read_bytes()
    with pytest.raises(ModelIOError, match="input model"):
        save_model(bm.add_model(opset=18), src, protect=[src], overwrite=True)
    assert src.read_bytes() == before


def test_interrupted_save_leaves_no_partial_file(tmp_path, monkeypatch):
    src = tmp_path / "in.onnx"
    src.write_bytes(bm.add_model().SerializeToString())
    before = src.read_bytes()

    def crash(fd):
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(modelio.os, "fsync", crash)
    with pytest.raises(ModelIOError, match="disk full"):
        save_model(load_model(src), tmp_path / "out.onnx", protect=[src])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.onnx"]
    assert src.read_bytes() == before


def test_external_data_save_round_trips_and_keeps_the_caller_model(tmp_path):
    m = bm.add_model()
    big = onnx.numpy_helper.from_array(np.arange(4096, dtype=np.float32), "big")
    m.graph.initializer.append(big)
    dest = save_model(m, tmp_path / "ext.onnx", external_data=True)
    assert (tmp_path / "ext.onnx.data").stat().st_size == 4096 * 4
    assert m.graph.initializer[1].raw_data, "the caller's model must keep its weights"
    loaded = load_model(dest)
    assert np.array_equal(onnx.numpy_helper.to_array(loaded.graph.initializer[1]), np.arange(4096, dtype=np.float32))
