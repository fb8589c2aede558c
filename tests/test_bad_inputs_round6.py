"""The sixth round of bad input (issue 45): pipes, terminals, limits, the folders at their limits, the new surfaces.

Each case runs the CLI as a user's shell would, in a process of its own: a real pipe whose reader is gone, a real
closed standard output, a real ``ulimit`` (``bash -c 'ulimit -v ...; exec workbench ...'``), a real task limit
(``prlimit --nproc``), a real SIGTERM and SIGHUP to ``workbench lab`` with psutil looking for a JupyterLab left
behind. Each must exit 2 with one to three lines naming the file, argument, variable or limit (no traceback, no
"Exception ignored", no abort), keep nothing half-written (the next normal run succeeds), or succeed usefully.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import badmodels as bm
import psutil
import pytest

TINY = "bert-tiny"
FAST = ["--runs", "1", "--warmup", "1", "--seq", "8"]
CLI = [sys.executable, "-m", "workbench.cli"]
#: Words that must never reach a user: a traceback, an error at exit, a C++ abort.
NEVER = ("Traceback", "Exception ignored", "terminate called", "Fatal Python error")
LONG = "a" * 5000


def _run(argv: list, *, env: dict | None = None, shell_prefix: str | None = None, timeout: float = 120) -> dict:
    """The CLI with ``argv`` in its own process: rc, output, seconds. ``shell_prefix`` runs it under
    ``bash -c '<prefix>; exec "$@"'`` (a ulimit, a closed stdout)."""
    cmd = [*CLI, *argv]
    if shell_prefix is not None:
        cmd = ["bash", "-c", f'{shell_prefix}; exec "$@"', "_", *cmd]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})
    return {"rc": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr, "seconds": time.perf_counter() - t0}


def _refused(r: dict, message: str) -> None:
    why = bm.refusal_problems(r, message) + [f"says {w!r}" for w in NEVER if w in r["stderr"]]
    if r["seconds"] > 120:
        why.append(f"took {r['seconds']:.0f} s")
    assert not why, f"{', '.join(why)}: {r['stderr'][-800:]!r}"


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """A cache of this module's own with bert-tiny exported and fused, pointed at by WORKBENCH_CACHE."""
    folder = tmp_path_factory.mktemp("round6") / "cache"
    saved = os.environ.get("WORKBENCH_CACHE")
    os.environ["WORKBENCH_CACHE"] = str(folder)
    r = _run(["bench", TINY, "--variants", "fused", *FAST])
    assert r["rc"] == 0, r["stderr"][-2000:]
    yield folder
    if saved is None:
        os.environ.pop("WORKBENCH_CACHE", None)
    else:
        os.environ["WORKBENCH_CACHE"] = saved


