"""How long a model takes to show, each case in a fresh process: reopened, first open, empty cache.

Usage: python benchmarks/open_time.py [--model bert-base] [--runs 3] [--empty-cache] [--out FILE.md]

Cases (each run is a new Python process; "wall" is the whole process, start and exit included,
"in process" is from the first workbench import to the graph being there):

* Timeline only, reopened: ``Timeline(export, auto).run()`` and keeping the engine auto chose,
  with this export's snapshots persisted on disk (``fusion/timeline_store.py``).
* Timeline only, first open: the same with the export cached but an empty timeline store.
* App, (a) reopened: ``Workbench(MODEL, background=False).wait()``, timeline persisted.
* App, (b) export cached, no persisted timeline: a fresh, empty timeline store
  (``WORKBENCH_TIMELINE_CACHE`` pointed at a new temporary folder).
* App, (c) empty cache (``--empty-cache``, slow): a new ``WORKBENCH_CACHE``; the export runs too.

The persisted store for the reopened cases is made first by one process that runs the timeline
and its background warm-up of every single toggle to the end (what a session left open does),
under ``$WORKBENCH_CACHE`` (default ``~/.cache/bert-fusion-workbench``) in a private timeline
folder. The CPU and the load average are printed with the figures: the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_TIMELINE = """
import json, sys, time
t0 = time.perf_counter()
from workbench.config import ExportConfig, FusionPlan
from workbench.export import export
from workbench.fusion import Timeline
from workbench.fusion.scheduler import FusionScheduler
from workbench.models import resolve
t1 = time.perf_counter()
src = resolve(sys.argv[1])
res = export(src, ExportConfig())
t2 = time.perf_counter()
tl = Timeline(res.path, FusionPlan(engine="auto"), num_layers=src.num_layers, num_heads=src.num_heads,
              hidden_size=src.hidden_size)
tl.run()
tl.set_plan(FusionPlan(engine=tl.engine_used))
t3 = time.perf_counter()
steps_run, warm = tl.steps_run, None
if len(sys.argv) > 2:  # prime: warm every single toggle up, to the end
    sch = FusionScheduler(tl)
    sch.start_warming()
    sch.wait_warm(float(sys.argv[2]))
    warm = {"done": not sch.warming and sch.warm_error is None, "s": sch.warm_s, "error": sch.warm_error,
            "steps_run": tl.steps_run - steps_run}
    sch.stop_warming()
print("RESULT " + json.dumps({"in_process": t3 - t0, "imports": t1 - t0, "export_lookup": t2 - t1,
                              "timeline": t3 - t2, "steps_run": steps_run, "nodes": tl.final.nodes,
                              "engine": tl.engine_used, "warm": warm}))
"""

_APP = """
import json, sys, time
t0 = time.perf_counter()
from workbench import Workbench
w = Workbench(sys.argv[1], background=False).wait()
t1 = time.perf_counter()
print("RESULT " + json.dumps({"in_process": t1 - t0, "timings": w.timings, "error": w.error,
                              "steps_run": w.timeline.steps_run if w.timeline else None,
                              "nodes": w.snapshots[-1].nodes if w.snapshots else None}))
