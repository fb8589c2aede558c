"""The fifth round of bad input (issue 39), the cache side: a damaged model store never gives a wrong answer.

A weights file of a cached model (``models/<group>/weights/<sha256>.bin``) is flipped in place with its times
put back, replaced by other bytes of the same size, truncated, replaced by a folder or a FIFO, or deleted; then
each command runs on that model as a user types it (in one process per batch, as the round-4 driver does, with
the damage done between commands). Each must exit 0 having removed the damaged file and built again what read
it, so that every file of the cache holds what its name says and what was saved equals what an intact cache
gives; or exit 2 with one line naming the damaged file. Never a figure from damaged weights.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import badmodels as bm
import pytest

#: Runs each case's damage, then the command, in one process (imports once), and prints one JSON list.
DRIVER = textwrap.dedent('''
    import contextlib, io, json, os, shutil, sys
    from workbench.cli import main

    def damage(path, how):
        st = os.lstat(path)
        if how == "flip":  # same size, same inode, times put back: only the content tells
            with open(path, "r+b") as f:
                f.seek(st.st_size // 2)
                b = f.read(16)
                f.seek(st.st_size // 2)
                f.write(bytes(x ^ 0x5A for x in b))
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        elif how == "replace":  # other bytes of the same size, renamed over it (a half-synced copy)
            with open(path + ".new", "wb") as f:
                f.write(os.urandom(st.st_size))
            os.replace(path + ".new", path)
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        elif how == "truncate":
            os.truncate(path, st.st_size // 3)
        elif how == "delete":
            os.unlink(path)
        elif how == "folder":
            os.unlink(path)
            os.mkdir(path)
        elif how == "folder with a file":
            os.unlink(path)
            os.mkdir(path)
            with open(os.path.join(path, "notes.txt"), "w") as f:
                f.write("mine")
        elif how == "fifo":
            os.unlink(path)
            os.mkfifo(path)
        else:
            raise ValueError(how)

    results = []
    for case in json.loads(sys.argv[1]):
        if case.get("damage"):
            damage(*case["damage"])
        err, out = io.StringIO(), io.StringIO()
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
                rc = main(case["argv"])
        except SystemExit as e:
            rc = e.code
        results.append({"case": case["case"], "rc": rc, "stderr": err.getvalue(), "stdout": out.getvalue()})
    print(json.dumps(results))
''')
TINY = "bert-tiny"
FAST = ["--runs", "1", "--warmup", "1", "--seq", "8"]


def _drive(cases: list[dict], cache: Path) -> list[dict]:
    proc = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(cases)], capture_output=True, text=True,
                          timeout=1500, env={**os.environ, "WORKBENCH_CACHE": str(cache)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _group(cache: Path) -> Path:
    (group,) = [p for p in (cache / "models").iterdir() if p.is_dir() and not p.name.startswith(".")]
    return group


def _entries(group: Path) -> dict[Path, dict]:
    return {g: json.loads(g.with_suffix(".json").read_text()) for g in sorted(group.glob("*.onnx"))
            if g.with_suffix(".json").is_file()}


def _intact(cache: Path) -> list[str]:
    """Every complete entry's problems (none when each file holds what its name or meta says)."""
    from workbench.cache import model_store

    group = _group(cache)
    return [f"{g.name}: {p.name} {why}" for g, meta in _entries(group).items()
            for p, why in model_store.damage(g, meta)]


def _weights_of(graph: Path) -> set[Path]:
    from workbench.cache import model_store

    return {graph.parent / rel for rel in model_store.read_files(graph)}


