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

import os
import shutil

from ...errors import RuntimeUnavailableError

INSTALL_PEERS = 'pip install "bert-fusion-workbench[peers]"'
DISABLE_ENV = "WORKBENCH_DISABLE_OPENVINO"


def import_openvino():
    """The ``openvino`` module, or a one-line RuntimeUnavailableError saying how to add it."""
    if os.environ.get(DISABLE_ENV):
        raise RuntimeUnavailableError(f"OpenVINO is switched off ({DISABLE_ENV} is set); unset it to compare "
                                      f"against OpenVINO")
    try:
        import openvino
    except ImportError as e:
        raise RuntimeUnavailableError(f"OpenVINO is not installed; add it with {INSTALL_PEERS}") from e
    return openvino


def openvino_status() -> tuple[bool, str]:
    try:
        import_openvino()
    except RuntimeUnavailableError as e:
        return False, str(e)
    return True, ""


def nncf_status() -> tuple[bool, str]:
    """Whether NNCF (OpenVINO's quantizer, in the ``peers`` extra) is there, after OpenVINO itself."""
    ok, why = openvino_status()
    if not ok:
        return ok, why
    try:
        import nncf  # noqa: F401
    except ImportError:
        return False, f"NNCF (OpenVINO's int8 quantizer) is not installed; add it with {INSTALL_PEERS}"
    return True, ""


def compiler_status() -> tuple[bool, str]:
    """Whether torch.compile's inductor can build CPU kernels here (it compiles C++)."""
    cxx = os.environ.get("CXX")
    found = (shutil.which(cxx) if cxx else None) or shutil.which("g++") or shutil.which("c++") \
        or shutil.which("clang++")
    if not found:
        return False, ("torch.compile's inductor compiles C++ for the CPU, and no C++ compiler (g++, c++, "
                       "clang++ or $CXX) is on the PATH")
    try:
        import torch  # noqa: F401
    except ImportError:
        return False, "PyTorch is not installed"
    return True, ""


__all__ = ["INSTALL_PEERS", "DISABLE_ENV", "import_openvino", "openvino_status", "nncf_status", "compiler_status"]
