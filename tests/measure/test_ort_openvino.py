"""ONNX Runtime's OpenVINO execution provider as recipes (``ort-openvino*``): skipped with one line where the
plugin offers no device (real on an AMD CPU: it serves Intel devices only) or is not installed (the package
hidden from a real subprocess), the others timed, exit 0; ``bench --json`` says which provider ran each node.
Where the plugin does offer this CPU (an Intel one), the same tests time it and check its answers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from workbench.ort.openvino_ep import PACKAGE, WHEELS, status

FAST = ("--seq", "16", "--runs", "3", "--warmup", "1", "--threads", "1")
ROOT = Path(__file__).resolve().parents[2]


def _cli(*args, env=None, timeout=600):
    return subprocess.run([sys.executable, "-c", "import sys; from workbench.cli import main; sys.exit(main())", *args],
                          capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})


def _skip_lines(p, name):
    return [ln for ln in p.stderr.splitlines() if ln.startswith(f"{name} skipped:")]


def test_bench_times_the_others_and_says_in_one_line_why_the_openvino_provider_is_left_out():
    p = _cli("bench", "bert-tiny", *FAST, "--variants", "unfused,fused,ort-openvino", "--json")
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads(p.stdout)
    by = {v["name"]: v for v in doc["variants"]}
    # Which provider ran each node, per variant: every node on the CPU provider, counts matching the graph.
    assert by["unfused"]["assignment"]["counts"] == {"CPU": by["unfused"]["assignment"]["nodes"]}
    assert by["fused"]["assignment"]["level"] == "all" and by["fused"]["assignment"]["fallbacks"] == []
    ok, why = status()
    if ok:  # an Intel CPU: timed, most nodes on OpenVINO, answers against the unfused export
        ov = by["ort-openvino"]
        assert ov["session_providers"][0] == "OpenVINOExecutionProvider" and ov["parity"]["cosine"] > 0.999
        assert max(ov["assignment"]["counts"], key=ov["assignment"]["counts"].get) == "OpenVINO"
        return
    assert list(by) == ["unfused", "fused"]
    assert doc["skipped"] == [{"name": "ort-openvino", "why": why}]
    assert _skip_lines(p, "ort-openvino") == [f"ort-openvino skipped: {why}"]
    assert PACKAGE in why and ("Intel" in why or "not installed" in why)


def test_without_the_plugin_the_line_names_the_package_to_install(tmp_path):
    """The package hidden from a real run (a module of its name that fails to import, first on the path)."""
    (tmp_path / "onnxruntime_ep_openvino.py").write_text("raise ImportError('hidden by the test')\n")
    path = os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    p = _cli("bench", "bert-tiny", *FAST, "--variants", "unfused,ort-openvino-f32", env={"PYTHONPATH": path})
    assert p.returncode == 0, p.stderr[-3000:]
    assert _skip_lines(p, "ort-openvino-f32") == [
        f"ort-openvino-f32 skipped: {PACKAGE} (ONNX Runtime's OpenVINO execution provider) is not installed; add it "
        f"with pip install {PACKAGE} (it is in the workbench's peers extra)"]
    assert "unfused" in p.stdout and "Traceback" not in p.stderr
    # Asked for alone, there is nothing to time: the same reason as the one error line, exit 2.
    alone = _cli("bench", "bert-tiny", *FAST, "--variants", "ort-openvino-fused",
                 env={"PYTHONPATH": path, "WORKBENCH_DISABLE_OPENVINO_EP": "1"})
    errors = [ln for ln in alone.stderr.splitlines() if ln.startswith("workbench: error:")]
    assert alone.returncode == 2 and len(errors) == 1 and "ort-openvino-fused: " in errors[0], alone.stderr
    assert "WORKBENCH_DISABLE_OPENVINO_EP" in errors[0] and "Traceback" not in alone.stderr


def test_any_onnx_path_times_on_the_openvino_provider_through_the_ort_runner(tiny_export, tmp_path):
    """The seam an ablation uses: ``Variant(name, path, options=options(precision))`` in the ONNX Runtime
    runner. Here (no device) the runner refuses in the provider's one line; on an Intel CPU it runs."""
    import numpy as np

    from workbench.errors import WorkbenchError
    from workbench.measure.harness.results import Variant
    from workbench.measure.variants.ort_openvino import options
    from workbench.measure.worker.runners import OrtRunner
    from workbench.ort.inputs import make_inputs

    v = Variant("ov", tiny_export().path, options=options("f32"))
    assert v.describe()["options"] == {"ep": "openvino", "precision": "f32"} and v.kind == "onnx"
    ok, why = status()
    if not ok:
        with pytest.raises(WorkbenchError) as e:
            OrtRunner(v.describe(), 1, tmp_path)
        assert str(e.value) == why
        return
    ov, cpu = OrtRunner(v.describe(), 1, tmp_path), OrtRunner(Variant("cpu", tiny_export().path).describe(), 1,
                                                              tmp_path)
    feeds = make_inputs(cpu.spec, 2, 16, seed=0)
    for r in (ov, cpu):
        r.prepare(feeds)
    assert ov.providers[0] == "OpenVINOExecutionProvider" and ov.assignment.asked == "OpenVINO"
    assert np.abs(ov.output() - cpu.output()).max() < 1e-3  # f32 on both


def test_the_plugin_is_in_the_peers_extra_where_pypi_has_its_wheels():
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["peers"]
    req = next(Requirement(d) for d in extra if Requirement(d).name == PACKAGE)
    machines = {("linux", "x86_64"), ("linux", "aarch64"), ("win32", "AMD64"), ("win32", "ARM64"),
                ("darwin", "arm64"), ("darwin", "x86_64")}
    chosen = {(p, m) for p, m in machines if req.marker.evaluate({"sys_platform": p, "platform_machine": m})}
    assert {(p, m.lower()) for p, m in chosen} == set(WHEELS)


def test_a_saved_openvino_provider_variant_is_run_by_the_cards_three_lines():
    """Where ONNX Runtime + OpenVINO's provider wins a tune, the card registers the plugin and puts the model on its
    CPU device (the lines compile; that they run is for an Intel CPU, where the plugin offers one)."""
    from workbench.measure.tune.card import run_lines
    from workbench.measure.tune.result import SessionSpec

    lines = run_lines("/models/tuned", SessionSpec("onnx", "all", [], {"ep": "openvino", "precision": "f32"}),
                      "onnxruntime", 2)
    code = "\n".join(lines)
    compile(code, "card", "exec")
    assert "register_execution_provider_library('openvino_ep'" in code and "add_provider_for_devices([cpu]" in code
    assert "INFERENCE_PRECISION_HINT" in code and "f32" in code
