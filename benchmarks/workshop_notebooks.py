"""How long each workshop notebook takes from a prepared folder (``workbench prepare``), offline.

Usage:
    python benchmarks/workshop_notebooks.py --cache PREPARED_DIR [--model bert-base] [--notebooks 01,02,03,04,05,06]
                                            [--copy]

Runs each notebook start to finish with nbclient (``tests/notebook_runner.py``, the runner the tests use)
on ``WORKBENCH_CACHE=PREPARED_DIR``, with the hub switched off (``HF_HUB_OFFLINE=1``), and prints the
seconds per notebook and in all (and the CPU seconds it used, which load from other work does not move
much), with the CPU, its instruction sets and the load average before and after.
``--copy`` first copies the folder to a temporary "laptop" folder (as a facilitator copies it), so the
prepared folder itself stays as it was.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NAMES = {"01": "01_fusion_tour", "02": "02_profiling_cpu_gpu", "03": "03_workshop_exercises",
         "04": "04_exporter_matrix", "05": "05_real_text", "06": "06_write_a_fusion"}


def _child_cpu() -> float:
    """CPU seconds (user + system) of the finished kernels and the processes they waited for: what the
    notebook cost, whatever else shares the machine (on 2 idle cores it takes at least half this long)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache", required=True, help="a folder made by `workbench prepare`")
    ap.add_argument("--model", default="bert-base")
    ap.add_argument("--notebooks", default="01,02,03,04,05,06")
    ap.add_argument("--copy", action="store_true", help="run on a temporary copy of the folder")
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT / "tests"))
    sys.path.insert(0, str(ROOT))
    import notebook_runner
    from workbench.ort.machine import describe_machine, machine_line
    from workbench.workshop.prepare import check_prepared

    cache = Path(a.cache).resolve()
    problems = check_prepared(cache)
    if a.copy:
        laptop = Path(tempfile.mkdtemp(prefix="wb-laptop-")) / "cache"
        shutil.copytree(cache, laptop)
        cache = laptop
    os.environ.update(WORKBENCH_CACHE=str(cache), WORKBENCH_NOTEBOOK_MODEL=a.model, HF_HUB_OFFLINE="1",
                      TRANSFORMERS_OFFLINE="1", PYTHONPATH=os.pathsep.join(
                          [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    os.environ.pop("WORKBENCH_TIMELINE_CACHE", None)
    out = {"model": a.model, "cache": str(cache), "prepared_problems": problems,
           "machine": machine_line(describe_machine(threads=2)), "load_before": os.getloadavg(), "notebooks": {}}
    total = 0.0
    for key in a.notebooks.split(","):
        name = NAMES[key.strip()]
        with tempfile.TemporaryDirectory(prefix="wb-nb-") as cwd:
            t0, c0 = time.perf_counter(), _child_cpu()
            _, text = notebook_runner.run(name, Path(cwd), timeout=1200)
            s, cpu = time.perf_counter() - t0, _child_cpu() - c0
        total += s
        out["notebooks"][name] = {"seconds": round(s, 1), "cpu_s": round(cpu, 1), "load_after": [round(x, 2) for x in os.getloadavg()],
                                  "checks": [line for line in text.splitlines() if "Solution:" in line]}
        print(f"{name}: {s:.1f} s, {cpu:.1f} CPU s (load {os.getloadavg()[0]:.2f})", file=sys.stderr, flush=True)
    out["total_s"] = round(total, 1)
    out["load_after"] = os.getloadavg()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
