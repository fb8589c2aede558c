"""The terminal's streams, made safe once at each start, for every command alike.

The conventions of a well-kept command-line tool: a name the terminal's encoding cannot show is written with
escapes (``PYTHONIOENCODING=ascii``, a folder named in bytes that are no UTF-8), never a
``UnicodeEncodeError``; a reader that leaves early (``workbench report | head``) ends the command quietly,
as SIGPIPE ends a C tool (exit 141, no message, no "Exception ignored" at exit); a closed standard output
(``>&-``) is refused before any work, since the command's result would have nowhere to go and its file
descriptor would be handed to the next file opened.
"""

from __future__ import annotations

import os
import select
import sys

from ..errors import OutputPathError

#: 128 + SIGPIPE: what a shell reports for a writer whose reader left.
EXIT_PIPE_CLOSED = 141


def _fill(fd: int) -> None:
    """Put /dev/null on a closed descriptor, so that no file opened later takes its number."""
    null = os.open(os.devnull, os.O_RDWR)
    if null != fd:
        os.dup2(null, fd)
        os.close(null)


def prepare() -> None:
    """Escapes for what the streams' encoding lacks; a closed stderr writes nowhere; a closed stdout is refused.

    Raises:
        OutputPathError: standard output is closed.
    """
    if sys.stderr is None:
        _fill(2)
        sys.stderr = open(os.devnull, "w")  # its one-line errors go nowhere, as the user asked; exit codes still say
    for stream in (sys.stdout, sys.stderr):
        if stream is not None and hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    if sys.stdout is None:
        _fill(1)
        sys.stdout = open(os.devnull, "w")
        raise OutputPathError("standard output is closed (>&-): the command's output would have nowhere to go; "
                              "redirect it to a file or to /dev/null instead")


def stdout_reader_gone() -> bool:
    """Whether standard output is a pipe or socket whose reader has left (it polls as an error, at once)."""
    try:
        fd = sys.__stdout__.fileno() if sys.__stdout__ is not None else 1
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):
        return False


def detach_terminal() -> None:
    """The terminal is gone (SIGHUP): standard output and error write to /dev/null from now on (a write to a
    closed terminal fails with EIO)."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        for fd in (1, 2):
            os.dup2(null, fd)
        os.close(null)
    except OSError:
        pass


def end_quietly() -> int:
    """After the reader of standard output left: point it at /dev/null (the buffered rest is dropped at exit
    without "Exception ignored") and return the exit status a shell gives a writer stopped by SIGPIPE."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.__stdout__.fileno() if sys.__stdout__ is not None else 1)
        os.close(null)
    except (OSError, ValueError):
        pass
    return EXIT_PIPE_CLOSED
