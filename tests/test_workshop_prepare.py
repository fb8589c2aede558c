"""A room prepared in one command: a prepared folder, copied elsewhere, answers the notebooks without an engine."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.config import ExportConfig, FusionPlan
from workbench.export import export
from workbench.fusion import Timeline
from workbench.models import resolve
from workbench.workshop import exercises as ex
from workbench.workshop.prepare import MANIFEST, check_prepared, prepare

ROOT = Path(__file__).resolve().parents[1]


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}


def test_a_prepared_folder_copied_to_a_laptop_runs_no_engine_step(tmp_path, monkeypatch):
    room, laptop = tmp_path / "room", tmp_path / "laptop"
    monkeypatch.setenv("WORKBENCH_CACHE", str(room))
    monkeypatch.delenv("WORKBENCH_TIMELINE_CACHE", raising=False)
    # As the facilitator does: `workbench prepare` in a process of its own (this test process carries the
    # in-memory state of earlier tests, which a real prepare never has).
    env = {**os.environ, "WORKBENCH_CACHE": str(room)}
    proc = subprocess.run([sys.executable, "-m", "workbench.cli", "prepare", "--models", "bert-tiny", "--real", "none",
                           "--modern", "none", "--notebooks", "01,02,03", "--cache", str(room), "--json"],
                          capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    done = json.loads(proc.stdout)
    assert [s["stage"] for s in done["stages"]] == ["01 app", "02 ablation models", "03 exercises"]
    manifest = json.loads((room / MANIFEST).read_text())
    assert manifest["models"] == ["bert-tiny"] and "workbench_code" in manifest["versions"]
    shutil.copytree(room, laptop)  # what the facilitator does (copy2 keeps the mtimes)
    shutil.rmtree(room)
    monkeypatch.setenv("WORKBENCH_CACHE", str(laptop))
    assert check_prepared(laptop) == []
    before = _files(laptop)
    src = resolve("bert-tiny")
    kw = dict(num_heads=src.num_heads, hidden_size=src.hidden_size, num_layers=src.num_layers)
    # the app's timeline (notebook 01): read back, and a toggle is a lookup too (the warm-up was prepared)
    tl = Timeline(export(src, ExportConfig()).path, FusionPlan(engine="ort"), **kw)
    tl.run()
    assert all(s.parity is not None and s.parity.ok for s in tl.snapshots[1:])  # the app's badges, at once
    tl.toggle("attention", False)
    assert tl.steps_run == 0
    # every timeline of notebook 03's exercises
    for cfg, plan in [(ExportConfig(opset=14), FusionPlan(engine="ort")),
                      (ExportConfig(opset=14), FusionPlan(engine="ort", disabled=frozenset({"layer_norm"}))),
                      (ExportConfig(exporter="dynamo"), FusionPlan(engine="ort")),
                      (ExportConfig(exporter="dynamo"), FusionPlan(engine="onnxscript"))]:
        t = Timeline(export(src, cfg).path, plan, **kw)
        t.run()
        assert t.steps_run == 0, (cfg, plan)
    ex._RUNS.clear()
    assert ex.prerequisite_off(src).holds
    # nothing was exported or fused again (notebook 02's ablation models included)
    from workbench.measure.variants.models import fuse_bert

    fuse_bert(export(src, ExportConfig()).path, num_heads=src.num_heads, hidden_size=src.hidden_size,
              plan=FusionPlan(engine="ort", disabled=frozenset({"attention"})))
    assert not {f for f in _files(laptop) - before if not f.startswith(("hashes", "timelines", ".leases"))}


def test_check_says_what_a_laptop_would_rebuild(tmp_path):
    assert "was not prepared" in check_prepared(tmp_path)[0]
    (tmp_path / MANIFEST).write_text(json.dumps({"versions": {"onnx": "0.0.1"}}))
    (line,) = check_prepared(tmp_path)
    assert line.startswith("onnx: prepared with 0.0.1, this machine has ") and "rebuilt" in line


def _cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "workbench.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}, timeout=120)


def test_cli_refuses_bad_input_in_one_line(tmp_path):
    f = tmp_path / "a-file"
    f.write_text("mine")
    r = _cli("prepare", "--cache", str(f), "--models", "bert-tiny")
    assert r.returncode == 2 and "is not a folder" in r.stderr and len(r.stderr.strip().splitlines()) <= 2
    assert f.read_text() == "mine"
    r = _cli("prepare", "--cache", str(tmp_path / "c"), "--notebooks", "07")
    assert r.returncode == 2 and "no notebook 07" in r.stderr
    r = _cli("prepare", "--check", str(tmp_path))
    assert r.returncode == 1 and "was not prepared" in r.stdout


def test_cli_a_bad_model_fails_before_anything_is_written(tmp_path):
    room = tmp_path / "room"
    r = _cli("prepare", "--cache", str(room), "--models", str(tmp_path / "no-such-model"), "--real", "none")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert not room.exists()


def test_cli_a_warm_up_past_its_bound_is_one_line_and_the_folder_is_still_prepared(tmp_path):
    # WORKBENCH_WARM_WAIT_S far below bert-tiny's warm-up (about 1 s of engine steps): the bound is hit.
    room = tmp_path / "room"
    r = _cli("prepare", "--cache", str(room), "--models", "bert-tiny", "--real", "none", "--modern", "none",
             "--notebooks", "01", "--json", env={"WORKBENCH_WARM_WAIT_S": "0.001"})
    assert r.returncode == 0, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    (line,) = [x for x in r.stderr.splitlines() if "warm-up" in x]
    assert line.startswith("workbench: gave up after 0.001 s waiting for the fusion warm-up of bert-tiny: "), line
    assert "toggles not warmed" in line and "the app warms them on first use" in line
    assert "WORKBENCH_WARM_WAIT_S" in line
    (stage,) = json.loads(r.stdout)["stages"]
    assert stage["stage"] == "01 app" and stage["not_warmed"]
    assert f"{len(stage['not_warmed'])} toggles not warmed" in line
    assert (room / MANIFEST).is_file()  # prepared all the same


def test_cli_a_bad_warm_up_bound_fails_before_anything_is_built(tmp_path):
    room = tmp_path / "room"
    r = _cli("prepare", "--cache", str(room), "--models", "bert-tiny", "--real", "none",
             env={"WORKBENCH_WARM_WAIT_S": "soon"})
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert "WORKBENCH_WARM_WAIT_S must be a number of at least 0.001" in r.stderr
    assert not room.exists()
