"""Installs where workshop laptops are: the dependency markers pick one ONNX Runtime per platform,
and the package index has a wheel of every native package for each platform and Python.

The index check resolves metadata only (``pip install --dry-run --report``; PyPI serves wheel
metadata apart from the wheel), so it costs seconds, not gigabytes; it is skipped when the index is
unreachable.
"""
from __future__ import annotations

import functools
import json
import subprocess
import sys
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]

#: platform → (marker environment, the pip --platform tag, the runtime it must get)
PLATFORMS = {
    "linux-x86_64": ({"sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64"},
                     "manylinux_2_28_x86_64", "onnxruntime-gpu"),
    "windows-x86_64": ({"sys_platform": "win32", "platform_system": "Windows", "platform_machine": "AMD64"},
                       "win_amd64", "onnxruntime-gpu"),
    "macos-arm64": ({"sys_platform": "darwin", "platform_system": "Darwin", "platform_machine": "arm64"},
                    "macosx_14_0_arm64", "onnxruntime"),
    "macos-x86_64": ({"sys_platform": "darwin", "platform_system": "Darwin", "platform_machine": "x86_64"},
                     "macosx_14_0_x86_64", "onnxruntime"),
    "linux-aarch64": ({"sys_platform": "linux", "platform_system": "Linux", "platform_machine": "aarch64"},
                      "manylinux_2_28_aarch64", "onnxruntime"),
}
PYTHONS = ["3.11", "3.12", "3.13"]
RUNTIMES = {"onnxruntime", "onnxruntime-gpu"}
#: Dependencies with compiled code: the ones a platform can lack a wheel for.
NATIVE = {"torch", "onnxruntime", "onnxruntime-gpu", "onnx", "numpy", "pandas", "safetensors", "tokenizers"}


@functools.cache
def _requirements() -> tuple[Requirement, ...]:
    """Parsed once, in the main thread: CPython 3.11's ``ast.parse`` (which packaging uses for markers)
    is not thread-safe ("AST constructor recursion depth mismatch", seen in this test's pool)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(d) for d in project["dependencies"]]
    # tokenizers comes in through transformers; it is native, so it is checked too.
    return tuple(reqs + [Requirement("tokenizers>=0.22")])


def _selected(env: dict, python: str) -> list[Requirement]:
    full = {"python_version": python, "python_full_version": python + ".0", "implementation_name": "cpython",
            "platform_python_implementation": "CPython", "os_name": "nt" if env["sys_platform"] == "win32" else "posix",
            **env}
    return [r for r in _requirements() if r.marker is None or r.marker.evaluate(full)]


def test_requires_python_admits_311_to_313():
    spec = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    from packaging.specifiers import SpecifierSet

    for v in PYTHONS:
        assert v + ".0" in SpecifierSet(spec), (v, spec)


@pytest.mark.parametrize("python", PYTHONS)
@pytest.mark.parametrize("platform", sorted(PLATFORMS))
def test_exactly_one_runtime_per_platform(platform, python):
    env, _, expected = PLATFORMS[platform]
    runtimes = [r.name for r in _selected(env, python) if r.name in RUNTIMES]
    assert runtimes == [expected], f"{platform} / Python {python}: {runtimes}"


def test_torch_is_required_wherever_pytorch_builds_it():
    for platform, (env, _, _) in PLATFORMS.items():
        names = {r.name for r in _selected(env, "3.12")}
        assert ("torch" in names) == (platform != "macos-x86_64"), platform


def _resolve(platform: str, python: str) -> tuple[str, str, list[str] | str]:
    env, tag, _ = PLATFORMS[platform]
    tags = [tag]
    if tag.startswith("manylinux_2_28_"):  # pip does not widen a given manylinux tag to older glibc levels
        arch = tag.removeprefix("manylinux_2_28_")
        tags += [f"manylinux_2_17_{arch}", f"manylinux2014_{arch}"]
    reqs = [str(r).split(";")[0] for r in _selected(env, python) if r.name in NATIVE]
    report = ROOT / ".pytest_cache" / f"install-{platform}-{python}.json"
    report.parent.mkdir(exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--no-deps", "--ignore-installed",
           "--only-binary=:all:", *[a for t in tags for a in ("--platform", t)], "--python-version", python, "--implementation", "cp",
           "--target", str(report.parent / "never-written"), "--report", str(report), *reqs]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        return platform, python, proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "pip failed"
    got = [i["download_info"]["url"].rsplit("/", 1)[-1] for i in json.loads(report.read_text())["install"]]
    report.unlink()
    return platform, python, got


def _index_reachable() -> bool:
    proc = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "onnx"], capture_output=True,
                          text=True, timeout=60)
    return proc.returncode == 0


def test_every_native_package_has_a_wheel_for_every_platform_and_python():
    try:
        reachable = _index_reachable()
    except subprocess.TimeoutExpired:
        reachable = False
    if not reachable:
        pytest.skip("the package index is unreachable")
    combos = [(p, v) for p in sorted(PLATFORMS) for v in PYTHONS]
    _requirements()  # parse before the threads start
    with ThreadPoolExecutor(max_workers=5) as pool:
        results = list(pool.map(lambda c: _resolve(*c), combos))
    missing = [f"{p} / Python {v}: {r}" for p, v, r in results if isinstance(r, str)]
    assert not missing, "no wheel:\n" + "\n".join(missing)
    for platform, python, wheels in results:
        runtime = PLATFORMS[platform][2].replace("-", "_")
        assert any(w.startswith(runtime + "-") for w in wheels), (platform, python, wheels)
        assert all(("cp" + python.replace(".", "")) in w or "abi3" in w or "py3-none" in w for w in wheels), wheels
