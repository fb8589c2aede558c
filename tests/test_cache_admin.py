"""``workbench cache``: it lists and prunes the cache, deletes only what the workbench wrote, never an entry a
running process uses, and listing changes nothing. Each test has a cache folder of its own; a running writer
is a real process that holds its lease (no test races a process to catch it mid-write)."""
from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time

import pytest

# A writer as the workbench's own writers work (``workbench.cache.model_store``): lease the model folder, stage a model
# in a temporary folder, then (on a line on stdin) publish it. Prints the temporary folder, then the graph.
WRITER = """
import sys
import numpy as np
import onnx
from onnx import TensorProto, helper as h, numpy_helper
from workbench.cache import model_store
group, key = sys.argv[1], sys.argv[2]
tmp = model_store.staging(group)
w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((128, 256)).astype("float32"), "w")
g = h.make_graph([h.make_node("MatMul", ["x", "w"], ["y"])], "g",
                 [h.make_tensor_value_info("x", TensorProto.FLOAT, [1, 128])],
                 [h.make_tensor_value_info("y", TensorProto.FLOAT, [1, 256])], [w])
m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
m.ir_version = 8
onnx.save(m, str(tmp / "model.onnx"))
print(tmp, flush=True)
sys.stdin.readline()
print(model_store.publish(tmp / "model.onnx", kind="exports", key=key, group=group,
                         meta={"model": {"name": "written"}, "nodes": 1, "opset": 17}), flush=True)
sys.stdin.readline()
"""
HOLD = ("import sys, time; from workbench.cache.root import cache_entry; cache_entry(sys.argv[1], sys.argv[2]); "
        "print('ready', flush=True); time.sleep(60)")


def key(name: str) -> str:
    """A cache key as the workbench makes them (24 hex digits)."""
    return hashlib.sha256(name.encode()).hexdigest()[:24]


def wb(cache, *args, env=None):
    return subprocess.run([sys.executable, "-m", "workbench.cli", *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, "WORKBENCH_CACHE": str(cache), **(env or {})}, timeout=120)


def _entry(cache, kind, name, size, age_days=0.0, files=("model.onnx",)):
    d = cache / kind / key(name)
    d.mkdir(parents=True, exist_ok=True)
    for f in files:
        (d / f).parent.mkdir(parents=True, exist_ok=True)
        (d / f).write_bytes(os.urandom(size))
    t = time.time() - age_days * 86400
    os.utime(d, (t, t))
    return d


def _holder(cache, kind, name):
    """A live workbench process that uses one entry."""
    p = subprocess.Popen([sys.executable, "-c", HOLD, kind, name], stdout=subprocess.PIPE, text=True,
                         env={**os.environ, "WORKBENCH_CACHE": str(cache)})
    assert p.stdout.readline().strip() == "ready"
    return p


def _tree(root):
    """Every path under ``root`` with its size, modification time and (files) content hash."""
    out = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            p = os.path.join(folder, name)
            st = os.lstat(p)
            digest = hashlib.sha256(open(p, "rb").read()).hexdigest() if name in files else ""
            out[os.path.relpath(p, root)] = (st.st_size if name in files else 0, st.st_mtime_ns, digest)
    return out


def _plant(cache) -> dict:
    """Files a user put in the cache: at the top, in every kind's folder, inside entries and their sub-folders,
    some named like temporary files, all two days old. Returns ``{path: bytes}``."""
    planted = {
        "README.md": b"my notes", "old.tmp": b"a user's temp", ".backup.tmp": b"dot temp",
        ".model.onnx.tmp": b"almost a writer's name", "exports/user-model.onnx": b"my model",
        "exports/README": b"readme", "exports/.draft.tmp-x": b"not eight characters",
        "variants/notes.txt": b"variant notes", "timelines/mine.json": b"{}", "plans/plan.txt": b"plan",
        "floor/rates.csv": b"1,2", "hashes/list.txt": b"h", "blobs/weights.bin": b"w",
        ".leases/notes.md": b"lease notes",
    }
    for kind, name in (("exports", "e"), ("variants", "v"), ("timelines", "t")):
        planted[f"{kind}/{key(name)}/my-notes.txt"] = b"inside an entry"
    planted[f"timelines/{key('t')}/graphs/user.onnx"] = b"inside a sub-folder"
    planted[f"models/{key('g')}/notes.md"] = b"beside the shared weights"
    planted[f"models/{key('g')}/weights/mine.bin"] = b"a weight file of mine"
    planted["models/README"] = b"readme"
    planted[f"timelines/{key('t')}/steps/{'0' * 32}/notes.json"] = b"{}"
    for rel, data in planted.items():
        p = cache / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        t = time.time() - 2 * 86400
        os.utime(p, (t, t))
    return planted


