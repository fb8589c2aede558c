"""One build step on top of pyproject.toml: the wheel carries the notebooks.

The notebooks live in the top-level ``notebooks/`` folder (where a checkout, the tests and JupyterLab use
them); package data cannot reach outside the package, and a symlink or a second copy in git would drift.
So building copies ``notebooks/*.ipynb`` into ``workbench/notebooks/`` of the build (wheel and sdist-built
wheel alike; ``MANIFEST.in`` puts the folder in the sdist). ``workbench.workshop.notebooks`` finds them in
either place.
"""

from pathlib import Path
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


class BuildWithNotebooks(build_py):
    """``build_py``, then the notebooks copied into the built package."""

    def run(self):
        super().run()
        src = HERE / "notebooks"
        if self.editable_mode or not src.is_dir():  # an editable install reads the checkout's own folder
            return
        dst = Path(self.build_lib) / "workbench" / "notebooks"
        dst.mkdir(parents=True, exist_ok=True)
        for nb in sorted(src.glob("*.ipynb")):
            shutil.copyfile(nb, dst / nb.name)


setup(cmdclass={"build_py": BuildWithNotebooks})
