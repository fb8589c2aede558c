"""``workbench lab``: open JupyterLab on the workshop notebooks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ..errors import WorkbenchError


def notebooks_dir() -> Path:
    """The notebooks folder: next to the package in a checkout, else ./notebooks."""
    here = Path(__file__).resolve().parents[2] / "notebooks"
    if here.is_dir():
        return here
    cwd = Path.cwd() / "notebooks"
    if cwd.is_dir():
        return cwd
    raise WorkbenchError("no notebooks folder found: run `workbench lab` from the project checkout")


def lab_command(port: int | None = None, browser: bool = True, folder: Path | None = None) -> list[str]:
    cmd = [sys.executable, "-m", "jupyterlab", f"--ServerApp.root_dir={folder or notebooks_dir()}",
           "--ip=127.0.0.1"]
    if port:
        cmd.append(f"--port={port}")
    if not browser:
        cmd.append("--no-browser")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")  # containers run as root; JupyterLab refuses without this
    return cmd


def register(sub) -> None:
    p = sub.add_parser("lab", help="open JupyterLab on the workshop notebooks",
                       description="Start JupyterLab (bound to 127.0.0.1) in the notebooks folder. Without a browser, "
                                   "use `workbench report` instead.")
    p.add_argument("--port", type=int, default=None, help="port (default: JupyterLab's, 8888 or the next free one)")
    p.add_argument("--no-browser", action="store_true", help="do not open a browser; print the URL")
    p.add_argument("--print-command", action="store_true", help=argparse_suppress())
    p.set_defaults(func=run)


def argparse_suppress():
    import argparse

    return argparse.SUPPRESS


def run(args) -> int:
    if args.port is not None and not 1 <= args.port <= 65535:
        raise WorkbenchError(f"port must be between 1 and 65535, not {args.port}")
    cmd = lab_command(args.port, not args.no_browser)
    if args.print_command:
        print(" ".join(cmd))
        return 0
    try:
        return subprocess.call(cmd, cwd=notebooks_dir(), env=dict(os.environ))
    except KeyboardInterrupt:
        return 0