"""


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
        else:
            name = "unknown CPU"
        flags = Path("/proc/cpuinfo").read_text()
        isa = [f for f in ("avx2", "avx512f", "avx512_vnni", "amx_tile") if f" {f}" in flags]
        return f"{name}, {os.cpu_count()} cores, {'/'.join(isa) or 'no AVX2'}"
    except OSError:
        import platform

        return platform.processor() or platform.machine()


def load() -> str:
    try:
        return " ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "?"


def run(code: str, args: list[str], env: dict) -> dict:
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", code, *args], env=env, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if p.returncode != 0 or line is None:
        raise SystemExit(f"case failed (exit {p.returncode}):\n{p.stderr[-3000:]}")
    out = json.loads(line[len("RESULT "):])
    out["wall"] = wall
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="bert-base")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--empty-cache", action="store_true", help="also case (c): a new, empty cache (slow)")
    ap.add_argument("--warm-timeout", type=float, default=900, help="seconds the priming warm-up may take")
    ap.add_argument("--out", help="also write the table (markdown) to this file")
    args = ap.parse_args()

    base_env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    base_env.pop("WORKBENCH_PERSIST_TIMELINE", None)
    tmp = Path(tempfile.mkdtemp(prefix="open-time-"))
    store = tmp / "timelines-primed"
    lines = [f"# Open time: {args.model}", "",
             f"CPU: {cpu_name()}; Python {sys.version.split()[0]}; load average (1/5/15 min) at start: {load()}",
             f"Command: python benchmarks/open_time.py --model {args.model} --runs {args.runs}"
             + (" --empty-cache" if args.empty_cache else ""), ""]
    print("\n".join(lines), flush=True)

    env = {**base_env, "WORKBENCH_TIMELINE_CACHE": str(store)}
    prime = run(_TIMELINE, [args.model, str(args.warm_timeout)], env)  # also exports the model if needed
    note = (f"primed in one process: timeline {prime['timeline']:.1f} s ({prime['steps_run']} engine steps), "
            f"warm-up of every single toggle {'done in %.0f s' % prime['warm']['s'] if prime['warm']['done'] else 'NOT finished: ' + str(prime['warm'])}"
            f" ({prime['warm']['steps_run']} more engine steps)")
    print(note, flush=True)
    lines += [note, ""]

    rows = []

    def case(name: str, code: str, env_for, extra=lambda r: "") -> None:
        results = []
        for i in range(args.runs):
            r = run(code, [args.model], env_for(i))
            results.append(r)
            print(f"  {name} run {i + 1}: wall {r['wall']:.2f} s, in process {r['in_process']:.2f} s, "
                  f"engine steps {r.get('steps_run')}, load {load()}", flush=True)
        walls = [r["wall"] for r in results]
        inproc = [r["in_process"] for r in results]
        rows.append((name, len(results), statistics.median(walls), min(walls), statistics.median(inproc),
                     min(inproc), results[-1].get("steps_run"), extra(results[-1])))

    def fresh_store(i: int) -> dict:
        return {**base_env, "WORKBENCH_TIMELINE_CACHE": str(Path(tempfile.mkdtemp(dir=tmp, prefix="fresh-")))}

    def timeline_extra(r):
        return f"imports {r['imports']:.2f} s, timeline {r['timeline']:.2f} s"

    def app_extra(r):
        t = r.get("timings") or {}
        return ", ".join(f"{k} {v:.2f} s" for k, v in t.items())

    case("Timeline only, reopened", _TIMELINE, lambda i: env, timeline_extra)
    case("Timeline only, first open (export cached)", _TIMELINE, fresh_store, timeline_extra)
    case("App (a) reopened", _APP, lambda i: env, app_extra)
    case("App (b) export cached, no persisted timeline", _APP, fresh_store, app_extra)
    if args.empty_cache:
        def empty(i):
            return {**base_env, "WORKBENCH_CACHE": str(Path(tempfile.mkdtemp(dir=tmp, prefix="cache-"))),
                    "WORKBENCH_TIMELINE_CACHE": str(Path(tempfile.mkdtemp(dir=tmp, prefix="fresh-")))}
        case("App (c) empty cache", _APP, empty, app_extra)

    table = ["| case | runs | wall median (s) | wall min (s) | in process median (s) | in process min (s) "
             "| engine steps run | phases (last run) |", "|---|---|---|---|---|---|---|---|"]
    for name, n, wm, wmin, im, imin, steps, extra in rows:
        table.append(f"| {name} | {n} | {wm:.2f} | {wmin:.2f} | {im:.2f} | {imin:.2f} | {steps} | {extra} |")
    tail = ["", f"Load average at the end: {load()}. Wall = the whole fresh process (interpreter start and exit "
                 "included); in process = from the first workbench import until the graph is there."]
    print("\n".join([""] + table + tail))
    if args.out:
        from workbench.cache.atomic import atomic_write_text

        atomic_write_text(Path(args.out), "\n".join(lines + table + tail) + "\n")
    import shutil

    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
