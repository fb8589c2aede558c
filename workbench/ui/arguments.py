"""The app's argument checks: a wrong argument to a public method raises at the call, in the cell that made it.

The convention of the libraries a notebook user knows (pandas, ipywidgets, transformers): one line naming the
argument, the value given and what is allowed, as :class:`~workbench.errors.ConfigError` (a ``ValueError``) for a
value out of range or not allowed, or :class:`~workbench.errors.ConfigTypeError` (a ``TypeError``) for a value of
the wrong kind. Nothing is clamped, coerced or replaced by a default. :class:`~workbench.ui.app.Workbench`, the
controller and the feature objects call one function here per kind of argument before they change any state;
what fails later, in background work, goes to ``app.error`` instead.
"""

from __future__ import annotations

import math
import numbers
import os
from pathlib import Path
from typing import Iterable, Sequence

from ..errors import ConfigError, ConfigTypeError


def shown(value, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters (a long list or text stays one short line)."""
    r = " ".join(repr(value).split())
    return r if len(r) <= limit else r[:limit - 3] + "..."


def listed(allowed: Iterable) -> str:
    """``'a', 'b' or 'c'``: the allowed values, as a sentence."""
    items = [repr(a) for a in allowed]
    if len(items) < 2:
        return "".join(items) or "(none)"
    return f"{', '.join(items[:-1])} or {items[-1]}"


def flag(name: str, value) -> bool:
    """``value`` if it is True or False (``"yes"``, 1 and None are refused: no truthiness)."""
    if isinstance(value, bool):
        return value
    raise ConfigTypeError(f"{name} must be True or False, not {shown(value)}")


def optional_flag(name: str, value) -> bool | None:
    """``None``, True or False."""
    return None if value is None else flag(name, value)


def choice(name: str, value, allowed: Iterable[str], *, what: str | None = None) -> str:
    """``value`` if it is one of the ``allowed`` strings; the refusal lists them, or says ``what`` they are
    where they are too many to list (the nodes drawn in a pane)."""
    allowed = tuple(allowed)
    wanted = what or f"one of {listed(allowed)}"
    if not isinstance(value, str):
        raise ConfigTypeError(f"{name} must be {wanted}, not {shown(value)}")
    if value not in allowed:
        raise ConfigError(f"{name} must be {wanted}, not {value!r}")
    return value


def whole(name: str, value, low: int, high: int | None = None, *, note: str = "") -> int:
    """``value`` as an int if it is a whole number (not a bool, not a float) from ``low`` to ``high``;
    ``note`` is added to the refusal of a number out of range (what the range is)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ConfigTypeError(f"{name} must be a whole number, not {shown(value)}")
    value = int(value)
    if value < low or (high is not None and value > high):
        if high is not None and high < low:
            raise ConfigError(f"{name} {value} is out of range: there is nothing to choose from{note}")
        span = f"from {low} to {high}" if high is not None else f"at least {low}"
        raise ConfigError(f"{name} must be a whole number {span}{note}, not {value}")
    return value


def seconds(name: str, value, *, optional: bool = False, positive: bool = False) -> float | None:
    """A finite number of seconds, 0 or more (more than 0 with ``positive``); None too with ``optional``."""
    if value is None and optional:
        return None
    need = ("a positive number of seconds" if positive else "a number of seconds, 0 or more") + \
        (", or None (no limit)" if optional else "")
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ConfigTypeError(f"{name} must be {need}, not {shown(value)}")
    v = float(value)
    if not math.isfinite(v) or v < 0 or (positive and v == 0):
        raise ConfigError(f"{name} must be {need}, not {shown(value)}")
    return v


def text(name: str, value, *, optional: bool = False) -> str | None:
    """A non-empty string; None too with ``optional``."""
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise ConfigTypeError(f"{name} must be a string, not {shown(value)}")
    if not value.strip():
        raise ConfigError(f"{name} is empty" + ("; give None for the default" if optional else ""))
    return value


def path(name: str, value, *, optional: bool = False) -> Path | None:
    """A file system path (a string or ``os.PathLike``, not empty), with ``~`` expanded; None too with
    ``optional`` (the caller's default: an empty string is not taken for it)."""
    if value is None and optional:
        return None
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):
        none = " or None" if optional else ""
        raise ConfigTypeError(f"{name} must be a path (a string or a pathlib.Path){none}, not {shown(value)}")
    if not value.strip():
        raise ConfigError(f"{name} is an empty path" + ("; give None for the default" if optional else ""))
    return Path(value).expanduser()


def _sequence(name: str, value, what: str) -> list:
    """``value`` as a list if it is a list or tuple (a lone string is refused: it is not a list of one)."""
    if isinstance(value, str):
        raise ConfigTypeError(f"{name} must be a list of {what}s, not a string: write [{value!r}]")
    if not isinstance(value, (list, tuple)):
        raise ConfigTypeError(f"{name} must be a list of {what}s, not {shown(value)}")
    return list(value)


def names(name: str, value, allowed: Sequence[str] | None, *, what: str, empty_ok: bool = False) -> list[str] | None:
    """None (the caller's default), or a list of strings each one of ``allowed`` (None: any, nothing to check
    them against yet); an empty list is refused unless ``empty_ok`` (it is not taken for the default)."""
    if value is None:
        return None
    items = _sequence(name, value, what)
    if not items and not empty_ok:
        raise ConfigError(f"{name} is empty: give at least one {what}, or None for the default")
    for i, v in enumerate(items):
        if not isinstance(v, str):
            raise ConfigTypeError(f"{name}[{i}] must be a {what} (a string), not {shown(v)}")
        if allowed is not None and v not in allowed:
            raise ConfigError(f"{name}[{i}] {v!r} is not a {what} here; choose from {listed(allowed)}")
    return items


def indices(name: str, value, count: int | None, *, what: str, note: str = "") -> list[int] | None:
    """None (the caller's default), or a non-empty list of whole numbers from 0 to ``count - 1`` (``count``
    None: any from 0, nothing to check them against yet)."""
    if value is None:
        return None
    items = _sequence(name, value, what)
    if not items:
        raise ConfigError(f"{name} is empty: give at least one {what}, or None for the default")
    high = None if count is None else count - 1
    return [whole(f"{name}[{i}]", v, 0, high, note=note) for i, v in enumerate(items)]


def sentences(name: str, value, least: int) -> list[str] | None:
    """None (the built-in set), a list of sentences, or one string with a sentence per line: at least
    ``least`` different sentences, each a non-empty string (a check of fewer says nothing)."""
    if value is None:
        return None
    if isinstance(value, str):
        items = [line.strip() for line in value.splitlines() if line.strip()]
    else:
        items = _sequence(name, value, "sentence")
        for i, v in enumerate(items):
            if not isinstance(v, str):
                raise ConfigTypeError(f"{name}[{i}] must be a sentence (a string), not {shown(v)}")
            if not v.strip():
                raise ConfigError(f"{name}[{i}] is an empty sentence")
    if not items:
        raise ConfigError(f"{name} is empty: give at least {least} different sentences, or None for the built-in set")
    distinct = len(set(items))
    if distinct < least:
        raise ConfigError(f"{name} holds {distinct} different sentence{'' if distinct == 1 else 's'}; checking "
                          f"answers needs at least {least} (a list of strings, or text with one per line), or "
                          f"None for the built-in set")
    return items


__all__ = ["shown", "listed", "flag", "optional_flag", "choice", "whole", "seconds", "text", "path", "names",
           "indices", "sentences"]
