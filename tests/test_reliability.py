"""Issue 6 end to end: bad inputs through fuse and bench, non-BERT models, and the process stays healthy.

Each bad input must give one clear line (CLI: exit 2, no traceback), change no user file, and
leave the process able to export, fuse and benchmark bert-tiny afterwards.
"""

import hashlib
import os
import subprocess
import sys

import badmodels as bm
import numpy as np
import onnx
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as h

from workbench.config import BenchConfig, ExportConfig, FusionPlan
from workbench.errors import WorkbenchError


def wb(*args):
    return subprocess.run([sys.executable, "-m", "workbench.cli", *map(str, args)], capture_output=True, text=True,
                          env=os.environ, timeout=600)


def _tree(folder):
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def small_cnn() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(np.zeros(4, np.float32), "b")
    nodes = [h.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             h.make_node("Relu", ["c"], ["r"], name="relu"),
             h.make_node("GlobalAveragePool", ["r"], ["y"], name="pool")]
    g = h.make_graph(nodes, "cnn", [h.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                     [h.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 1, 1])], [w, b])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.fixture(scope="module")
def zoo(tmp_path_factory, tiny_export):
    folder = tmp_path_factory.mktemp("zoo")
    files = bm.bad_files(folder / "files", tiny_export().path.read_bytes())
    ext = {loc: bm.external_model(folder / f"ext{i}", loc, write_data=False)
           for i, loc in enumerate(("../x.bin", "/etc/hostname", "missing.bin"))}
    graphs = {}
    for name, builder in (("cycle", bm.cycle_model), ("dup", bm.duplicate_output_model),
                          ("ghost", bm.undeclared_input_model), ("contrib", bm.unknown_contrib_model)):
        p = folder / "graphs" / f"{name}.onnx"
        p.parent.mkdir(exist_ok=True)
        p.write_bytes(builder().SerializeToString())
        graphs[name] = p
    return folder, {**files, **{f"ext:{k}": v for k, v in ext.items()}, **graphs}


@pytest.mark.parametrize("command", ["fuse", "bench"])
def test_every_bad_file_through_fuse_and_bench_cli(zoo, command):
    folder, files = zoo
    before = _tree(folder)
    for name, path in files.items():
        extra = ["--runs", "1"] if command == "bench" else []
        out = wb(command, path, *extra)
        lines = [l for l in out.stderr.splitlines() if l.strip() and not l.startswith(("usage:", " "))]
        assert out.returncode == 2, (name, out.stderr[-400:])
        assert len(lines) == 1 and lines[0].startswith("workbench: error:"), (name, out.stderr[-400:])
        assert "Traceback" not in out.stderr, name
    assert _tree(folder) == before


def test_every_bad_file_through_the_python_api(zoo):
    from workbench.fusion import Timeline
    from workbench.modelio import load_model

    folder, files = zoo
    before = _tree(folder)
    for name, path in files.items():
        with pytest.raises(WorkbenchError) as e:
            Timeline(path)
        assert "\n" not in str(e.value), name
        with pytest.raises(WorkbenchError):
            load_model(path)
    assert _tree(folder) == before


def test_non_bert_models_say_so_and_still_profile(tmp_path):
    from workbench.fusion import run_fusion
    from workbench.measure.harness.bench import benchmark
    from workbench.measure.harness.results import Variant

    for name, model in (("add", bm.add_model()), ("cnn", small_cnn())):
        p = tmp_path / f"{name}.onnx"
        p.write_bytes(model.SerializeToString())
        tl = run_fusion(p, FusionPlan(engine="ort"))
        notes = " ".join(s.diagnostic or "" for s in tl.snapshots)
        assert "no BERT encoder layer found" in notes, name
        assert tl.snapshots[-1].fused.get("Attention", 0) == 0
        out = wb("fuse", p, "--engine", "ort")
        assert out.returncode == 0 and "no BERT encoder layer found" in out.stdout + out.stderr


def test_the_process_still_works_after_the_bad_input_suite(zoo, tiny_export):
    """Run every bad input in this process, then do the real work in the same process."""
    from workbench.export import export
    from workbench.fusion import run_fusion
    from workbench.measure.harness.bench import benchmark
    from workbench.measure.harness.results import Variant
    from workbench.modelio import load_model

    _, files = zoo
    for path in files.values():
        with pytest.raises(WorkbenchError):
            load_model(path)
    r = export("bert-tiny", ExportConfig(exporter="dynamo"))
    assert r.parity["ok"]
    tl = run_fusion(r.path, FusionPlan(engine="auto"))
    assert tl.snapshots[-1].fused["Attention"] == 2
    res = benchmark([Variant("unfused", r.path, level="disable")], BenchConfig(runs=3, warmup=1, seq=16, threads=1))
    assert res["unfused"].runs == 3 and res["unfused"].p50_ms > 0