def _workbench_entries(cache):
    """Entries of every kind, as the workbench writes them, two days old."""
    w = subprocess.run([sys.executable, "-c", WRITER, key("g"), key("m")], input="\n\n", capture_output=True,
                       text=True, env={**os.environ, "WORKBENCH_CACHE": str(cache)}, timeout=120)
    assert w.returncode == 0, w.stderr
    e = _entry(cache, "exports", "e", 3000, files=("model.onnx", "meta.json"), age_days=2)
    (e / "meta.json").write_text(json.dumps({"model": {"name": "my-model"}}))
    _entry(cache, "variants", "v", 2000, files=("model.onnx", "origin.json"), age_days=2)
    _entry(cache, "timelines", "t", 100, age_days=2,
           files=("key.json", f"graphs/{'a' * 40}.onnx", f"steps/{'0' * 32}/meta.json"))
    for kind, name in (("plans", f"{key('p')}.json"), ("floor", f"matmul-cpu-fp32-2t-{'1' * 16}.json"),
                       ("hashes", "f" * 64)):
        (cache / kind).mkdir(parents=True, exist_ok=True)
        (cache / kind / name).write_text("{}")


def test_list_changes_nothing_and_every_prune_leaves_the_users_files(tmp_path):
    cache = tmp_path / "cache"
    planted = _plant(cache)
    _workbench_entries(cache)
    before = _tree(cache)
    out = wb(cache, "cache")
    assert out.returncode == 0, out.stderr
    assert _tree(cache) == before, "`workbench cache list` changed the cache"
    assert "did not write are left alone" in out.stdout
    assert wb(cache, "cache", "--json", "--entries").returncode == 0 and _tree(cache) == before
    for criterion in (["--older-than", "1"], ["--old-versions"], ["--max-gb", "0"], ["--all"]):
        out = wb(cache, "cache", "prune", *criterion)
        assert out.returncode == 0, out.stderr
        for rel, data in planted.items():
            assert (cache / rel).read_bytes() == data, f"prune {criterion} touched {rel}"
    left = {os.path.relpath(os.path.join(d, f), cache) for d, _, files in os.walk(cache) for f in files}
    assert left - {".leases/notes.md"} == set(planted) - {".leases/notes.md"}, "a workbench file survived --all"


def test_prune_never_touches_an_entry_a_running_process_uses(tmp_path):
    cache = tmp_path / "cache"
    _entry(cache, "exports", "busy", 1000, age_days=30)
    _entry(cache, "exports", "idle", 1000, age_days=30)
    holder = _holder(cache, "exports", key("busy"))
    try:
        out = wb(cache, "cache", "prune", "--all")
        assert out.returncode == 0 and "kept 1 in use" in out.stdout, out.stdout + out.stderr
        assert (cache / "exports" / key("busy")).is_dir() and not (cache / "exports" / key("idle")).exists()
    finally:
        holder.kill()
        holder.wait()
    out = wb(cache, "cache", "prune", "--all")  # its process is gone: its lease means nothing now
    assert out.returncode == 0 and not (cache / "exports" / key("busy")).exists()