def _initializers(path: Path) -> dict[str, bytes]:
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    return {t.name: numpy_helper.to_array(t).tobytes() for t in model.graph.initializer}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A cache holding bert-tiny's export and fused variant, and what an intact cache saves for it."""
    base = tmp_path_factory.mktemp("round5")
    cache, ref = base / "cache", base / "ref"
    results = _drive([{"case": "export", "argv": ["export", TINY, "-o", str(ref / "export")]},
                      {"case": "bench", "argv": ["bench", TINY, "--variants", "fused", *FAST]},
                      {"case": "fuse -o", "argv": ["fuse", TINY, "-o", str(ref / "fused.onnx")]}], cache)
    assert all(r["rc"] == 0 for r in results), results
    group = _group(cache)
    entries = _entries(group)
    (export,) = [g for g in entries if g.name.startswith("export-")]
    (fused,) = [g for g, m in entries.items() if str(m.get("recipe", "")).startswith("fused-")]
    shared = max(_weights_of(export), key=lambda p: p.stat().st_size)  # the word embeddings: read by every model
    own = max(_weights_of(fused) - _weights_of(export), key=lambda p: p.stat().st_size)  # a packed QKV weight
    assert _intact(cache) == []
    return {"cache": cache, "ref": ref, "shared": shared, "fused_only": own, "base": base}


def _check_rebuilt(results: list[dict], cache: Path) -> None:
    bad = []
    for r in results:
        if r["rc"] != 0 or "Traceback" in r["stderr"]:
            bad.append(f"{r['case']}: exit {r['rc']}: {r['stderr'][-600:]!r}")
        elif "damaged file, removed and built again" not in r["stderr"]:
            bad.append(f"{r['case']}: did not say it found a damaged file: {r['stderr'][-300:]!r}")
    assert not bad, "\n".join(bad)
    assert _intact(cache) == [], "every file of the cache holds what its name says afterwards"


def test_every_command_rebuilds_a_damaged_weights_file_and_saves_what_an_intact_cache_does(store):
    """Each damage on a weights file every model reads, each command: exit 0, the damaged file removed and
    written again, and what was saved (an export, a fused model) equal, tensor for tensor, to the intact one."""
    cache, out, w = store["cache"], store["base"] / "out", str(store["shared"])
    cases = [
        {"case": "flip / fuse -o", "damage": [w, "flip"], "argv": ["fuse", TINY, "-o", str(out / "fused.onnx")]},
        {"case": "replace / export -o", "damage": [w, "replace"], "argv": ["export", TINY, "-o", str(out / "e1")]},
        {"case": "truncate / bench", "damage": [w, "truncate"], "argv": ["bench", TINY, "--variants", "fused", *FAST]},
        {"case": "folder / fuse", "damage": [w, "folder"], "argv": ["fuse", TINY]},
        {"case": "fifo / report", "damage": [w, "fifo"], "argv": ["report", TINY, "--no-bench", "-o", str(out / "r")]},
        {"case": "delete / export", "damage": [w, "delete"], "argv": ["export", TINY]},
        {"case": "flip / export --no-cache -o", "damage": [w, "flip"],
         "argv": ["export", TINY, "--no-cache", "-o", str(out / "e2")]},
        {"case": "flip a fused model's own weights / bench", "damage": [str(store["fused_only"]), "flip"],
         "argv": ["bench", TINY, "--variants", "fused", *FAST]},
    ]
    _check_rebuilt(_drive(cases, cache), cache)
    assert _initializers(out / "fused.onnx") == _initializers(store["ref"] / "fused.onnx")
    (ref,) = (store["ref"] / "export").glob("*.onnx")
    for folder in ("e1", "e2"):
        (got,) = (out / folder).glob("*.onnx")
        assert _initializers(got) == _initializers(ref), f"export -o after damage ({folder}) differs"


def test_tune_rebuilds_a_damaged_store_instead_of_blaming_the_model(store):
    """And saves through ``-o`` onto a link to an empty folder (into that folder, not a NotADirectoryError)."""
    cache, w = store["cache"], str(store["fused_only"])
    empty, link = store["base"] / "empty", store["base"] / "link"
    empty.mkdir()
    link.symlink_to(empty)
    results = _drive([{"case": "flip / tune -o a link", "damage": [w, "flip"],
                       "argv": ["tune", TINY, "--workload", "latency", "--no-shipped", *FAST, "-o", str(link)]}],
                     cache)
    _check_rebuilt(results, cache)
    assert "no ONNX Runtime variant kept the answers" not in results[0]["stdout"] + results[0]["stderr"]
    assert link.is_symlink() and (empty / "model.onnx").is_file()