# ── the terminal and its streams ─────────────────────────────────────────────────────────────────────
def _piped(argv: list, read: int) -> dict:
    """Run with standard output a pipe whose reader reads ``read`` bytes (0: none) and then closes it."""
    proc = subprocess.Popen([*CLI, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if read:
        proc.stdout.read(read)
    proc.stdout.close()  # the reader is gone, as `| head -c N` or `| true` leaves it
    err = proc.stderr.read().decode("utf-8", "replace")
    return {"rc": proc.wait(timeout=120), "stderr": err}


@pytest.mark.parametrize("argv, read", [
    (["report", TINY, "--no-bench", "-o", "{tmp}"], 0),
    (["bench", "--json", TINY, "--variants", "fused", *FAST], 0),
    (["bench", "--json", TINY, "--variants", "fused", *FAST], 10),
], ids=["report | true", "bench --json | true", "bench --json | head -c 10"])
def test_a_reader_that_leaves_early_ends_the_command_quietly(cache, tmp_path, argv, read):
    r = _piped([a.replace("{tmp}", str(tmp_path)) for a in argv], read)
    assert r["rc"] in (0, 141), r
    assert r["stderr"].strip() == "", f"said something: {r['stderr'][-800:]!r}"


def test_json_with_standard_output_closed_is_refused_before_any_work(cache):
    r = _run(["bench", "--json", TINY, "--variants", "fused", *FAST], shell_prefix="exec >&-")
    _refused(r, "standard output is closed")


def test_names_the_terminal_cannot_encode_are_written_with_escapes(cache, hf_folder, tmp_path):
    """``PYTHONIOENCODING=ascii``: a folder and an output named in accents, CJK and emoji."""
    folder = tmp_path / "modèle_模型_🙂"
    shutil.copytree(hf_folder("bert"), folder)
    out = tmp_path / "sortie_出力_🙂.onnx"
    r = _run(["fuse", str(folder), "-o", str(out)], env={"PYTHONIOENCODING": "ascii"})
    assert r["rc"] == 0 and not any(w in r["stderr"] for w in NEVER), r["stderr"][-1500:]
    assert out.is_file()
    assert "\\u51fa\\u529b_\\U0001f642" in r["stdout"], r["stdout"][-500:]  # the output's name, escaped


@pytest.mark.parametrize("locale", [None, "C"])
def test_a_folder_named_in_bytes_that_are_no_utf8_is_one_line(cache, hf_folder, tmp_path, locale):
    folder = Path(os.fsdecode(os.fsencode(tmp_path) + b"/old\xff\xfe"))
    shutil.copytree(hf_folder("bert"), folder)
    r = _run(["bench", str(folder), "--variants", "fused", *FAST], env={"LC_ALL": locale} if locale else None)
    _refused(r, "not valid UTF-8")


# ── settings and paths at their limits ───────────────────────────────────────────────────────────────
@pytest.mark.parametrize("variable, argv", [
    ("WORKBENCH_CACHE", ["bench", TINY, "--variants", "fused", *FAST]),
    ("WORKBENCH_TIMELINE_CACHE", ["fuse", TINY]),
    ("WORKBENCH_SWEEP_TRACE", ["sweep", "{spec}"]),
])
def test_a_setting_naming_a_path_too_long_for_the_file_system_is_one_line_naming_it(cache, tmp_path, variable,
                                                                                     argv):
    spec = tmp_path / "spec.yaml"
    spec.write_text("models: [bert-tiny]\nseq: [8]\nruns: 1\nwarmup: 1\n")
    r = _run([a.replace("{spec}", str(spec)) for a in argv], env={variable: str(tmp_path / LONG)})
    _refused(r, variable)
    assert "File name too long" not in r["stderr"] and len(r["stderr"]) < 600  # the path shortened, not 5,000 a's


APP = """
import json, os, sys, time
from workbench.ui.app import Workbench
errors = []
for _ in range(2):  # a second notebook in the same kernel too
    app = Workbench("bert-tiny")
    t0 = time.time()
    while not app.error and app.export_result is None and time.time() - t0 < 90:
        time.sleep(0.2)
    errors.append(app.error)
print(json.dumps(errors))
"""


def test_the_notebook_names_the_setting_too(tmp_path):
    proc = subprocess.run([sys.executable, "-c", APP], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "WORKBENCH_CACHE": str(tmp_path / LONG)})
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    errors = json.loads(proc.stdout.strip().splitlines()[-1])
    assert all(e and "WORKBENCH_CACHE" in e and "\n" not in e for e in errors), errors


# ── resource limits ──────────────────────────────────────────────────────────────────────────────────
@pytest.mark.parametrize("limit_kb", [2_000_000, 2_800_000], ids=["refused before building", "caught while exporting"])
def test_an_address_space_limit_says_so_in_one_line(cache, limit_kb):
    """ulimit -v: bert-base is refused from its size at 2 GB; at 2.8 GB it passes the estimate and runs out
    while exporting: one line either way, never std::bad_alloc and C++'s abort (exit 134)."""
    r = _run(["export", "bert-base", "--no-cache"], shell_prefix=f"ulimit -v {limit_kb}")
    _refused(r, "ulimit -v")
    assert _run(["export", TINY])["rc"] == 0, "the next normal run works"


def test_a_file_size_limit_stops_a_write_and_keeps_nothing(cache, tmp_path):
    out = tmp_path / "fused.onnx"
    r = _run(["fuse", TINY, "--no-cache", "-o", str(out)], shell_prefix="ulimit -f 1000")
    _refused(r, "the file-size limit")
    assert "graph.cc" not in r["stderr"] and not out.exists()
    again = _run(["fuse", TINY, "-o", str(out)])
    assert again["rc"] == 0 and out.is_file(), again["stderr"][-1500:]


def _task_limited(extra: int) -> str:
    """A shell prefix that leaves ``extra`` threads and processes to what it runs (RLIMIT_NPROC counts the real
    user's; root is exempt from it, so as root the command runs under the real uid of nobody, its effective uid,
    and so its files, kept, with the capabilities that lift the limit dropped)."""
    if not shutil.which("prlimit"):
        pytest.skip("prlimit (util-linux) is not installed")
    uid = os.getuid()
    prefix = ""
    if uid == 0:
        if not shutil.which("setpriv"):
            pytest.skip("setpriv (util-linux) is not installed")
        uid = 65534
        prefix = "exec setpriv --ruid=65534 --bounding-set=-sys_resource,-sys_admin -- "
    used = sum(p.info["num_threads"] or 0 for p in psutil.process_iter(["uids", "num_threads"])
               if p.info["uids"] and p.info["uids"].real == uid)
    return f"{prefix}prlimit --nproc={used + extra}"


@pytest.mark.parametrize("extra, variants", [(4, "fused"), (9, "torch,fused")])
def test_a_task_limit_is_one_line_naming_it(cache, extra, variants):
    """Few threads left: the benchmark cannot start its own threads (4), or the worker's libraries cannot start
    theirs (9); never "can't start new thread" as a traceback, nor again in an atexit callback."""
    prefix = _task_limited(extra)
    cmd = ["bash", "-c", f'{prefix} "$@"', "_", *CLI, "bench", TINY, "--variants", variants, *FAST]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    r = {"rc": proc.returncode, "stderr": proc.stderr, "seconds": 0}
    if r["rc"] == 0:
        pytest.skip("the limit left enough threads here for the whole benchmark")
    _refused(r, "task limit")


# ── model folders at their limits ────────────────────────────────────────────────────────────────────
def _folder_with(hf_folder, tmp_path, name: str, **config) -> Path:
    folder = tmp_path / name
    shutil.copytree(hf_folder("bert"), folder)
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**cfg, **config}))
    return folder


