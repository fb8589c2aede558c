"""``workbench`` command line: export, fuse, bench, matrix, report, lab.

Every subcommand is a thin layer over the package's functions. A
:class:`~workbench.errors.WorkbenchError` becomes one line on stderr and exit
status 2; a traceback is shown only with ``--debug``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys

from .. import __version__
from ..errors import WorkbenchError

#: Subcommand modules, each with ``register(subparsers)``.
COMMANDS = ("export", "fuse", "matrix", "bench", "ablate", "report", "sweep", "lab", "prepare")
EXIT_BAD_INPUT = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2 (argparse's own convention too)
        self.print_usage(sys.stderr)
        self.exit(EXIT_BAD_INPUT, f"workbench: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="workbench", description="See, switch and measure ONNX Runtime's BERT fusions.")
    parser.add_argument("--version", action="version", version=f"workbench {__version__}")
    parser.add_argument("--debug", action="store_true", help="show full tracebacks")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMANDS:
        try:
            mod = importlib.import_module(f".{name}", __name__)
        except ModuleNotFoundError as e:
            if e.name == f"{__name__}.{name}":
                continue  # command not built yet
            raise
        mod.register(sub)
    return parser


def print_json(obj) -> None:
    json.dump(obj, sys.stdout, indent=1, default=str)
    sys.stdout.write("\n")


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_BAD_INPUT
    try:
        rc = args.func(args)
        return int(rc or 0)
    except WorkbenchError as e:
        if args.debug:
            raise
        print(f"workbench: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("workbench: interrupted", file=sys.stderr)
        return 130
    except MemoryError:
        if args.debug:
            raise
        print("workbench: error: out of memory", file=sys.stderr)
        return EXIT_BAD_INPUT
