"""Toggle latency as the app sees it: click → timeline → redrawn graph and table (Python side).

Usage: python benchmarks/ui_toggle.py [MODEL] [--step attention]

Builds the app headless (the same object a notebook shows), waits for the first run and the
background warm-up, then switches the step off and on again and prints each time. The
browser's own draw time for a bert-tiny toggle is measured by tests/browser/test_lab.py
(test-output/browser/timings.txt); drawing a bert-base layer view is in graph_render.py.
"""

from __future__ import annotations

import argparse
import json
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?", default="bert-base")
    ap.add_argument("--step", default="attention")
    a = ap.parse_args()
    from workbench.ui.app import Workbench

    t0 = time.perf_counter()
    app = Workbench(a.model, background=False)
    first = time.perf_counter() - t0
    t1 = time.perf_counter()
    app.timeline.wait_warm(timeout=300)
    warm = time.perf_counter() - t1
    out = {"model": a.model, "engine": app.timeline.engine_used, "first_load_s": round(first, 2),
           "warm_up_s": round(warm, 2), "toggles": []}
    for on in (False, True, False, True):
        t = time.perf_counter()
        app.toggle(a.step, on)
        app.timeline.wait_warm(timeout=300)  # the next toggle starts from a warmed plan, as after a pause
        out["toggles"].append({"step": a.step, "on": on, "click_to_redrawn_s": round(app.timings["toggle_s"] +
                                                                                       app.timings["refresh_s"], 3),
                               "with_rewarm_s": round(time.perf_counter() - t, 2)})
    app.close()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
