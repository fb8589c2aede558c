"""The engines a user would pick instead of ONNX Runtime, and whether they can run here.

* ``torch-compile``: ``torch.compile`` (inductor) on the PyTorch model; inductor's CPU code is C++,
  so it needs a C++ compiler on the PATH.
* ``openvino-f32`` / ``openvino``: OpenVINO on the same ONNX file, with
  ``INFERENCE_PRECISION_HINT`` f32, or at OpenVINO's default precision on this CPU (bf16 where the
  CPU has AVX512-BF16 or AMX, f32 on an AVX2-only CPU). OpenVINO is the optional ``peers`` extra.
* ``openvino-int8`` / ``openvino-int8-guarded``: NNCF's static int8 of that file (:mod:`.ov_quant`);
  NNCF is in the ``peers`` extra too.

Each ``*_status()`` returns ``(ok, why)``: ``why`` is the one line a user reads when the variant is
skipped. ``WORKBENCH_DISABLE_OPENVINO=1`` makes the workbench behave as if OpenVINO were not
installed (how the tests check the skip path without uninstalling it).
"""

from __future__ import annotations

import os
import shutil

INSTALL_PEERS = 'pip install "bert-fusion-workbench[peers]"'
DISABLE_ENV = "WORKBENCH_DISABLE_OPENVINO"
#: variant name → OpenVINO's inference precision hint (None: its default on this CPU; the int8 models keep
#: what they do not quantize at that default, as they were checked, :mod:`.ov_quant`).
OPENVINO_VARIANTS = {"openvino-f32": "f32", "openvino": None, "openvino-int8": None, "openvino-int8-guarded": None}
#: The OpenVINO variants NNCF quantizes.
NNCF_VARIANTS = ("openvino-int8", "openvino-int8-guarded")


def import_openvino():
    """The ``openvino`` module, or a one-line RuntimeUnavailableError saying how to add it."""
    from ..errors import RuntimeUnavailableError

    if os.environ.get(DISABLE_ENV):
        raise RuntimeUnavailableError(f"OpenVINO is switched off ({DISABLE_ENV} is set); unset it to compare "
                                      f"against OpenVINO")
    try:
        import openvino
    except ImportError as e:
        raise RuntimeUnavailableError(f"OpenVINO is not installed; add it with {INSTALL_PEERS}") from e
    return openvino


def openvino_status() -> tuple[bool, str]:
    from ..errors import RuntimeUnavailableError

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


def status(name: str) -> tuple[bool, str]:
    """``(ok, why)`` for a peer variant name; other names are always ok."""
    if name in NNCF_VARIANTS:
        return nncf_status()
    if name in OPENVINO_VARIANTS:
        return openvino_status()
    if name == "torch-compile":
        return compiler_status()
    return True, ""


def openvino_default_precision(isa) -> str:
    """What OpenVINO's CPU plugin picks by default: bf16 where the CPU has native bf16, else f32."""
    isa = set(isa or ())
    return "bf16" if {"AVX512-BF16", "AMX-BF16"} & isa else "f32"


__all__ = ["INSTALL_PEERS", "DISABLE_ENV", "OPENVINO_VARIANTS", "NNCF_VARIANTS", "import_openvino", "openvino_status",
           "nncf_status",
           "compiler_status", "status", "openvino_default_precision"]
