"""The project's own errors: each carries one line a person can act on.

The CLI turns any :class:`WorkbenchError` into that line on stderr and exit
status 2; the notebook app shows it inside the app. Anything else is a bug.
"""

from __future__ import annotations


def first_line(e: BaseException) -> str:
    """The first non-empty line of an exception's message (native errors run to many lines)."""
    for line in str(e).splitlines():
        if line.strip():
            return line.strip()
    return type(e).__name__


class WorkbenchError(Exception):
    """An expected failure with a one-line, user-facing message."""

    def __init__(self, message: str):
        # Keep it one line: multi-line native messages are folded.
        super().__init__(" ".join(str(message).split()))


class ModelSourceError(WorkbenchError):
    """The model name, folder or hub id cannot be turned into a model."""


class ExportError(WorkbenchError):
    """torch.onnx could not export the model with the asked settings."""


class BrokenModelError(ExportError):
    """A model whose exported outputs are not finite, or differ from PyTorch's beyond tolerance: never fused,
    measured or reported as fine."""


class ModelIOError(WorkbenchError):
    """An ONNX file cannot be read or written safely."""


class FusionError(WorkbenchError):
    """A fusion engine could not run on the model."""


class RuntimeUnavailableError(WorkbenchError):
    """An execution provider (e.g. CUDA) was asked for but cannot be used."""


def availability(check, *args) -> tuple[bool, str]:
    """``(True, "")`` when ``check(*args)`` runs, ``(False, its one line)`` when it raises
    :class:`RuntimeUnavailableError`: the ``(ok, why)`` every engine's and provider's status gives."""
    try:
        check(*args)
    except RuntimeUnavailableError as e:
        return False, str(e)
    return True, ""


class BenchmarkError(WorkbenchError):
    """A benchmark could not run (bad shape, out of memory, worker died)."""


class OutputPathError(WorkbenchError):
    """An output path (a file, a folder, the cache) cannot be written."""


class ConfigError(WorkbenchError, ValueError):
    """A setting is out of range or not one of the allowed values."""


class ConfigTypeError(WorkbenchError, TypeError):
    """A setting or argument of the wrong type (``"yes"`` for a flag, a string where a list is asked for):
    a ``TypeError`` too, as Python's own would be."""


class CacheDamagedError(WorkbenchError):
    """A cache entry whose files are not what the workbench wrote (a weights file that does not match its name,
    is missing or is no file) and that cannot be cleared here: never used, named in one line with what to do."""
