"""Timelines persisted on disk (``fusion/timeline_store.py``): a reopen equals the cold run and runs no engine step."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from onnx import numpy_helper

from workbench.config import FusionPlan
from workbench.fusion import Timeline, disk, run_fusion, timeline_store
from workbench.fusion import timeline as timeline_mod
from workbench.fusion.engines import engine_steps
from workbench.fusion.scheduler import FusionScheduler

HEADS, HIDDEN = 2, 128  # bert-tiny
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def store_dir(tmp_path, monkeypatch):
    """A private, empty timeline store for this test."""
    folder = tmp_path / "timelines"
    monkeypatch.setenv(timeline_store.ENV_ROOT, str(folder))
    monkeypatch.delenv(timeline_store.ENV_SWITCH, raising=False)
    return folder


def _forbid_engines(monkeypatch) -> None:
    """Make every engine step (and every skip test, which asks the engine for its anchors) fail loudly."""
    real = engine_steps

    def patched(engine):
        return tuple(dataclasses.replace(s, run=_fail, skip=_fail if s.skip is not None else None,
                                         rest=_fail if s.rest is not None else None) for s in real(engine))

    monkeypatch.setattr(timeline_mod, "engine_steps", patched)


def _fail(*args, **kwargs):
    raise AssertionError("an engine step ran")


def _weights(model) -> list:
    return sorted((t.name, t.data_type, tuple(t.dims), hashlib.sha1(numpy_helper.to_array(t).tobytes()).hexdigest())
                  for t in model.graph.initializer)


def _same(a, b, *, timing: bool = True) -> None:
    """Two snapshots are the same as far as anything the app, the CLI or a test can see.

    ``timing``: the engine time is the same too (read back, not recomputed).
    """
    assert (a.step, a.engine, a.nodes, a.key) == (b.step, b.engine, b.nodes, b.key)
    assert a.histogram == b.histogram and a.fused == b.fused and a.fused_here == b.fused_here
    assert a.diff.to_dict() == b.diff.to_dict()
    assert a.diagnostic == b.diagnostic and a.counts == b.counts and a.messages == b.messages
    assert a.chain == b.chain and (a.elapsed_s == b.elapsed_s or not timing)
    assert a.skeleton.SerializeToString(deterministic=True) == b.skeleton.SerializeToString(deterministic=True)
    assert {**a.to_dict(), "elapsed_s": 0} == {**b.to_dict(), "elapsed_s": 0}


def _entries(folder: Path) -> list[Path]:
    return sorted(folder.glob("*/steps/*/meta.json"))


@pytest.mark.parametrize("exporter,engine", [("torchscript", "auto"), ("dynamo", "onnxscript")])
def test_a_reopened_timeline_equals_the_cold_one_and_runs_no_engine_step(tiny_export, store_dir, monkeypatch,
                                                                         exporter, engine):
    path = tiny_export(exporter, "eager").path
    cold = run_fusion(path, FusionPlan(engine=engine), num_heads=HEADS, hidden_size=HIDDEN)
    assert cold.steps_run > 0 and not any(s.persisted for s in cold.snapshots)
    assert disk.flush(60)
    assert _entries(store_dir)

    _forbid_engines(monkeypatch)
    again = run_fusion(path, FusionPlan(engine=engine), num_heads=HEADS, hidden_size=HIDDEN)
    assert again.steps_run == 0
    assert again.engine_used == cold.engine_used and again.engine_note == cold.engine_note
    assert again.store._deferred is not None  # the export's weights were not even read
    assert len(again.snapshots) == len(cold.snapshots)
    for a, b in zip(again.snapshots, cold.snapshots):
        _same(a, b)
    for e in cold.runs:
        for a, b in zip(again.runs[e], cold.runs[e]):
            _same(a, b)
    assert all(s.persisted for s in again.snapshots)
    # the graph with weights: the export's from the export file, the ones a step made from the store
    assert _weights(again.final.model) == _weights(cold.final.model)
    assert again.to_dict() == cold.to_dict()


def test_warm_up_toggles_and_parity_are_lookups_after_a_reopen(tiny_export, store_dir, monkeypatch):
    path = tiny_export("torchscript", "eager").path
    cold = run_fusion(path, FusionPlan(engine="ort"), num_heads=HEADS, hidden_size=HIDDEN)
    warm = FusionScheduler(cold)
    warm.start_warming()
    assert warm.wait_warm(300) and warm.warm_error is None
    warm.stop_warming()
    last = len(cold.snapshots) - 1
    cold.check_parity(last)
    ref = cold.reference()
    cold.snapshots[2].check_parity(reference=ref)  # as the app's parity thread does
    steps = [s.step for s in cold.snapshots[1:]]
    toggled = {}
    for step in steps:
        toggled[step] = [(s.step, s.nodes, s.fused) for s in cold.toggle(step, False)]
        cold.toggle(step, True)
    assert disk.flush(60)

    _forbid_engines(monkeypatch)
    tl = run_fusion(path, FusionPlan(engine="ort"), num_heads=HEADS, hidden_size=HIDDEN)
    assert tl.snapshots[last].parity == cold.snapshots[last].parity is not None
    assert tl.snapshots[2].parity == cold.snapshots[2].parity is not None
    sch = FusionScheduler(tl)
    sch.start_warming()
    assert sch.wait_warm(120) and sch.warm_error is None, sch.warm_error
    sch.stop_warming()
    for step in steps:
        assert [(s.step, s.nodes, s.fused) for s in tl.toggle(step, False)] == toggled[step]
        tl.toggle(step, True)
    assert tl.steps_run == 0


def test_parity_checked_after_a_reopen_is_written_too(tiny_export, store_dir):
    path = tiny_export("torchscript", "eager").path
    run_fusion(path, FusionPlan(engine="ort"), num_heads=HEADS, hidden_size=HIDDEN)
    assert disk.flush(60)
    tl = run_fusion(path, FusionPlan(engine="ort"), num_heads=HEADS, hidden_size=HIDDEN)
    assert tl.snapshots[-1].parity is None
    tl.snapshots[-1].check_parity(reference=tl.reference())
    assert disk.flush(60)
    third = run_fusion(path, FusionPlan(engine="ort"), num_heads=HEADS, hidden_size=HIDDEN)
    assert third.snapshots[-1].parity == tl.snapshots[-1].parity is not None


def test_task_parity_is_kept_per_text(tiny_export, store_dir):
    from workbench.text import TextBatches

    path = tiny_export("torchscript", "eager").path

    def text(seed):
        ids = np.random.default_rng(seed).integers(1000, 2000, size=(3, 8), dtype=np.int64)
        return TextBatches(sentences=("a", "b", "c"), batches=({"input_ids": ids,
                                                                "attention_mask": np.ones_like(ids),
                                                                "token_type_ids": np.zeros_like(ids)},))

    tl = run_fusion(path, FusionPlan(engine="ort"), num_heads=HEADS, hidden_size=HIDDEN)
    tl.use_text(text(1))
    tl.check_parity(len(tl.snapshots) - 1)
    found = tl.snapshots[-1].task_parity
    assert found is not None
    assert disk.flush(60)
    again = run_fusion(path, FusionPlan(engine="ort"), num_heads=HEADS, hidden_size=HIDDEN)
    assert again.snapshots[-1].task_parity is None  # no text yet
    again.use_text(text(1))
    assert again.snapshots[-1].task_parity == json.loads(json.dumps(found))
    again.use_text(text(2))  # other text: nothing stored for it
    assert again.snapshots[-1].task_parity is None


def _damage(store_dir: Path, what: str) -> None:
    [base] = [p for p in store_dir.iterdir() if p.is_dir()]
    if what == "meta":
        for meta in sorted((base / "steps").glob("*/meta.json")):
            meta.write_text(meta.read_text()[: len(meta.read_text()) // 2])
    elif what == "graph":
        for g in sorted((base / "graphs").glob("*.onnx")):
            data = bytearray(g.read_bytes())
            data[len(data) // 2] ^= 0xFF
            g.write_bytes(bytes(data))
    elif what == "weights":
        for w in sorted((base / "weights").glob("*.pb")):
            w.write_bytes(w.read_bytes()[:100])
    elif what == "flipped weights":  # same size, same times: only the digest its meta records tells
        for w in sorted((base / "weights").glob("*.pb")):
            st, data = w.stat(), bytearray(w.read_bytes())
            data[-5] ^= 0x01
            w.write_bytes(bytes(data))
            os.utime(w, ns=(st.st_atime_ns, st.st_mtime_ns))
    elif what == "input":
        (base / "input.json").write_text("{not json")
    elif what == "missing":
        for g in sorted((base / "graphs").glob("*.onnx"))[::2]:
            g.unlink()
    elif what == "wrong key":  # an entry renamed under another plan prefix's name
        metas = sorted((base / "steps").glob("*/meta.json"))
        d0, d1 = json.loads(metas[0].read_text()), json.loads(metas[1].read_text())
        metas[0].write_text(json.dumps(d1))
        assert d0["key"] != d1["key"]


@pytest.mark.parametrize("what", ["meta", "graph", "weights", "flipped weights", "input", "missing", "wrong key"])
def test_a_damaged_entry_is_rebuilt_not_an_error(tiny_export, store_dir, what):
    path = tiny_export("torchscript", "eager").path
    cold = run_fusion(path, FusionPlan(engine="ort"), num_heads=HEADS, hidden_size=HIDDEN)
    assert disk.flush(60)
    assert list(store_dir.glob("*/weights/*.pb")), "the attention step's packed weights are stored"
    _damage(store_dir, what)
    tl = run_fusion(path, FusionPlan(engine="ort"), num_heads=HEADS, hidden_size=HIDDEN)
    if what == "input":  # the export is read again; the steps after it are still good
        assert not tl.input.persisted and tl.steps_run == 0
    else:
        assert tl.steps_run > 0
    for a, b in zip(tl.snapshots, cold.snapshots):
        _same(a, b, timing=False)
    assert _weights(tl.final.model) == _weights(cold.final.model)
    assert disk.flush(60)
    third = run_fusion(path, FusionPlan(engine="ort"), num_heads=HEADS, hidden_size=HIDDEN)
    assert third.steps_run == 0 and third.input.persisted  # rebuilt and written again
    for a, b in zip(third.snapshots, tl.snapshots):
        _same(a, b)


def test_a_different_plan_or_version_misses(tiny_export, store_dir, monkeypatch):
    path = tiny_export("torchscript", "eager").path
    cold = run_fusion(path, FusionPlan(engine="ort"), num_heads=HEADS, hidden_size=HIDDEN)
    assert disk.flush(60)
    # another plan: the prefix before the switched-off step is read back, everything after it runs
    steps = [s.step for s in cold.snapshots[1:]]
    i = steps.index("gelu")
    other = run_fusion(path, FusionPlan(engine="ort", disabled={"gelu"}), num_heads=HEADS, hidden_size=HIDDEN)
    assert all(s.persisted for s in other.snapshots[: i + 1])
    assert not any(s.persisted for s in other.snapshots[i + 1:])
    # other arguments: another base key
    assert not any(s.persisted for s in run_fusion(path, FusionPlan(engine="ort"), num_heads=HEADS,
                                                   hidden_size=HIDDEN, num_layers=7).snapshots[1:])
    # another onnxruntime (or onnx, onnxscript, workbench code): nothing of the old entries is read
    monkeypatch.setattr(timeline_store, "_VERSIONS", {**timeline_store.versions(), "onnxruntime": "0.0.1"})
    newer = run_fusion(path, FusionPlan(engine="ort"), num_heads=HEADS, hidden_size=HIDDEN)
    assert newer.steps_run == cold.steps_run
    assert not newer.input.persisted and not any(s.persisted for s in newer.snapshots)
    assert disk.flush(60)
    assert len([p for p in store_dir.iterdir() if p.is_dir()]) == 3


def test_versions_cover_the_engines_and_the_workbench_code():
    v = timeline_store.versions()
    assert {"onnx", "onnxscript", "workbench", "workbench_code"} <= set(v)
    assert "onnxruntime" in v or "onnxruntime-gpu" in v


def test_persistence_can_be_switched_off(tiny_export, store_dir, monkeypatch):
    path = tiny_export("torchscript", "eager").path
    tl = run_fusion(path, FusionPlan(engine="ort"), num_heads=HEADS, hidden_size=HIDDEN, persist=False)
    assert tl.persist is None
    monkeypatch.setenv(timeline_store.ENV_SWITCH, "0")
    assert run_fusion(path, FusionPlan(engine="ort"), num_heads=HEADS, hidden_size=HIDDEN).persist is None
    assert disk.flush(60)
    assert not store_dir.exists() or not any(store_dir.iterdir())
    # an in-memory model has no file to key on: never persisted
    import onnx

    assert Timeline(onnx.load(str(path)), FusionPlan(engine="ort")).persist is None


def test_concurrent_writers_leave_whole_entries(tmp_path):
    folder = tmp_path / "steps" / "k"
    errors = []

    def write(i):
        try:
            for _ in range(20):
                disk.write_entry(folder, {"meta.json": json.dumps({"writer": i}).encode()})
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert json.loads((folder / "meta.json").read_text())["writer"] in range(4)
    assert [p.name for p in folder.parent.iterdir()] == ["k"]  # no temporary folders left


_OPEN = """
import sys, time
from workbench.config import FusionPlan
from workbench.fusion import Timeline, disk
tl = Timeline(sys.argv[1], FusionPlan(engine="auto"), num_heads=2, hidden_size=128)
tl.run()
disk.flush(120)
heavy = sorted(m for m in ("torch", "transformers", "onnxscript", "onnx_ir", "onnxruntime.transformers")
               if m in sys.modules)