def test_a_damage_the_workbench_may_not_clear_is_one_line_naming_the_file(store):
    """A folder with a file of the user's in it where a weights file belongs: exit 2, one line naming it, on
    every command; the user's file stays."""
    cache, w = store["cache"], store["shared"]
    cases = [{"case": "folder with a file / fuse", "damage": [str(w), "folder with a file"], "argv": ["fuse", TINY]}]
    cases += [{"case": f"folder with a file / {cmd[0]}", "argv": cmd} for cmd in (
        ["bench", TINY, "--variants", "fused", *FAST], ["export", TINY], ["export", TINY, "--no-cache"],
        ["report", TINY, "--no-bench", "-o", str(store["base"] / "r2")], ["tune", TINY, *FAST])]
    try:
        results = _drive(cases, cache)
        bad = [f"{r['case']}: {', '.join(why)}: {r['stderr'][-400:]!r}" for r in results
               if (why := bm.refusal_problems(r, f"{w} is a folder with files in it"))]
        assert not bad, "\n".join(bad)
        assert (w / "notes.txt").read_text() == "mine", "the user's file stays"
    finally:
        shutil.rmtree(w, ignore_errors=True)
    _drive([{"case": "export again", "argv": ["export", TINY]}], cache)
    assert _intact(cache) == []


def test_a_cached_export_without_its_parity_record_is_exported_again(store):
    from workbench.cache import model_store

    cache = store["cache"]
    (export,) = _group(cache).glob("export-*.onnx")
    meta_path = export.with_suffix(".json")
    meta = json.loads(meta_path.read_text())
    meta.pop("parity")
    meta_path.write_text(json.dumps(meta))
    (r,) = _drive([{"case": "export", "argv": ["export", TINY]}], cache)
    assert r["rc"] == 0 and "parity vs PyTorch" in r["stdout"] and "cached" not in r["stdout"].split("\n")[0]
    assert json.loads(meta_path.read_text())["parity"]["ok"] is True
    assert model_store.damage(export, json.loads(meta_path.read_text())) == []


def test_a_flipped_graph_file_is_caught_by_the_digest_its_meta_records(store):
    cache = store["cache"]
    (export,) = _group(cache).glob("export-*.onnx")
    (r,) = _drive([{"case": "flip the export's graph / export", "damage": [str(export), "flip"],
                    "argv": ["export", TINY]}], cache)
    assert r["rc"] == 0 and export.name in r["stderr"], r
    assert _intact(cache) == []


def test_a_flipped_fused_weight_of_the_timeline_store_is_recomputed_not_fused_into_the_model(store):
    """``timelines/<base>/weights/<k>.pb`` (packed QKV a step made) is checked against the digest its step's
    meta records: a flipped byte drops that step, which is computed again, in a fresh process."""
    cache = store["base"] / "timeline-flip"
    shutil.copytree(store["cache"], cache, symlinks=True)
    import onnx

    final = _initializers(store["ref"] / "fused.onnx")
    # bench's fused variant and `fuse` opened one timeline of the export (the same arguments), so every packed
    # weight is on disk once; the largest the fused model holds (not an intermediate's), by size then name.
    assert len(list((cache / "timelines").glob("*/key.json"))) == 1, "bench and fuse share one timeline"
    by_size = sorted((cache / "timelines").glob("*/weights/*.pb"), key=lambda p: (p.stat().st_size, p.name))
    weights = [p for p in by_size if onnx.load_tensor(str(p)).name in final]
    assert weights, "fuse persisted the packed weights its steps made"
    target, intact = weights[-1], weights[-1].read_bytes()
    out = store["base"] / "flip-fused.onnx"
    (r,) = _drive([{"case": "flip a timeline weight / fuse -o", "damage": [str(target), "flip"],
                    "argv": ["fuse", TINY, "-o", str(out)]}], cache)
    assert r["rc"] == 0 and "Traceback" not in r["stderr"], r
    assert _initializers(out) == final, "no tensor from the damaged file"
    assert target.read_bytes() == intact, "the recomputed step wrote the weight again"


