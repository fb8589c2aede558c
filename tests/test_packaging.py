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


def test_a_wheel_carries_the_notebooks_and_lab_copies_them_without_overwriting_edits(tmp_path):
    """Built as a package index serves it and installed into a fresh environment: `workbench lab --folder`
    copies the notebooks there (once: a participant's edit survives a second run) and nbformat opens them."""
    import json
    import os
    import subprocess
    import sys
    import zipfile

    import shutil

    nb_names = sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb"))
    src = tmp_path / "src"  # built from a copy: the build leaves build/ and *.egg-info where it runs
    for part in ("workbench", "notebooks"):
        shutil.copytree(ROOT / part, src / part, ignore=shutil.ignore_patterns("__pycache__", ".ipynb_checkpoints"))
    for part in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md"):
        shutil.copy(ROOT / part, src / part)
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation",
                            "-w", str(tmp_path / "dist"), "-q"], capture_output=True, text=True, timeout=300,
                           cwd=tmp_path, env={**os.environ, "PIP_NO_INDEX": "1"})
    assert build.returncode == 0, build.stderr[-2000:]
    wheel = next((tmp_path / "dist").glob("bert_fusion_workbench-*.whl"))
    assert sorted(n.rsplit("/", 1)[1] for n in zipfile.ZipFile(wheel).namelist()
                  if n.startswith("workbench/notebooks/")) == nb_names
    # A fresh environment: the wheel alone in its site-packages, the dependencies read from this one (a path
    # in a .pth file, so this environment's editable install of the checkout is not picked up).
    env_dir = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True, timeout=120)
    py = env_dir / "bin" / "python"
    site = next(env_dir.glob("lib/python3*/site-packages"))
    deps = [p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()]
    (site / "zz_deps.pth").write_text("\n".join(deps) + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    inst = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "--no-index",
                           "-q", str(wheel)], capture_output=True, text=True, timeout=300, env=env)
    assert inst.returncode == 0, inst.stderr[-2000:]
    work = tmp_path / "participant"

    def lab():
        return subprocess.run([str(py), "-m", "workbench.cli", "lab", "--folder", str(work), "--print-command",
                               "--no-browser"], capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)

    first = lab()
    assert first.returncode == 0, first.stderr[-2000:]
    assert f"--ServerApp.root_dir={work.resolve()}" in first.stdout
    assert f"{len(nb_names)} notebooks copied" in first.stderr
    where = subprocess.run([str(py), "-c", "import workbench; print(workbench.__file__)"], capture_output=True,
                           text=True, env=env, cwd=tmp_path).stdout
    assert where.startswith(str(site)), where  # the installed wheel ran, not this checkout
    import nbformat

    for name in nb_names:
        nb = nbformat.read(work / name, as_version=4)
        assert nb.cells and not any(c.get("outputs") for c in nb.cells if c.cell_type == "code")
    edited = work / nb_names[0]
    doc = json.loads(edited.read_text())
    doc["cells"][0]["source"] = ["my notes"]
    edited.write_text(json.dumps(doc))
    second = lab()
    assert second.returncode == 0 and "0 notebooks copied" in second.stderr and nb_names[0] in second.stderr
    assert json.loads(edited.read_text())["cells"][0]["source"] == ["my notes"]
