"""``workbench cache``: it lists and prunes the cache, never an entry a running process uses, and debris of a
killed export is gone at the next start. Each test has a cache folder of its own."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

HOLD = ("import sys, time; from workbench.paths import cache_entry; cache_entry(sys.argv[1], sys.argv[2]); "
        "print('ready', flush=True); time.sleep(60)")


def wb(cache, *args, env=None):
    return subprocess.run([sys.executable, "-m", "workbench.cli", *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, "WORKBENCH_CACHE": str(cache), **(env or {})}, timeout=120)


def _entry(cache, kind, key, size, age_days=0.0):
    d = cache / kind / key
    d.mkdir(parents=True)
    (d / "model.onnx").write_bytes(os.urandom(size))
    t = time.time() - age_days * 86400
    os.utime(d, (t, t))
    return d


def _holder(cache, kind, key):
    """A live workbench process that uses one entry."""
    p = subprocess.Popen([sys.executable, "-c", HOLD, kind, key], stdout=subprocess.PIPE, text=True,
                         env={**os.environ, "WORKBENCH_CACHE": str(cache)})
    assert p.stdout.readline().strip() == "ready"
    return p


def test_list_shows_models_kinds_and_sizes(tmp_path):
    cache = tmp_path / "cache"
    d = _entry(cache, "exports", "k1", 3000)
    (d / "meta.json").write_text(json.dumps({"model": {"name": "my-model"}}))
    v = _entry(cache, "variants", "v1", 5000)
    (v / "origin.json").write_text(json.dumps({"export": str(d / "model.onnx"), "recipe": "int8"}))
    out = wb(cache, "cache", "--json")
    assert out.returncode == 0, out.stderr
    groups = {(g["model"], g["kind"]): g["bytes"] for g in json.loads(out.stdout)["groups"]}
    assert groups[("my-model", "variants")] >= 5000 and groups[("my-model", "exports")] >= 3000
    text = wb(cache, "cache").stdout
    assert "my-model" in text and "variants" in text


def test_prune_never_touches_an_entry_a_running_process_uses(tmp_path):
    cache = tmp_path / "cache"
    _entry(cache, "exports", "busy", 1000, age_days=30)
    _entry(cache, "exports", "idle", 1000, age_days=30)
    holder = _holder(cache, "exports", "busy")
    try:
        out = wb(cache, "cache", "prune", "--all")
        assert out.returncode == 0 and "kept 1 in use" in out.stdout, out.stdout + out.stderr
        assert (cache / "exports" / "busy").is_dir() and not (cache / "exports" / "idle").exists()
    finally:
        holder.kill()
        holder.wait()
    out = wb(cache, "cache", "prune", "--all")  # its process is gone: its lease means nothing now
    assert out.returncode == 0 and not (cache / "exports" / "busy").exists()


def test_prune_by_age_and_by_size_least_recently_used_first(tmp_path):
    cache = tmp_path / "cache"
    for i, age in enumerate((10, 5, 1, 0)):
        _entry(cache, "variants", f"v{i}", 100_000, age_days=age)
    assert wb(cache, "cache", "prune", "--older-than", "7").returncode == 0
    assert sorted(p.name for p in (cache / "variants").iterdir()) == ["v1", "v2", "v3"]
    assert wb(cache, "cache", "prune", "--max-gb", "0.00025").returncode == 0  # room for two of the three
    assert sorted(p.name for p in (cache / "variants").iterdir()) == ["v2", "v3"]


def test_the_size_limit_setting_evicts_after_a_command(tmp_path):
    from onnx import TensorProto, helper as h, save

    cache = tmp_path / "cache"
    for i, age in enumerate((3, 2, 1)):
        _entry(cache, "variants", f"v{i}", 100_000, age_days=age)
    g = h.make_graph([h.make_node("Relu", ["x"], ["y"])], "g", [h.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                     [h.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    save(m, str(tmp_path / "relu.onnx"))
    out = wb(cache, "export", tmp_path / "relu.onnx", env={"WORKBENCH_CACHE_MAX_GB": "0.00015"})
    assert out.returncode == 0, out.stderr
    assert "removed 2 least recently used cache entries" in out.stderr
    assert sorted(p.name for p in (cache / "variants").iterdir()) == ["v2"]  # the newest stays, under the limit


@pytest.mark.parametrize("bad", ["--older-than=-1", "--max-gb=-2"])
def test_bad_prune_arguments_are_one_line(tmp_path, bad):
    out = wb(tmp_path / "cache", "cache", "prune", bad)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr


def test_debris_of_a_killed_export_is_removed_at_the_next_start(tmp_path):
    cache = tmp_path / "cache"
    p = subprocess.Popen([sys.executable, "-m", "workbench.cli", "export", "bert-tiny", "--no-cache"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         env={**os.environ, "WORKBENCH_CACHE": str(cache)})
    deadline, temps = time.monotonic() + 120, []
    while time.monotonic() < deadline and p.poll() is None and not temps:
        temps = list((cache / "exports").glob(".*.tmp-*")) if (cache / "exports").is_dir() else []
        time.sleep(0.02)
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert temps and temps[0].exists(), "the export's temporary folder was not seen (or it finished first)"
    # A temporary entry a live process made after it started is left alone: it may be that process's.
    holder = _holder(cache, "exports", "other")
    young = cache / "variants" / ".abc.tmp-young"
    young.mkdir(parents=True)
    try:
        assert wb(cache, "cache").returncode == 0
        assert not temps[0].exists() and young.exists()
    finally:
        holder.kill()
        holder.wait()
    assert wb(cache, "cache").returncode == 0
    assert not young.exists()  # no live process can be writing it now


def test_timelines_of_other_versions_are_pruned(tmp_path):
    from workbench.fusion.persist import versions

    cache = tmp_path / "cache"
    for key, v in (("old", {**versions(), "workbench_code": "0000"}), ("now", versions())):
        d = _entry(cache, "timelines", key, 1000)
        (d / "key.json").write_text(json.dumps({"format": 1, "versions": v}))
    out = wb(cache, "cache", "prune", "--old-versions")
    assert out.returncode == 0, out.stderr
    assert sorted(p.name for p in (cache / "timelines").iterdir()) == ["now"]
