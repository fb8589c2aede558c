"""Toggle latency as the user sees it: click → timeline → redrawn graph and table.

Usage:
    python benchmarks/ui_toggle.py [MODEL] [--step attention]            # Python side, headless app
    python benchmarks/ui_toggle.py [MODEL] --browser [--step attention]  # JupyterLab + Chromium

Headless: builds the app (the same object a notebook shows), waits for the first run and the
background warm-up, switches the step off and on again and prints each time (timeline + redraw
in Python).

``--browser``: starts JupyterLab on a free port (as tests/browser/test_lab.py does), opens
``01_fusion_tour`` in Debian's headless Chromium with the notebooks on MODEL, runs all cells, then
clicks the step's checkbox and times, in the page, from the click event to the first frame painted
after the status line, the counts table and the "after" graph's title have all changed (the test
driver's own checks before a click are not counted: they added 50-100 ms to each figure before). The first clicks come right after the notebook finished (the app may still be
precomputing toggles in the background, as for a user who clicks at once); the rest after the
app says every single toggle is precomputed. Prints JSON.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def headless(model: str, step: str) -> dict:
    from workbench.ui.app import Workbench

    t0 = time.perf_counter()
    app = Workbench(model, background=False)
    first = time.perf_counter() - t0
    t1 = time.perf_counter()
    app.controller.scheduler.wait_warm(timeout=600)
    warm = time.perf_counter() - t1
    out = {"model": model, "engine": app.timeline.engine_used, "first_load_s": round(first, 2),
           "warm_up_s": round(warm, 2), "toggles": []}
    for on in (False, True, False, True):
        t = time.perf_counter()
        app.toggle(step, on)
        app.controller.scheduler.wait_warm(timeout=600)  # the next toggle starts from a warmed plan, as after a pause
        out["toggles"].append({"step": step, "on": on, "click_to_redrawn_s": round(app.timings["toggle_s"] +
                                                                                   app.timings["refresh_s"], 3),
                               "with_rewarm_s": round(time.perf_counter() - t, 2)})
    app.close()
    return out


def browser(model: str, step: str, clicks: int = 4, width: int = 1280) -> dict:
    spec = importlib.util.spec_from_file_location("test_lab", ROOT / "tests" / "browser" / "test_lab.py")
    lab_mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lab_mod)
    from playwright.sync_api import sync_playwright

    from workbench.ort.machine import describe_machine, machine_line

    out = {"model": model, "step": step, "browser": f"Debian chromium, headless, {width}x1100",
           "machine": machine_line(describe_machine(check_cuda=False)),
           "measure": "click event to the first frame painted after status, counts and graph changed"}
    with tempfile.TemporaryDirectory(prefix="workbench-ui-bench-") as tmp, \
            lab_mod.jupyter_lab(Path(tmp) / "lab", model) as lab, sync_playwright() as p:
        b = p.chromium.launch(executable_path=lab_mod.CHROMIUM, args=lab_mod.ARGS, headless=True)
        try:
            page = b.new_page(viewport={"width": width, "height": 1100})
            page.set_default_timeout(120_000)
            t0 = time.perf_counter()
            lab_mod.open_and_run(page, lab, timeout_s=900)
            out["notebook_s"] = round(time.perf_counter() - t0, 1)
            page.locator(".wb-rows").first.scroll_into_view_if_needed()
            out["at_once_s"] = [round(lab_mod.click_toggle(page, step, timeout_s=300), 2) for _ in range(2)]
            t1 = time.perf_counter()
            page.wait_for_function(
                "() => (document.querySelector('.wb-warm') || {}).innerText?.includes('precomputed')",
                timeout=900_000)
            out["warm_wait_s"] = round(time.perf_counter() - t1, 1)
            warmed = []
            for _ in range(clicks):
                warmed.append(round(lab_mod.click_toggle(page, step, timeout_s=300), 2))
                # a user pauses between clicks; the app re-warms for the new plan meanwhile
                page.wait_for_function(
                    "() => (document.querySelector('.wb-warm') || {}).innerText?.includes('precomputed')",
                    timeout=900_000)
            out["after_warm_up_s"] = warmed
            out["after_warm_up_median_s"] = statistics.median(warmed)
            shots = ROOT / "test-output" / "browser"
            shots.mkdir(parents=True, exist_ok=True)
            page.locator(".wb-graph-panel").first.scroll_into_view_if_needed()
            page.screenshot(path=str(shots / f"ui_toggle_{model}.png"))
        finally:
            b.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?", default="bert-base")
    ap.add_argument("--step", default="attention")
    ap.add_argument("--browser", action="store_true", help="time the click in JupyterLab + headless Chromium")
    ap.add_argument("--clicks", type=int, default=4)
    ap.add_argument("--width", type=int, default=1280, help="the browser window's width in px (the targets' 1280)")
    a = ap.parse_args()
    out = browser(a.model, a.step, a.clicks, a.width) if a.browser else headless(a.model, a.step)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
