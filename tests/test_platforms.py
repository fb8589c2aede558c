"""What a user on a platform without PyTorch or without CUDA is told (Intel Macs, Apple silicon, ARM Linux)."""
from __future__ import annotations

import platform
import subprocess
import sys

import pytest

NO_TORCH = """
import builtins, sys
real = builtins.__import__
def no_torch(name, *a, **k):
    if name == "torch" or name.startswith("torch."):
        raise ImportError("No module named 'torch'")
    return real(name, *a, **k)
builtins.__import__ = no_torch
from workbench.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_without_torch_export_refuses_in_one_line_and_onnx_files_still_fuse(tiny_export, tmp_path):
    p = subprocess.run([sys.executable, "-c", NO_TORCH, "export", "bert-tiny", "--opset", "17", "--exporter", "dynamo"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.strip().splitlines() == [
        "workbench: error: PyTorch is not installed, so bert-tiny cannot be built or exported: open an exported "
        ".onnx file instead, or pip install torch"]
    onnx_file = tmp_path / "model.onnx"
    onnx_file.write_bytes(tiny_export().path.read_bytes())
    p = subprocess.run([sys.executable, "-c", NO_TORCH, "fuse", str(onnx_file), "--json"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]


@pytest.mark.parametrize("plat, machine, words", [
    ("darwin", "arm64", "macOS has no CUDA"),
    ("darwin", "x86_64", "macOS has no CUDA"),
    ("linux", "aarch64", "onnxruntime-gpu ships wheels for x86-64 Linux and Windows only"),
    ("linux", "x86_64", "install onnxruntime-gpu"),
])
def test_no_cuda_build_says_why_for_the_platform(monkeypatch, plat, machine, words):
    from workbench.ort import session

    monkeypatch.setattr(sys, "platform", plat)
    monkeypatch.setattr(platform, "machine", lambda: machine)
    assert words in session._no_cuda_build_reason()
