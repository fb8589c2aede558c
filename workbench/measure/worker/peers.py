"""Whether the engines a user would pick instead of ONNX Runtime can run here (their recipes'
``check``, :mod:`.variants`).

* ``torch.compile`` (inductor) compiles C++ for the CPU, so it needs a C++ compiler on the PATH.
* OpenVINO (and NNCF, its int8 quantizer) are the optional ``peers`` extra; OpenVINO's default precision
  on this CPU is bf16 where the CPU has AVX512-BF16 or AMX, f32 on an AVX2-only CPU.

Each ``*_status()`` returns ``(ok, why)``: ``why`` is the one line a user reads when the variant is
skipped. ``WORKBENCH_DISABLE_OPENVINO=1`` makes the workbench behave as if OpenVINO were not
installed (how the tests check the skip path without uninstalling it).
"""

from __future__ import annotations

import importlib
import os
import shutil

from ...errors import RuntimeUnavailableError, availability, first_line

INSTALL_PEERS = 'pip install "bert-fusion-workbench[peers]"'
DISABLE_ENV = "WORKBENCH_DISABLE_OPENVINO"


def import_peer(module: str, what: str):
    """The optional engine's module, imported; else a one-line RuntimeUnavailableError: not installed (how to
    add it), or installed but not loading (a broken native library raises ``OSError``, ``RuntimeError``, an
    ``ImportError`` of another library), so its variants are skipped like an absent engine's, never a traceback.
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name == module:
            raise RuntimeUnavailableError(f"{what} is not installed; add it with {INSTALL_PEERS}") from e
        broken = e
    except Exception as e:  # noqa: BLE001 - whatever its native part raises at load
        broken = e
    raise RuntimeUnavailableError(f"{what} is installed but does not load ({type(broken).__name__}: "
                                  f"{first_line(broken)}); reinstall it with {INSTALL_PEERS}") from broken


def peer_status(module: str, what: str) -> tuple[bool, str]:
    """``(True, "")`` when :func:`import_peer` imports ``module``, else ``(False, its one line)``."""
    return availability(import_peer, module, what)


def import_openvino():
    """The ``openvino`` module, or a one-line RuntimeUnavailableError saying how to add it."""
    if os.environ.get(DISABLE_ENV):
        raise RuntimeUnavailableError(f"OpenVINO is switched off ({DISABLE_ENV} is set); unset it to compare "
                                      f"against OpenVINO")
    return import_peer("openvino", "OpenVINO")


def openvino_status() -> tuple[bool, str]:
    return availability(import_openvino)


def nncf_status() -> tuple[bool, str]:
    """Whether NNCF (OpenVINO's quantizer, in the ``peers`` extra) is there, after OpenVINO itself."""
    ok, why = openvino_status()
    if not ok:
        return ok, why
    return peer_status("nncf", "NNCF (OpenVINO's int8 quantizer)")


def compiler_status() -> tuple[bool, str]:
    """Whether torch.compile's inductor can build CPU kernels here (it compiles C++)."""
    cxx = os.environ.get("CXX")
    found = (shutil.which(cxx) if cxx else None) or shutil.which("g++") or shutil.which("c++") \
        or shutil.which("clang++")
    if not found:
        return False, ("torch.compile's inductor compiles C++ for the CPU, and no C++ compiler (g++, c++, "
                       "clang++ or $CXX) is on the PATH")
    return peer_status("torch", "PyTorch")


__all__ = ["INSTALL_PEERS", "DISABLE_ENV", "import_peer", "peer_status", "import_openvino", "openvino_status", "nncf_status", "compiler_status"]