def test_a_hundred_thousand_layers_are_refused_in_a_moment(cache, hf_folder, tmp_path):
    from workbench.errors import ModelSourceError
    from workbench.models import resolve

    folder = _folder_with(hf_folder, tmp_path, "deep", num_hidden_layers=100_000)
    t0 = time.perf_counter()
    with pytest.raises(ModelSourceError, match="num_hidden_layers 100,000"):
        resolve(str(folder))
    assert time.perf_counter() - t0 < 1.0, "estimated from the config, before anything is built"
    _refused(_run(["bench", str(folder)]), "100,000")


def test_a_tokenizer_past_the_embedding_table_is_one_line(cache, hf_folder, tmp_path):
    """A vocab.txt of two million lines over weights with 1,000 embeddings: not PyTorch's "index out of range"."""
    folder = _folder_with(hf_folder, tmp_path, "bigvocab")
    words = [f"w{i}" for i in range(2_000_000)] + ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]  # ids 2,000,000+
    (folder / "vocab.txt").write_text("\n".join(words) + "\n")
    r = _run(["bench", str(folder), "--text", "builtin", "--variants", "torch,fused", *FAST])
    _refused(r, "past the model's embedding table")
    assert "index out of range" not in r["stderr"]


def test_a_modules_json_of_strings_is_refused_before_the_tune(cache, hf_folder, tmp_path):
    folder = _folder_with(hf_folder, tmp_path, "st")
    (folder / "modules.json").write_text(json.dumps(["0_Transformer", "1_Pooling"]))
    out = tmp_path / "tuned"
    r = _run(["tune", str(folder), "-o", str(out), *FAST])
    _refused(r, "modules.json")
    assert r["seconds"] < 60 and not out.exists()


