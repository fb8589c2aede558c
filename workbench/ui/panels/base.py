"""What every panel shares: the state it observes, the controller it writes through, a draw lock."""

from __future__ import annotations

import html
import threading
from typing import Any, Callable


def esc(x: Any) -> str:
    return html.escape(str(x), quote=True)


def badge(ok: bool | None, text: str, title: str = "") -> str:
    """A small coloured label: grey (not known), green (ok) or red (not ok)."""
    cls = "wb-none" if ok is None else ("wb-ok" if ok else "wb-bad")
    return f"<span class='wb-badge {cls}' title='{esc(title)}'>{esc(text)}</span>"


class Panel:
    """A panel: ``widget`` is what the app places; ``draw_*`` methods run when the state changes.

    Args:
        state: the app state (observed, never written here).
        controller: where user actions go (anything with the controller's methods; tests pass a stub).
    """

    widget: Any = None

    def __init__(self, state, controller):
        self.state = state
        self.controller = controller
        self._lock = threading.RLock()  # state changes arrive from background jobs too

    def watch(self, names: str | list[str], fn: Callable[[], None]) -> None:
        """Call ``fn`` (under the panel's lock) whenever any of these state traits changes."""

        def handler(_change) -> None:
            with self._lock:
                fn()

        self.state.observe(handler, names=names)

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
