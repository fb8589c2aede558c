"""``%workbench MODEL [--exporter E] [--attention A] [--opset N] [--engine E]``: show the app."""

from __future__ import annotations

import argparse
import shlex

from ..config import ATTENTIONS, ENGINES, EXPORTERS
from ..errors import ConfigError, WorkbenchError
from .app import Workbench
from .compat import error_html


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # never SystemExit inside a kernel
        raise ConfigError(f"%workbench: {message}")


def parse_line(line: str) -> dict:
    """The magic's arguments as keyword arguments for :class:`~workbench.ui.app.Workbench`."""
    p = _Parser(prog="%workbench", add_help=False)
    p.add_argument("model", nargs="?", default="bert-base")
    p.add_argument("--exporter", choices=EXPORTERS, default="torchscript")
    p.add_argument("--attention", choices=ATTENTIONS, default="eager")
    p.add_argument("--opset", type=int, default=None)
    p.add_argument("--engine", choices=ENGINES, default="auto")
    try:
        words = shlex.split(line or "")
    except ValueError as e:
        raise ConfigError(f"%workbench: {e}") from e
    a = p.parse_args(words)
    return {"source": a.model, "exporter": a.exporter, "attention": a.attention, "opset": a.opset, "engine": a.engine}


def workbench_magic(line: str = ""):
    """Show the BERT Fusion Workbench for MODEL (default bert-base, random weights)."""
    from IPython.display import HTML


    try:
        return Workbench(**parse_line(line))
    except WorkbenchError as e:
        return HTML(error_html(str(e)))


def register_magic(ipython) -> None:
    """Register ``%workbench`` on an IPython shell (``%load_ext workbench`` calls this)."""
    ipython.register_magic_function(workbench_magic, magic_kind="line", magic_name="workbench")
