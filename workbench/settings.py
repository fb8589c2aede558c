"""Numbers a user types: on the command line or in an environment variable, read once, checked once.

``float("nan")``, ``float("inf")`` and ``float("1e400")`` are all valid Python floats, and every one of them
broke a limit somewhere (a NaN compares false with everything, an infinity overflows ``int()``). Every
number the workbench reads from the user goes through :func:`number`, which says in one line which
setting is wrong and what it must be.
"""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path

from .errors import ConfigError
from .path_checks import not_utf8, shown, too_long

#: Bytes of the names the workbench writes inside a folder a setting names (the cache's deepest entry and a
#: writer's temporary name beside it): a folder too long for them is refused when it is read, not at a write.
FOLDER_RESERVE = 256


def number(raw: str | float | int, name: str, *, minimum: float | None = None, maximum: float | None = None,
           integer: bool = False) -> float | int:
    """``raw`` as a finite number within bounds.

    Args:
        raw: the text the user gave (or a number).
        name: how the user gave it (``--max-gb``, ``WORKBENCH_CACHE_MAX_GB``), for the message.
        minimum, maximum: inclusive bounds.
        integer: a whole number is required.

    Raises:
        ConfigError: one line naming ``name``, the value and what it must be.
    """
    kind = "a whole number" if integer else "a number"
    bounds = (f" from {_fmt(minimum)} to {_fmt(maximum)}" if minimum is not None and maximum is not None
              else f" of at least {_fmt(minimum)}" if minimum is not None
              else f" of at most {_fmt(maximum)}" if maximum is not None else "")
    want = f"{name} must be {kind}{bounds}".strip()
    text = str(raw).strip()
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise ConfigError(f"{want}, not {text[:40]!r}") from None
    if not math.isfinite(value):
        raise ConfigError(f"{want}, not {text[:40]!r} (not a finite number)")
    if integer:
        if value != int(value):
            raise ConfigError(f"{want}, not {text[:40]!r}")
        value = int(value)
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise ConfigError(f"{want}, not {text[:40]!r}")
    return value


def env_number(env: str, default=None, **bounds) -> float | int | None:
    """The environment variable ``env`` read as :func:`number` (``default`` when unset or empty)."""
    raw = os.environ.get(env)
    if raw is None or not raw.strip():
        return default
    return number(raw, env, **bounds)


def env_folder(env: str) -> Path | None:
    """The folder the environment variable ``env`` names (None when unset or empty), checked before any use.

    Raises:
        ConfigError: one line naming ``env``: its path is too long for the file system (with room for the
            workbench's names inside), or its name is no UTF-8.
    """
    raw = os.environ.get(env)
    if raw is None or not raw.strip():
        return None
    path = Path(raw).expanduser()
    problem = too_long(path, reserve=FOLDER_RESERVE)
    fix = "a shorter path"
    if problem is None and not_utf8(path) is not None:
        problem, fix = "its name is not valid UTF-8", "a folder named in UTF-8"
    if problem is not None:
        raise ConfigError(f"{env} names a folder the workbench cannot use ({shown(path)}): {problem}; "
                          f"point {env} at {fix}")
    return path


def arg_number(**bounds):
    """An argparse ``type`` for :func:`number` (argparse prints its usage line and the one-line reason)."""

    def parse(text: str):
        try:
            return number(text, "", **bounds)  # argparse names the option: "argument --seq: must be ..."
        except ConfigError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    return parse


def _fmt(v: float) -> str:
    return f"{v:,.0f}" if float(v).is_integer() else f"{v:g}"


__all__ = ["number", "env_number", "env_folder", "arg_number", "FOLDER_RESERVE"]
