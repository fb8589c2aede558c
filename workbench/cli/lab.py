"""``workbench lab``: copy the workshop notebooks into a working folder (once) and open JupyterLab there."""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import subprocess
import sys
from pathlib import Path

from ..errors import WorkbenchError
from ..workshop.notebooks import DEFAULT_FOLDER, copy_notebooks, notebooks_dir
from . import common, streams


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
    p = sub.add_parser("lab", help="open JupyterLab on your copy of the workshop notebooks",
                       description="Copy the workshop notebooks into a working folder (the first time; a notebook "
                                   "you edited is never overwritten) and start JupyterLab there, bound to "
                                   "127.0.0.1. Without a browser, use `workbench report` instead.")
    p.add_argument("--folder", metavar="DIR", default=DEFAULT_FOLDER,
                   help=f"your notebooks folder (default: ./{DEFAULT_FOLDER})")
    p.add_argument("--port", type=common.whole(1, 65_535), default=None, help="port (default: JupyterLab's, 8888 or the next free one)")
    p.add_argument("--no-browser", action="store_true", help="do not open a browser; print the URL")
    p.add_argument("--print-command", action="store_true", help=argparse_suppress())
    p.set_defaults(func=run)


def argparse_suppress():
    return argparse.SUPPRESS


def run(args) -> int:
    if args.port is not None and not 1 <= args.port <= 65535:
        raise WorkbenchError(f"port must be between 1 and 65535, not {args.port}")
    copied = copy_notebooks(args.folder)
    print(copied.line(), file=sys.stderr)
    cmd = lab_command(args.port, not args.no_browser, folder=copied.folder)
    if args.print_command:
        print(" ".join(cmd))
        return 0
    return run_until_interrupted(cmd, copied.folder)


#: How long JupyterLab gets to shut down (its kernels included) once Ctrl-C asked it to.
STOP_S = 20.0
#: prctl(2)'s option that names the signal a child gets when its parent dies (linux/prctl.h).
PR_SET_PDEATHSIG = 1


class _Signalled(Exception):
    """SIGTERM or SIGHUP reached ``workbench lab`` (a ``kill``, a closed terminal)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _raise_signalled(signum, frame):
    raise _Signalled(signum)


def _die_with_parent() -> None:
    """In the child, before JupyterLab starts (Linux): the kernel sends it SIGTERM when ``workbench lab`` dies,
    even by SIGKILL, so no server is ever left re-parented to PID 1."""
    parent = os.getppid()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # the parent died before the line above
        os._exit(1)


def run_until_interrupted(cmd: list[str], cwd: Path) -> int:
    """Run JupyterLab in a session of its own, so a Ctrl-C reaches only this process (a child still importing
    would print a KeyboardInterrupt traceback); on Ctrl-C, SIGTERM or SIGHUP it is asked to stop (SIGTERM: a
    clean shutdown) and given :data:`STOP_S`, then killed (a second Ctrl-C kills it at once); then "workbench:
    interrupted" (Ctrl-C) or the signal's exit status, 128 + its number (SIGHUP: the terminal is gone, nothing
    more is written to it). A session of its own does not get the terminal's SIGHUP, so it is passed on here,
    and on Linux the kernel stops it if this process dies any other way."""
    posix = os.name == "posix"
    linux = sys.platform.startswith("linux")
    proc = subprocess.Popen(cmd, cwd=cwd, env=dict(os.environ), start_new_session=posix,
                            preexec_fn=_die_with_parent if linux else None,
                            creationflags=0 if posix else getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0))
    caught = [s for s in (getattr(signal, "SIGTERM", None), getattr(signal, "SIGHUP", None)) if s is not None]
    saved = {s: signal.signal(s, _raise_signalled) for s in caught}
    try:
        return proc.wait()
    except (KeyboardInterrupt, _Signalled) as e:
        if getattr(e, "signum", None) == getattr(signal, "SIGHUP", None):
            streams.detach_terminal()
        _stop(proc)
        if isinstance(e, KeyboardInterrupt):
            raise
        return 128 + e.signum
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)


def _stop(proc) -> None:
    """Ask JupyterLab to stop (it shuts its kernels down), then kill it after :data:`STOP_S`."""
    proc.terminate()
    try:
        proc.wait(timeout=STOP_S)
    except (subprocess.TimeoutExpired, KeyboardInterrupt, _Signalled):
        proc.kill()
        proc.wait(timeout=5)
