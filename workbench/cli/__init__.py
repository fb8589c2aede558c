"""``workbench`` command line: export, fuse, bench, matrix, ablate, tune, report, sweep, lab.

Every subcommand is a thin layer over the package's functions. Its module imports the compute modules it
runs inside the command's function, not at its head: the parser is built from every command's ``register()``
at each start, so ``workbench --version`` and ``--help`` load none of them (0.07 s cold, not 0.25 s). A
:class:`~workbench.errors.WorkbenchError` becomes one line on stderr and exit
status 2; a traceback is shown only with ``--debug``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import sys
import warnings

from .. import __version__
from ..cache.root import cache_root, check_cache_settings
from ..errors import WorkbenchError
from ..limits import limit_reached, limit_set, limit_words
from . import streams

#: Subcommand modules, each with ``register(subparsers)``.
COMMANDS = ("export", "fuse", "matrix", "bench", "ablate", "tune", "report", "sweep", "lab", "prepare", "cache")
EXIT_BAD_INPUT = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2 (argparse's own convention too); the usage is one --help away
        self.exit(EXIT_BAD_INPUT, f"workbench: error: {message} (see: {self.prog} --help)\n")


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


def _cache_bytes(args) -> int | None:
    """The cache's size before a command that may store in it (None for ``cache`` itself or no cache yet)."""
    if args.command in ("cache", "lab", "prepare"):  # prepare fills a folder of its own and sums it up itself
        return None
    try:
        from ..cache.admin import total_bytes
        from ..cache.root import cache_root

        return total_bytes(cache_root(write=False))  # reading it makes nothing: the command may use another
    except (WorkbenchError, OSError):
        return None  # an unusable cache is the command's own one-line error


def _check_settings() -> None:
    """Settings read from the environment, checked before any work (one line naming the variable)."""
    from ..cache.admin import max_bytes_setting
    from ..checks import max_model_gb
    from ..measure.fleet.spec import sweep_limits
    from ..text import max_sentences

    for check in (check_cache_settings, max_bytes_setting, max_model_gb, max_sentences, sweep_limits):
        check()


def _say_repairs() -> None:
    """Name the damaged cache files this command found (each was removed and what read it built again)."""
    from ..cache.integrity import repairs

    found = repairs()
    if found:
        more = f" and {len(found) - 1} more" if len(found) > 1 else ""
        print(f"note: the cache held a damaged file, removed and built again: {found[0]}{more}", file=sys.stderr)


def _after_command(args, before: int | None) -> None:
    """Say when a command stored more than 100 MB, and keep the cache under WORKBENCH_CACHE_MAX_GB."""
    _say_repairs()
    if before is None:
        return
    from ..cache.admin import REPORT_BYTES, enforce_limit, human, total_bytes

    root = cache_root(write=False)
    grown = total_bytes(root) - before
    if grown > REPORT_BYTES:
        print(f"note: this command stored {human(grown)} in the cache {root} (see: workbench cache)", file=sys.stderr)
    res = enforce_limit(root)
    if res and res["removed"]:
        print(f"note: removed {len(res['removed'])} least recently used cache entries ({human(res['freed_bytes'])}) "
              f"to stay under WORKBENCH_CACHE_MAX_GB", file=sys.stderr)


_DROP_LIBRARY_LOGS = logging.NullHandler()


def _quiet_libraries(debug: bool) -> None:
    """Library log lines (onnx-ir's "Skipping constant folding ...", transformers' load reports, ...) stay off the
    terminal unless --debug:
    with no handler anywhere, Python prints every warning a library logs; a handler that drops them is
    installed at the root instead (the workbench says what matters in its own lines)."""
    root = logging.getLogger()
    if debug:
        root.removeHandler(_DROP_LIBRARY_LOGS)
        return
    if not root.handlers:
        root.addHandler(_DROP_LIBRARY_LOGS)
    # transformers logs through a handler of its own (its "LOAD REPORT" table when CTranslate2's converter loads
    # a model): read when it is imported, here and in the benchmark worker; a value the user set stays
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    # tqdm's monitor thread, refused at a task limit: the workbench says what that limit stops, in its own line
    warnings.filterwarnings("ignore", message="tqdm:disabling monitor support")


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # a bad option (its one line printed: exit 2), --help or --version (exit 0)
        return e.code if isinstance(e.code, int) else EXIT_BAD_INPUT
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_BAD_INPUT
    _quiet_libraries(args.debug)
    try:
        streams.prepare()
        _check_settings()
        before = _cache_bytes(args)
        rc = args.func(args)
        _after_command(args, before)
        return int(rc or 0)
    except WorkbenchError as e:
        if args.debug:
            raise
        print(f"workbench: error: {_at_limit(e, args, in_force=True) or e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:
        if args.debug or not streams.stdout_reader_gone():
            raise
        return streams.end_quietly()  # `| head`: the reader has what it wanted
    except KeyboardInterrupt:
        print("workbench: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # MemoryError included
        if args.debug:
            raise
        if _interrupted(e):
            print("workbench: interrupted", file=sys.stderr)  # Ctrl-C inside a C extension's import, wrapped
            return 130
        line = _at_limit(e, args)
        if line is None:
            raise
        print(f"workbench: error: {line}", file=sys.stderr)
        return EXIT_BAD_INPUT


def _at_limit(e: BaseException, args, *, in_force: bool = False) -> str | None:
    """The one line for a failure at a resource limit (memory, file size, tasks), or None when it is none.

    A library's own words for it ("std::bad_alloc", "Failed to write external initializers", "can't start new
    thread") name neither the limit nor what to do. With ``in_force``, only a limit really set here counts (a
    :class:`WorkbenchError` already says its one line otherwise).
    """
    kind = limit_reached(e)
    if kind is None or (in_force and not limit_set(kind)):
        return None
    model = getattr(args, "model", None)
    doing = f"`workbench {args.command}{f' {model}' if model else ''}`"
    target = getattr(args, "output", None) or getattr(args, "out", None)
    return limit_words(kind, doing, str(target) if target else None)


def _interrupted(e: BaseException) -> bool:
    """Whether ``e`` was raised from a Ctrl-C (a C extension interrupted while it loads raises ImportError
    "initialization failed" from the KeyboardInterrupt)."""
    seen = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, KeyboardInterrupt):
            return True
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return False