# ── a read-only cache, a full disk ──────────────────────────────────────────────────────────────
def _mount(*args: str) -> bool:
    return subprocess.run(["mount", *args], capture_output=True).returncode == 0


@contextlib.contextmanager
def _mounted(dst: Path, *how: list[str]):
    """``dst`` mounted by each ``mount`` argument list in turn; skipped where this platform does not let a
    test mount (not root, no mount namespace)."""
    dst.mkdir(parents=True, exist_ok=True)
    if not _mount(*how[0], str(dst)):
        pytest.skip(f"`mount {' '.join(how[0])}` is not permitted here: tested where a test may mount")
    try:
        for args in how[1:]:
            if not _mount(*args, str(dst)):
                pytest.skip(f"`mount {' '.join(args)}` is not permitted here")
        yield dst
    finally:
        subprocess.run(["umount", str(dst)], capture_output=True)


def _listing(folder: Path) -> dict:
    return {p.relative_to(folder).as_posix(): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_read_only_cache_serves_what_it_holds_and_says_in_one_line_what_it_cannot_store(store):
    """A prepared folder mounted read-only (a bind mount: root writes through chmod): what it holds is served;
    a command that needs a new entry says so in one line naming the folder and WORKBENCH_CACHE; no traceback."""
    src, out = store["cache"], store["base"] / "ro-out"
    before = _listing(src)
    with _mounted(store["base"] / "ro", ["--bind", str(src)], ["-o", "remount,ro,bind"]) as ro:
        served = _drive([{"case": c[0], "argv": c} for c in (
            ["export", TINY], ["fuse", TINY, "-o", str(out / "fused.onnx")],
            ["bench", TINY, "--variants", "fused", *FAST], ["cache", "list"])], ro)
        refused = _drive([{"case": " ".join(c[:3]), "argv": c} for c in (
            ["export", TINY, "--no-cache"], ["export", "bert-3layer"], ["fuse", "bert-3layer"],
            ["bench", TINY, "--variants", "fp16", *FAST], ["cache", "prune", "--all"])], ro)
        # tune serves what it finds (all of it, after the tune test above) or says what it cannot store
        (tuned,) = _drive([{"case": "tune", "argv": ["tune", TINY, "--workload", "latency", *FAST]}], ro)
    bad = [f"{r['case']}: exit {r['rc']}: {r['stderr'][-500:]!r}" for r in served
           if r["rc"] != 0 or "Traceback" in r["stderr"] or "Errno" in r["stderr"]]
    bad += [f"{r['case']}: {', '.join(why)}: {r['stderr'][-500:]!r}" for r in refused if (why := _ro_problems(r, ro))]
    if tuned["rc"] != 0 or "Traceback" in tuned["stderr"]:
        bad += [f"tune: {', '.join(why)}: {tuned['stderr'][-500:]!r}" for why in [_ro_problems(tuned, ro)] if why]
    assert not bad, "\n".join(bad)
    assert _initializers(out / "fused.onnx") == _initializers(store["ref"] / "fused.onnx")
    assert _listing(src) == before, "nothing in the read-only folder changed"


def _ro_problems(r: dict, ro: Path) -> list[str]:
    why = bm.refusal_problems(r, str(ro))
    if "Errno" in r["stderr"]:
        why.append("an Errno")
    if "WORKBENCH_CACHE" not in r["stderr"] and not r["case"].startswith("cache"):
        why.append("does not name WORKBENCH_CACHE")
    return why


def test_a_full_disk_is_one_line_leaves_no_entry_and_the_next_run_succeeds(tmp_path):
    """``export`` into a cache on a 26 MB filesystem that fills mid-write: exit 2, one line saying the disk is
    full; no entry with a meta (the mark of a complete one), no temporary file; with space freed, it works."""
    with _mounted(tmp_path / "small", ["-t", "tmpfs", "-o", "size=26m", "tmpfs"]) as cache:
        (r,) = _drive([{"case": "export on a full disk", "argv": ["export", TINY]}], cache)
        why = bm.refusal_problems(r, "the disk is full") + (["names no cache folder"] if str(cache) not in
                                                            r["stderr"] else [])
        assert not why, f"{why}: {r['stderr']!r}"
        assert not list(cache.rglob("*.json")) or all(".leases" in p.parts for p in cache.rglob("*.json"))
        assert not [p for p in cache.rglob("*") if ".tmp" in p.name], "no temporary file or folder is left"
        assert _mount("-o", "remount,size=64m", str(cache))
        (r,) = _drive([{"case": "export with room", "argv": ["export", TINY]}], cache)
        assert r["rc"] == 0, r["stderr"]
        assert _intact(cache) == []


# ── round 4's leftovers ─────────────────────────────────────────────────────────────────────────
def test_library_chatter_stays_off_the_terminal_unless_debug(tmp_path):
    """A DeBERTa with ``position_buckets: 0`` and a LayerNorm on its relative embeddings makes onnx-ir log
    "Skipping constant folding ..." while onnxscript fuses it: not on the user's terminal, only with --debug."""
    import torch
    import transformers

    torch.manual_seed(0)
    cfg = transformers.AutoConfig.for_model(
        "deberta-v2", num_hidden_layers=1, hidden_size=48, num_attention_heads=3, intermediate_size=80,
        vocab_size=300, pad_token_id=0, max_position_embeddings=64, relative_attention=True, position_buckets=0,
        max_relative_positions=16, type_vocab_size=0, norm_rel_ebd="layer_norm", pos_att_type=["p2c", "c2p"])
    folder = tmp_path / "deberta-buckets0"
    transformers.AutoModel.from_config(cfg).save_pretrained(folder)
    os.environ["WORKBENCH_PERSIST_TIMELINE"] = "0"  # the engines run each time (a persisted timeline would not)
    try:
        plain, debug = _drive([{"case": "fuse", "argv": ["fuse", str(folder)]},
                               {"case": "--debug fuse", "argv": ["--debug", "fuse", str(folder)]}], tmp_path / "c")
    finally:
        del os.environ["WORKBENCH_PERSIST_TIMELINE"]
    assert plain["rc"] == 0 and debug["rc"] == 0, (plain["stderr"], debug["stderr"])
    assert "Skipping constant folding" in debug["stderr"], "the library does log here (else this proves nothing)"
    assert "Skipping constant folding" not in plain["stderr"] + plain["stdout"]


@pytest.mark.parametrize("make, words", [
    (lambda p: p.symlink_to(p), "leads through a symbolic link loop"),
    (lambda p: os.mkfifo(p), "is a FIFO, not a folder"),
    (lambda p: p.write_text("x"), "is a file, not a folder"),
])
def test_a_cache_path_that_cannot_be_walked_is_one_line(tmp_path, make, words):
    cache = tmp_path / "cache"
    make(cache)
    cases = [{"case": " ".join(a), "argv": a} for a in (["cache", "list"], ["cache", "list", "--json"],
                                                          ["cache", "prune", "--all"])]
    bad = [f"{r['case']}: {', '.join(why)}: {r['stderr']!r}" for r in _drive(cases, cache)
           if (why := bm.refusal_problems(r, f"{cache} {words}"))]
    if cache.is_symlink():  # below a loop, too
        bad += [f"below: {', '.join(why)}" for r in _drive(cases[:1], cache / "sub")
                if (why := bm.refusal_problems(r, "leads through a symbolic link loop"))]
    assert not bad, "\n".join(bad)


# ── other edges ────────────────────────────────────────────────────────────────────────────────
def test_tune_refuses_a_text_of_control_characters_in_one_line(tmp_path):
    import random

    rng = random.Random(0)
    controls = [chr(c) for c in [*range(1, 9), *range(14, 32), 127]]
    noise = tmp_path / "noise.txt"
    noise.write_text("\n".join("".join(rng.choice(controls) for _ in range(40)) for _ in range(60)))
    two = tmp_path / "two.txt"  # 60 lines, two sentences once the control characters are out
    two.write_text("\n".join(("hello world" if i % 2 else "good \x07day") + "".join(rng.choice(controls) for _ in
                                                                                  range(8)) for i in range(60)))
    results = _drive([{"case": "noise", "argv": ["tune", TINY, "--text", str(noise), *FAST]},
                      {"case": "two", "argv": ["tune", TINY, "--text", str(two), *FAST]}], tmp_path / "cache")
    expect = {"noise": f"{noise} has no sentences", "two": "2 distinct sentences"}
    bad = [f"{r['case']}: {', '.join(why)}: {r['stderr']!r}" for r in results
           if (why := bm.refusal_problems(r, expect[r["case"]]))]
    assert not bad, "\n".join(bad)


#: An export whose parity check (in its own thread) takes a minute, as ONNX Runtime's session on a large model
#: on a busy machine may: the process says when it is there, so Ctrl-C can be sent while it waits.
SLOW_PARITY = textwrap.dedent('''
    import sys, time
    import workbench.export as ex
    checked = ex.checked_parity
    def slow(*a, **k):
        print("in parity", flush=True)
        time.sleep(60)
        return checked(*a, **k)
    ex.checked_parity = slow
    from workbench.cli import main
    sys.exit(main(["export", "bert-tiny", "--no-cache"]))
''')


@pytest.mark.parametrize("presses", [1, 2])
def test_ctrl_c_during_an_exports_parity_check_ends_it_at_once_in_one_line(tmp_path, presses):
    import signal
    import time

    env = {**os.environ, "WORKBENCH_CACHE": str(tmp_path / "cache")}
    proc = subprocess.Popen([sys.executable, "-c", SLOW_PARITY], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    try:
        assert proc.stdout.readline().strip() == "in parity"
        t = time.monotonic()
        for _ in range(presses):
            proc.send_signal(signal.SIGINT)
            time.sleep(0.3)
        out, err = proc.communicate(timeout=50)
    finally:
        proc.kill()
    assert time.monotonic() - t < 20, "the exit waited for the parity thread"
    assert proc.returncode in (130, -signal.SIGINT), err
    assert "workbench: interrupted" in err and "Traceback" not in err and "Exception ignored" not in err, err


def test_ctrl_c_while_jupyterlab_starts_is_one_line_and_stops_it(tmp_path):
    """Ctrl-C reaches the whole foreground group in a terminal: JupyterLab, still importing, printed a
    KeyboardInterrupt traceback. Now it runs in a session of its own and is asked to stop."""
    import signal
    import time

    pytest.importorskip("jupyterlab")
    import psutil

    for delay in (0.5, 2.0):
        folder = tmp_path / f"nb{delay}"
        proc = subprocess.Popen([sys.executable, "-m", "workbench.cli", "lab", "--no-browser", "--folder",
                                 str(folder), "--port", str(18900 + int(delay * 10))],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        time.sleep(delay)
        children = psutil.Process(proc.pid).children(recursive=True)
        os.killpg(proc.pid, signal.SIGINT)  # as a terminal does: the whole foreground group
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err[-1000:]
        assert "workbench: interrupted" in err and "Traceback" not in err and "KeyboardInterrupt" not in err, err
        gone, alive = psutil.wait_procs(children, timeout=10)
        assert not alive, f"JupyterLab is still running: {alive}"


def test_prepare_check_names_a_damaged_model_of_a_copied_folder(store, tmp_path):
    """A prepared folder copied to a laptop, one weights file changed on the way: `prepare --check` names it."""
    from workbench.workshop.prepare import MANIFEST, versions

    copy = tmp_path / "room"
    shutil.copytree(store["cache"], copy, symlinks=True)
    (copy / MANIFEST).write_text(json.dumps({"versions": versions()}))
    target = copy / store["shared"].relative_to(store["cache"])
    intact, damaged = _drive([{"case": "intact", "argv": ["prepare", "--check", str(copy)]},
                              {"case": "damaged", "damage": [str(target), "flip"],
                               "argv": ["prepare", "--check", str(copy)]}], tmp_path / "cache")
    assert intact["rc"] == 0, intact
    assert damaged["rc"] == 1 and str(target.relative_to(copy)) in damaged["stdout"], damaged
    assert "does not hold what was written" in damaged["stdout"]
