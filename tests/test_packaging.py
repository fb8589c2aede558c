"""pyproject.toml and environment.yml must describe the same environment."""

import re
import tomllib
from pathlib import Path

import yaml  # pyyaml comes with jupyter

ROOT = Path(__file__).resolve().parents[1]


def _name(req: str) -> str:
    return re.split(r"[<>=!~;\[ ]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _pyproject():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    project = data["project"]
    deps = {_name(d): d.replace(" ", "") for d in project["dependencies"]}
    test = {_name(d): d.replace(" ", "") for d in project["optional-dependencies"]["test"]}
    return data, deps, test


def _conda_pip():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    deps = env["dependencies"]
    assert "python>=3.11,<3.14" in deps, "environment.yml must allow the same Pythons as pyproject (3.11 to 3.13)"
    pip = next(d["pip"] for d in deps if isinstance(d, dict) and "pip" in d)
    return {_name(d): d.replace(" ", "") for d in pip if not d.startswith("-e")}, pip


def test_environment_yml_lists_the_same_packages_and_versions_as_pyproject():
    _, deps, test = _pyproject()
    conda, _ = _conda_pip()
    data, _, _ = _pyproject()
    extras = {_name(d): d.replace(" ", "") for group in data["project"]["optional-dependencies"].values() for d in group}
    assert conda == {**deps, **test, **extras}


def test_environment_yml_installs_the_project_itself():
    _, pip = _conda_pip()
    assert "-e ." in pip


def test_required_packages_are_declared():
    data, deps, test = _pyproject()
    for pkg in ("jupyterlab", "ipywidgets", "onnx", "onnxruntime-gpu", "onnxscript", "onnx-ir",
                "netron", "plotly", "transformers", "torch"):
        assert pkg in deps, pkg
    # Both runtimes are declared, each behind a marker (tests/test_install_matrix.py checks that
    # exactly one is chosen on every platform: they clash when installed together).
    assert "onnxruntime" in deps and ";" in deps["onnxruntime"] and ";" in deps["onnxruntime-gpu"]
    assert data["project"]["scripts"]["workbench"] == "workbench.cli:main"
    assert "pytest" in test