print(tl.steps_run, ",".join(heavy) or "-")
"""


def test_two_processes_writing_at_once_then_a_reopen_imports_no_engine(tiny_export, store_dir):
    path = str(tiny_export("torchscript", "eager").path)
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    procs = [subprocess.Popen([sys.executable, "-c", _OPEN, path], env=env, stdout=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=600)[0].split() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert all(int(o[0]) > 0 for o in outs)
    # Each entry names its predecessor's graph. Where one writer read the other's entries halfway and went
    # on from a skeleton instead of its in-memory model, its later graphs may differ in names from the
    # other's; such links do not join, and the next open rebuilds them (once) instead of mixing chains.
    runs = []
    for _ in range(2):
        runs.append(subprocess.run([sys.executable, "-c", _OPEN, path], env=env, stdout=subprocess.PIPE, text=True,
                                   timeout=600, check=True).stdout.split())
        if runs[-1][0] == "0":
            break
    assert runs[-1] == ["0", "-"], runs  # every step read back, and no engine (nor torch) imported


def test_flush_gives_up_after_its_stated_bound_in_one_line(monkeypatch, capsys):
    """``disk.flush()`` with no time waits at most $WORKBENCH_FLUSH_WAIT_S (else disk.FLUSH_WAIT_S)."""
    import time

    from workbench.concurrency import new_flag, write_behind

    release = new_flag()
    write_behind(lambda: release.wait(60))  # a write that takes long (a slow disk)
    monkeypatch.setenv("WORKBENCH_FLUSH_WAIT_S", "0.3")
    try:
        t = time.monotonic()
        assert disk.flush() is False
        assert time.monotonic() - t < 5
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "gave up after 0.3 s waiting for the timeline store's queued disk writes" in err[0]
    finally:
        release.set()
    assert disk.flush(60)