# ── the new surfaces ─────────────────────────────────────────────────────────────────────────────────
def test_a_ctranslate2_whose_native_library_is_broken_is_a_skip_line(cache, tmp_path):
    fake = tmp_path / "site" / "ctranslate2"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text('raise OSError("libctranslate2.so.4: cannot open shared object file")\n')
    path = os.pathsep.join([str(fake.parent), os.environ.get("PYTHONPATH", "")])
    r = _run(["bench", TINY, "--variants", "fused,ctranslate2", *FAST], env={"PYTHONPATH": path})
    assert r["rc"] == 0 and not any(w in r["stderr"] for w in NEVER), r["stderr"][-1500:]
    assert "ctranslate2 skipped: CTranslate2 is installed but does not load (OSError" in r["stderr"]
    assert any(line.startswith("fused ") for line in r["stdout"].splitlines()), r["stdout"]


def test_gpu_story_checks_its_output_before_the_gpu(tmp_path):
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_story.py"
    (tmp_path / "a-file").write_text("mine")
    outs = ["/proc/workbench-story", str(tmp_path / "a-file" / "story")]
    if os.geteuid() != 0:  # root writes into a read-only folder all the same
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o555)
        outs.append(str(ro / "story"))
    for out in outs:
        proc = subprocess.run([sys.executable, str(script), "--out", out], capture_output=True, text=True,
                              timeout=120)
        r = {"rc": proc.returncode, "stderr": proc.stderr, "seconds": 0}
        _refused(r, "--out")
        assert "GPU" not in r["stderr"], r["stderr"]
    assert (tmp_path / "a-file").read_text() == "mine"


def test_bench_on_cuda_without_a_gpu_refuses_before_exporting(tmp_path):
    from workbench.ort.gpu import gpu_status

    if gpu_status()[0]:
        pytest.skip("this machine has a usable GPU")
    fresh = tmp_path / "cache"
    r = _run(["bench", TINY, "--provider", "cuda", *FAST], env={"WORKBENCH_CACHE": str(fresh)})
    _refused(r, "needs a GPU")
    assert not (fresh / "models").exists(), "nothing was exported"


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP"])
def test_lab_takes_jupyterlab_down_with_it(tmp_path, sig):
    pytest.importorskip("jupyterlab")
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "rt"), "JUPYTER_CONFIG_DIR": str(tmp_path / "cfg")}
    with socket.socket() as s:  # a free port, so that a JupyterLab of the user's is never the one found
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    lab = subprocess.Popen([*CLI, "lab", "--no-browser", "--folder", str(tmp_path / "nb"), "--port", str(port)],
                           env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    servers: list[psutil.Process] = []
    kids: list[psutil.Process] = []
    try:
        t0 = time.time()
        while time.time() - t0 < 90 and not servers:
            kids = psutil.Process(lab.pid).children(recursive=True)
            servers = [k for k in kids if _listening(k)]
            time.sleep(0.3)
        assert servers, "JupyterLab did not start"
        lab.send_signal(getattr(signal, sig))
        lab.wait(timeout=60)
    finally:
        if lab.poll() is None:
            lab.kill()
    gone, alive = psutil.wait_procs(kids, timeout=30)
    for p in alive:  # never leave one behind, whatever the test found
        p.kill()
    assert not alive, f"left running after {sig}: {[p.pid for p in alive]}"
    assert lab.returncode == 128 + getattr(signal, sig)
    assert not any(w in lab.stderr.read() for w in NEVER)


def _listening(p: psutil.Process) -> bool:
    try:
        return any(c.status == psutil.CONN_LISTEN for c in p.net_connections(kind="tcp"))
    except (psutil.Error, OSError):
        return False


# ── round 5's leftover ───────────────────────────────────────────────────────────────────────────────
def test_transformers_load_report_stays_off_the_terminal(tmp_path):
    """CTranslate2's converter loads the model through transformers, which prints a seven-line LOAD REPORT."""
    pytest.importorskip("ctranslate2")
    r = _run(["bench", TINY, "--variants", "ctranslate2", *FAST], env={"WORKBENCH_CACHE": str(tmp_path / "c")})
    assert r["rc"] == 0, r["stderr"][-1500:]
    assert "LOAD REPORT" not in r["stderr"] and "MISSING" not in r["stderr"], r["stderr"]
