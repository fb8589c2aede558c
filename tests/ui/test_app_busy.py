"""The app names a busy machine beside its latency figures: two CPU hogs started beside the app's benchmark."""

from __future__ import annotations

import os
import subprocess
import sys
import time


def test_the_latency_panel_says_the_machine_was_busy(tiny_export):
    from workbench.ui.app import Workbench

    tiny_export()  # warm the cache
    cores = sorted(os.sched_getaffinity(0))[:2]
    old = os.sched_getaffinity(0)
    app = Workbench("bert-tiny", background=False)
    hogs = []
    try:
        os.sched_setaffinity(0, cores)  # the app and its benchmark worker on the hogs' two cores
        hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"],
                                 preexec_fn=lambda: os.sched_setaffinity(0, cores)) for _ in range(2)]
        time.sleep(1.0)
        app.profile_panel.w_runs.value = 10
        app.profile_panel.w_seq.value = 16
        app.run_benchmark()
        app.wait_benchmark(600)
    finally:
        for h in hogs:
            h.kill()
        for h in hogs:
            h.wait(10)
        os.sched_setaffinity(0, old)
    try:
        assert app.error is None, app.error
        assert app.bench_result.machine_load.busy()
        words = app.bench_result.machine_load.words()
        assert words.startswith("the machine was busy while measuring (other processes used")
        assert words in app.model_bar.status.value  # the status line, beside "benchmark done: ..."
        assert "the machine was busy while measuring" in app.profile_panel.w_results.value  # under the latency table
    finally:
        app.close()
