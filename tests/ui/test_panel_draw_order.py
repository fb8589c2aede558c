"""Panels draw in the order the state was written, on the kernel's event loop (a real tornado IOLoop here).

A background job writes the benchmark's results and then the status line that says they are done; the status
panel must not show "done" before the results' panel has drawn them (the browser test waits for the status line
only), even when the status panel already had a draw due from an earlier status.
"""

from __future__ import annotations

import threading

import ipywidgets as W
from tornado.ioloop import IOLoop

from workbench.ui.panel import Panel
from workbench.ui.state import AppState, Status


class _Results(Panel):
    def __init__(self, state, loop):
        super().__init__(state, None, loop=loop)
        self.widget = W.HTML()
        self.draws = 0
        self.watch("bench_result", self.draw)
        self.watch("series", self.draw)

    def draw(self) -> None:
        self.draws += 1
        self.widget.value = f"<table>{self.state.bench_result}</table>"


class _StatusLine(Panel):
    def __init__(self, state, loop):
        super().__init__(state, None, loop=loop)
        self.widget = W.HTML()
        self.watch("status", lambda: setattr(self.widget, "value", self.state.status.text))


def _run_on_loop(job) -> list:
    """Run ``job(state)`` on a thread while the loop is busy (drawing something else), then let the loop draw;
    returns what the widgets showed, in order."""
    loop = IOLoop()
    try:
        state = AppState()
        results, status = _Results(state, loop), _StatusLine(state, loop)
        shown: list = []
        results.widget.observe(lambda ch: shown.append(("results", ch["new"])), "value")
        status.widget.observe(lambda ch: shown.append(("status", ch["new"])), "value")

        def busy() -> None:  # the loop is drawing a plot while the job writes
            t = threading.Thread(target=job, args=(state,))
            t.start()
            t.join(30)
            loop.add_callback(loop.stop)

        loop.add_callback(busy)
        loop.start()
        assert results.errors == [] and status.errors == []
        shown.append(("draws", results.draws))
        return shown
    finally:
        loop.close(all_fds=False)


def test_the_status_that_says_done_is_drawn_after_the_results():
    def job(state) -> None:
        state.status = Status("benchmarking 2 variants", "busy")  # a status draw is now due
        state.bench_result = "unfused 1.00 ms, fused 0.50 ms"
        state.status = Status("benchmark done: unfused 1.00 ms, fused 0.50 ms", "ok")

    shown = _run_on_loop(job)
    assert shown == [("results", "<table>unfused 1.00 ms, fused 0.50 ms</table>"),
                     ("status", "benchmark done: unfused 1.00 ms, fused 0.50 ms"), ("draws", 1)]


def test_a_burst_of_changes_is_drawn_once_with_the_last_value():
    def job(state) -> None:
        for i in range(200):
            state.series = {"fused": tuple(range(i + 1))}
        state.bench_result = "done"

    shown = _run_on_loop(job)
    assert shown == [("results", "<table>done</table>"), ("draws", 1)]
