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
    import onnx

    onnx.save(onnx.load(str(tiny_export().path)), str(onnx_file))  # one self-contained file, as a user has it
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


def _no_linux_paths(monkeypatch):
    """Fail any look of the workbench's own at /proc or /dev, which macOS and Windows do not have
    (psutil reads them on Linux: that is the library doing its platform's part)."""
    import builtins
    import os
    from pathlib import Path

    real_open, real_exists = builtins.open, os.path.exists

    def guard(p):
        if not str(p).startswith(("/proc", "/dev")):
            return
        f = sys._getframe(1)
        while f is not None:
            if "psutil" in f.f_code.co_filename:
                return
            f = f.f_back
        raise AssertionError(f"read {p}: not there on macOS or Windows")

    monkeypatch.setattr(builtins, "open", lambda p, *a, **k: (guard(p), real_open(p, *a, **k))[1])
    monkeypatch.setattr(os.path, "exists", lambda p: (guard(p), real_exists(p))[1])
    real_pexists = Path.exists
    monkeypatch.setattr(Path, "exists", lambda self, *a, **k: (guard(self), real_pexists(self, *a, **k))[1])


def test_the_memory_guard_uses_psutil_not_proc(monkeypatch):
    import psutil

    from workbench.checks import _available_gb, check_config
    from workbench.errors import ModelSourceError

    want = psutil.virtual_memory().available / 1e9
    _no_linux_paths(monkeypatch)
    got = _available_gb()
    assert got is not None and abs(got - want) < 0.5 * want  # the same figure, give or take other processes
    # Through the guard itself: a model that needs 100x the memory available is refused in one line.
    layers = int(100 * want * 1e9 / 4 / 7_100_000) + 1
    with pytest.raises(ModelSourceError, match="GB") as e:
        check_config({"model_type": "bert", "hidden_size": 768, "num_hidden_layers": layers,
                      "num_attention_heads": 12, "intermediate_size": 3072, "vocab_size": 30522}, "cfg")
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("plat, words", [("win32", "nvcuda.dll"), ("linux", "libcuda.so.1"),
                                         ("darwin", "no CUDA on darwin")])
def test_the_gpu_check_asks_the_driver_on_every_platform(monkeypatch, plat, words):
    """No /dev/nvidiactl (Windows never has one): the driver's own library, loaded with ctypes, counts GPUs.
    There is no GPU on this machine, so every platform's check must say so, naming what it looked for."""
    from workbench.ort import session

    _no_linux_paths(monkeypatch)
    present, why = session.nvidia_gpu_present(plat)
    assert not present and words in why
