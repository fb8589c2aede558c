"""Where the workshop notebooks are, and the participant's own copy of them.

A checkout has them in the top-level ``notebooks/`` folder next to the package; a wheel carries them inside
the package (``workbench/notebooks/``, copied there by ``setup.py``'s build step). ``workbench lab`` copies
them into a working folder the first time (a participant's edits are never overwritten) and opens JupyterLab
there; ``workbench prepare`` reads the same list to know which notebooks exist.
"""

from __future__ import annotations

import filecmp
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import WorkbenchError

#: The working folder ``workbench lab`` uses when none is given (relative to the current folder).
DEFAULT_FOLDER = "workbench-notebooks"


def notebooks_dir() -> Path:
    """The notebooks that came with this install: a checkout's ``notebooks/``, else the wheel's copy."""
    package = Path(__file__).resolve().parents[1]
    for folder in (package.parent / "notebooks", package / "notebooks"):
        if folder.is_dir() and any(folder.glob("*.ipynb")):
            return folder
    raise WorkbenchError(f"this install of the workbench has no notebooks (looked in {package.parent / 'notebooks'} "
                         f"and {package / 'notebooks'}): reinstall it from a wheel or a checkout")


def notebook_names() -> list[str]:
    """The notebooks' file names, in order ("01_fusion_tour.ipynb", ...)."""
    return sorted(p.name for p in notebooks_dir().glob("*.ipynb"))


@dataclass
class Copied:
    """What :func:`copy_notebooks` did in ``folder``: copied, kept as they were, kept although they differ."""

    folder: Path
    copied: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)

    def line(self) -> str:
        parts = [f"{len(self.copied)} notebook{'s' if len(self.copied) != 1 else ''} copied to {self.folder}"]
        if self.kept:
            parts.append(f"{len(self.kept)} already there")
        if self.changed:
            parts.append(f"kept your edits of {', '.join(self.changed)} (delete a file to get this version's)")
        return "; ".join(parts)


def copy_notebooks(folder: str | Path | None = None) -> Copied:
    """Copy the notebooks into ``folder`` (default ./workbench-notebooks), never over a file already there.

    Raises:
        WorkbenchError: no notebooks in this install, or ``folder`` is a file or cannot be made.
    """
    src = notebooks_dir()
    dest = Path(folder if folder is not None else DEFAULT_FOLDER).expanduser()
    if dest.exists() and not dest.is_dir():
        raise WorkbenchError(f"{dest} is a file, not a folder for the notebooks")
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise WorkbenchError(f"cannot make the notebooks folder {dest}: {e.strerror or e}") from None
    out = Copied(dest.resolve())
    if src.resolve() == out.folder:  # the checkout's own folder: nothing to copy
        out.kept = notebook_names()
        return out
    for nb in sorted(src.glob("*.ipynb")):
        target = dest / nb.name
        if target.exists():
            (out.kept if filecmp.cmp(nb, target, shallow=False) else out.changed).append(nb.name)
            continue
        try:
            shutil.copyfile(nb, target)
        except OSError as e:
            raise WorkbenchError(f"cannot copy {nb.name} to {dest}: {e.strerror or e}") from None
        out.copied.append(nb.name)
    return out


__all__ = ["notebooks_dir", "notebook_names", "copy_notebooks", "Copied", "DEFAULT_FOLDER"]
