"""What every panel shares: the state it observes, the controller it writes through, a draw lock.

A panel (``<feature>/panel.py``, beside the feature object that writes its part of the state) observes the app
state and updates its own widgets; it writes only through the controller and its features, never imports another
panel or a compute module."""

from __future__ import annotations

import html
import threading
from copy import deepcopy
from typing import Any, Callable

from ..concurrency import new_lock
from ..errors import WorkbenchError


def esc(x: Any) -> str:
    return html.escape(str(x), quote=True)


def badge(ok: bool | None, text: str, title: str = "") -> str:
    """A small coloured label: grey (not known), green (ok) or red (not ok)."""
    cls = "wb-none" if ok is None else ("wb-ok" if ok else "wb-bad")
    return f"<span class='wb-badge {cls}' title='{esc(title)}'>{esc(text)}</span>"


def sync_figure(fig) -> None:
    """Make a FigureWidget's stored state what Python holds, so any view drawn later shows it.

    plotly's FigureWidget (an anywidget) applies Python's edits as one-off messages, and its browser
    model listens for them only once its script has loaded; edits that arrive before are lost, and
    the view is then drawn from the stored ``_widget_data`` / ``_widget_layout`` of the figure's
    creation (measured: the before pane empty and three latency plots at plotly's default 700 px in
    a ~570 px column). plotly re-syncs these itself only when a figure is displayed on its own, not
    inside a Box, so every panel calls this after drawing a figure.
    """
    fig._widget_data = deepcopy(fig._data)
    fig._widget_layout = deepcopy(fig._layout_obj._props)


def kernel_loop():
    """The running kernel's main-thread event loop, or None outside a kernel (scripts, tests)."""
    try:
        from IPython import get_ipython

        return getattr(getattr(get_ipython(), "kernel", None), "io_loop", None)
    except Exception:
        return None


class Draws:
    """The draws due on one event loop, in the order of their latest state change, run there in batches.

    Panels share it (:func:`draws_on`), so the app's panels draw in the order the state was written: a status line
    that says a result is ready is never drawn before the result's own panel. A draw asked for again while it is
    due moves behind the changes written meanwhile (it reads the latest state when it runs, once); each batch
    runs what was due when it started, so a stream of changes never starves the loop or a draw.
    """

    def __init__(self, loop):
        self.loop = loop
        self._lock = new_lock()
        self._due: dict[Any, Callable[[], None]] = {}  # key -> draw, in the order of the latest change
        self._scheduled = False

    def add(self, key, draw: Callable[[], None]) -> None:
        """Draw ``draw`` on the loop, after every draw asked for before; ``key`` names it (asked again: moved)."""
        with self._lock:
            self._due.pop(key, None)
            self._due[key] = draw
            if self._scheduled:
                return
            self._scheduled = True
        try:
            self.loop.add_callback(self.run_due)
        except RuntimeError:  # the kernel is shutting down: nothing to draw on
            with self._lock:
                self._due.clear()
                self._scheduled = False

    def run_due(self) -> None:
        """Run the draws due now, oldest change first (on the loop's thread)."""
        with self._lock:
            batch, self._due, self._scheduled = list(self._due.values()), {}, False
        for draw in batch:
            draw()


_DRAWS: dict[int, Draws] = {}


def draws_on(loop) -> Draws:
    """The one :class:`Draws` of ``loop`` (the kernel's event loop), shared by every panel drawing there."""
    d = _DRAWS.get(id(loop))
    if d is None or d.loop is not loop:
        d = _DRAWS[id(loop)] = Draws(loop)
    return d


class Panel:
    """A panel: ``widget`` is what the app places; ``draw_*`` methods run when the state changes.

    Args:
        state: the app state (observed, never written here).
        controller: where user actions go (anything with the controller's methods; tests pass a stub).
        loop: the event loop widgets are drawn on (default: the kernel's; None outside a kernel, where a
            draw runs at once).
    """

    widget: Any = None

    def __init__(self, state, controller, *, loop=None):
        self.state = state
        self.controller = controller
        self._lock = new_lock(reentrant=True)  # state changes arrive from background jobs too
        self._loop = loop if loop is not None else kernel_loop()
        self._draws = draws_on(self._loop) if self._loop is not None else None
        self.errors: list[str] = []  # drawing errors on the kernel's event loop

    def watch(self, names: str | list[str], fn: Callable[[], None]) -> None:
        """Call ``fn`` whenever any of these state traits changes.

        In a kernel, widgets are only touched on its main thread: a change made by a background job
        queues ``fn`` there (once, however many changes arrive before it runs), because plotly's
        FigureWidget applies the browser's layout replies on the main thread and loses properties
        (a figure's width) when a job edits the same figure meanwhile. Every panel's draws go through one
        queue (:class:`Draws`), in the order of the changes: a job that writes a result and then a status line
        saying it is done has the result drawn first. A change on the main thread draws at once, after the
        draws already due. Outside a kernel ``fn`` runs at once.
        """
        key = (id(self), fn)

        def run() -> None:
            with self._lock:
                try:
                    fn()
                except Exception:  # the event loop would swallow it: keep it where a test can read it
                    import traceback

                    self.errors.append(traceback.format_exc())

        def handler(_change) -> None:
            if self._draws is not None and threading.current_thread() is not threading.main_thread():
                self._draws.add(key, run)
                return
            if self._draws is not None:
                self._draws.run_due()  # what earlier changes asked for is drawn first
            with self._lock:
                fn()

        self.state.observe(handler, names=names)

    def act(self, action: Callable[..., Any], *args: Any, **kw: Any) -> None:
        """Hand a click or a widget's change to the controller. What the API raises at the call for a wrong
        argument (a stale node id, a spec that is not YAML) goes to the status line here: a widget's callback has
        no cell to raise in."""
        try:
            action(*args, **kw)
        except WorkbenchError as e:
            self.controller.say(str(e), "error")

    @staticmethod
    def silently(widget, name: str, value, flag: list) -> None:
        """Set a widget's value without its observer calling the controller back."""
        if getattr(widget, name) == value:
            return
        flag.append(True)
        try:
            setattr(widget, name, value)
        finally:
            flag.pop()