def _writer(cache, group, name):
    return subprocess.Popen([sys.executable, "-c", WRITER, group, key(name)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env={**os.environ, "WORKBENCH_CACHE": str(cache)})


def test_a_writer_in_progress_survives_prune_and_publishes(tmp_path):
    """The writer leased its model folder before staging: prune leaves the staging folder and, once published,
    the graph and its weights alone while the writer lives; after it, --all removes both."""
    cache, group = tmp_path / "cache", key("group")
    w = _writer(cache, group, "w")
    try:
        tmp = w.stdout.readline().strip()
        assert tmp and os.path.isdir(tmp)
        for criterion in (["--all"], ["--max-gb", "0"], ["--older-than", "0"]):
            assert wb(cache, "cache", "prune", *criterion).returncode == 0
            assert os.path.isfile(os.path.join(tmp, "model.onnx")), f"prune {criterion} removed a live writer's files"
        w.stdin.write("\n")
        w.stdin.flush()
        graph = w.stdout.readline().strip()
        assert wb(cache, "cache", "prune", "--all").returncode == 0
        import onnx

        assert onnx.load(graph).graph.initializer[0].dims == [128, 256], "the graph or its weights went"
    finally:
        w.kill()
        w.wait()
    assert wb(cache, "cache", "prune", "--all").returncode == 0
    assert not (cache / "models" / group).exists()


EXPORTER = """
import sys
from workbench.config import ExportConfig
from workbench.export import export
r = export("bert-tiny", ExportConfig(), use_cache=False)
print(r.path, flush=True)
sys.stdin.readline()
"""


def test_a_real_export_survives_prunes_running_beside_it(tmp_path):
    """Prune over and over while a real export runs in another process: the export finishes, and its files stay
    while that process lives (after it ends, the entry is an ordinary cache entry that --all may remove)."""
    cache = tmp_path / "cache"
    p = subprocess.Popen([sys.executable, "-c", EXPORTER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env={**os.environ, "WORKBENCH_CACHE": str(cache)})
    try:
        import selectors

        sel = selectors.DefaultSelector()
        sel.register(p.stdout, selectors.EVENT_READ)
        prunes = 0
        while p.poll() is None and not sel.select(timeout=0):
            assert wb(cache, "cache", "prune", "--all").returncode == 0
            prunes += 1
        path = p.stdout.readline().strip()
        assert path, p.stderr.read()
        assert wb(cache, "cache", "prune", "--all").returncode == 0
        assert os.path.isfile(path) and prunes > 0, "prune removed the export's finished model"
    finally:
        p.kill()
        p.wait()


def test_debris_of_a_killed_writer_goes_at_the_next_start_not_on_list(tmp_path):
    cache = tmp_path / "cache"
    w = _writer(cache, key("group"), "killed")
    tmp = w.stdout.readline().strip()
    w.send_signal(signal.SIGKILL)
    w.wait()
    user_tmp = cache / "models" / "my.tmp"
    user_tmp.write_text("mine")
    assert wb(cache, "cache").returncode == 0
    assert os.path.isdir(tmp), "`workbench cache list` removed something"
    # A temporary entry a live process made after it started is left alone: it may be that process's.
    holder = _holder(cache, "exports", key("other"))
    young = cache / "models" / f".{key('young')}.tmp-abcd1234"
    young.mkdir(parents=True)
    (young / "model.onnx").write_bytes(b"partial")
    try:
        assert wb(cache, "cache", "prune", "--older-than", "365").returncode == 0
        assert not os.path.exists(tmp) and young.exists() and user_tmp.exists()
    finally:
        holder.kill()
        holder.wait()
    assert wb(cache, "cache", "prune", "--older-than", "365").returncode == 0
    assert not young.exists() and user_tmp.read_text() == "mine"  # no live process can be writing it now


def test_each_weight_is_stored_once_and_every_model_still_loads(tmp_path):
    """Both exporters and a fused variant of one model share their weights in one folder; each graph loads
    with onnx and runs in ONNX Runtime; removing one keeps the others whole; --all removes the rest."""
    import numpy as np
    import onnx
    import onnxruntime as ort

    cache = tmp_path / "cache"
    env = {"WORKBENCH_CACHE": str(cache)}
    for exporter in ("torchscript", "dynamo"):
        assert wb(cache, "export", "bert-tiny", "--exporter", exporter, env=env).returncode == 0
    assert wb(cache, "fuse", "bert-tiny", env=env).returncode == 0
    assert wb(cache, "bench", "bert-tiny", "--variants", "fused", "--runs", "2", "--warmup", "1", env=env).returncode == 0
    listed = json.loads(wb(cache, "cache", "--json", "--entries").stdout)
    models = [e for e in listed["entries"] if e["kind"] in ("exports", "variants")]
    assert len(models) == 3 and len({os.path.dirname(e["path"]) for e in models}) == 1
    one = max(e["bytes"] for e in models)
    assert listed["total_bytes"] < 1.5 * one, "the three models do not share their weights"
    feeds = {"input_ids": np.ones((1, 8), np.int64), "attention_mask": np.ones((1, 8), np.int64),
             "token_type_ids": np.zeros((1, 8), np.int64)}

    def runs(path):
        onnx.checker.check_model(path)  # onnx refuses hard-linked external data: these are ordinary files
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        return sess.run(None, {i.name: feeds[i.name] for i in sess.get_inputs()})[0]

    first = runs(models[0]["path"])
    doomed = next(e for e in models if e["kind"] == "exports")
    os.utime(doomed["path"].replace(".onnx", ".json"), (0, 0))  # the least recently used: --max-gb takes it
    assert wb(cache, "cache", "prune", "--max-gb", str((listed["total_bytes"] - 1) / 1e9)).returncode == 0
    left = [e for e in models if os.path.exists(e["path"])]
    assert doomed not in left and len(left) == 2
    for e in left:
        assert np.allclose(runs(e["path"]), first, atol=1e-4)
    assert wb(cache, "cache", "prune", "--all").returncode == 0
    assert not any((cache / "models").iterdir())


def test_prune_by_age_and_by_size_least_recently_used_first(tmp_path):
    cache = tmp_path / "cache"
    for i, age in enumerate((10, 5, 1, 0)):
        _entry(cache, "variants", f"v{i}", 100_000, age_days=age)
    assert wb(cache, "cache", "prune", "--older-than", "7").returncode == 0
    assert sorted(p.name for p in (cache / "variants").iterdir()) == sorted(key(f"v{i}") for i in (1, 2, 3))
    assert wb(cache, "cache", "prune", "--max-gb", "0.00025").returncode == 0  # room for two of the three
    assert sorted(p.name for p in (cache / "variants").iterdir()) == sorted(key(f"v{i}") for i in (2, 3))


def test_prune_all_empties_every_kind_plans_and_a_moved_timeline_cache_included(tmp_path):
    cache, moved = tmp_path / "cache", tmp_path / "timelines-elsewhere"
    (cache / "plans").mkdir(parents=True)
    (cache / "plans" / f"{key('p')}.json").write_text("{}")
    t = moved / key("t")
    (t / "graphs").mkdir(parents=True)
    (t / "key.json").write_text("{}")
    (t / "graphs" / f"{'b' * 40}.onnx").write_bytes(b"g")
    env = {"WORKBENCH_TIMELINE_CACHE": str(moved)}
    listed = json.loads(wb(cache, "cache", "--json", "--entries", env=env).stdout)
    assert {e["kind"] for e in listed["entries"]} == {"plans", "timelines"}
    assert wb(cache, "cache", "prune", "--all", env=env).returncode == 0
    assert not (cache / "plans" / f"{key('p')}.json").exists() and not t.exists()


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
    assert sorted(p.name for p in (cache / "variants").iterdir()) == [key("v2")]  # the newest stays, under the limit


@pytest.mark.parametrize("bad", ["--older-than=-1", "--max-gb=-2", "--max-gb=nan", "--max-gb=inf",
                                 "--older-than=1e400", "--max-gb=lots"])
def test_bad_prune_arguments_are_one_line(tmp_path, bad):
    cache = tmp_path / "cache"
    _entry(cache, "variants", "v", 100, age_days=400)
    before = _tree(cache)
    out = wb(cache, "cache", "prune", bad)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr
    assert bad.split("=")[0] in out.stderr and _tree(cache) == before


@pytest.mark.parametrize("value", ["nan", "1e400", "-1", "inf", "ten"])
def test_a_bad_size_limit_in_the_environment_is_one_line_before_any_work(tmp_path, value):
    cache = tmp_path / "cache"
    _entry(cache, "variants", "v", 100, age_days=400)
    before = _tree(cache)
    for args in (["cache"], ["cache", "prune", "--all"], ["export", "bert-tiny"]):
        out = wb(cache, *args, env={"WORKBENCH_CACHE_MAX_GB": value})
        assert out.returncode == 2, out.stderr
        assert out.stderr.strip().splitlines() == [out.stderr.strip()] and "WORKBENCH_CACHE_MAX_GB" in out.stderr
    assert _tree(cache) == before


def test_timelines_of_other_versions_are_pruned(tmp_path):
    from workbench.fusion.timeline_store import versions

    cache = tmp_path / "cache"
    for name, v in (("old", {**versions(), "workbench_code": "0000"}), ("now", versions())):
        d = _entry(cache, "timelines", name, 1000, files=("input.json",))
        (d / "key.json").write_text(json.dumps({"format": 1, "versions": v}))
    out = wb(cache, "cache", "prune", "--old-versions")
    assert out.returncode == 0, out.stderr
    assert sorted(p.name for p in (cache / "timelines").iterdir()) == [key("now")]
