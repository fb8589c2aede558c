"""Which CUDA and cuDNN the installed ONNX Runtime was built for, read from the package itself.

Every message about a missing CUDA library names these versions, so it stays right when
onnxruntime-gpu moves to a new CUDA (1.31 is built for CUDA 13: its wheel's ``cuda`` extra pins
``nvidia-cuda-runtime~=13.0`` and ``onnxruntime.capi.build_and_package_info.cuda_version`` says
``13.0``); nothing here is written by hand.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import metadata

#: The ONNX Runtime distributions, GPU build first.
ORT_PACKAGES = ("onnxruntime-gpu", "onnxruntime")

_CUDA_REQ = re.compile(r"^nvidia-cuda-runtime(?:-cu\d+)?\s*(?:~=|==|>=)\s*([\d.]+)")
_CUDNN_REQ = re.compile(r"^nvidia-cudnn-cu(\d+)\s*(?:~=|==|>=)\s*(\d+)")


@dataclass(frozen=True)
class CudaBuild:
    """What the installed ONNX Runtime needs for its CUDA provider.

    ``package``: the distribution (``onnxruntime-gpu``, or ``onnxruntime``: no CUDA build);
    ``cuda``: the CUDA version it was built for (``"13.0"``) or None; ``cudnn``: cuDNN's major
    version (``"9"``) or None; ``source``: where the figures were read.
    """

    package: str | None
    version: str | None
    cuda: str | None
    cudnn: str | None
    source: str

    @property
    def cuda_major(self) -> str | None:
        return self.cuda.split(".")[0] if self.cuda else None

    def words(self) -> str:
        """``"CUDA 13.0 and cuDNN 9"``: what a missing-library message asks for."""
        if not self.cuda:
            return "the CUDA and cuDNN versions its onnxruntime-gpu wheel was built for"
        return f"CUDA {self.cuda}" + (f" and cuDNN {self.cudnn}" if self.cudnn else "")

    def install_words(self) -> str:
        """The pip line that brings the CUDA libraries it names (the wheel's own extras)."""
        if self.package != "onnxruntime-gpu":
            return "pip install onnxruntime-gpu (and not onnxruntime beside it)"
        return f'pip install "onnxruntime-gpu[cuda,cudnn]=={self.version}"' if self.version else \
            'pip install "onnxruntime-gpu[cuda,cudnn]"'


def from_requirements(requires, build_cuda: str | None = None, *, package: str | None = "onnxruntime-gpu",
                      version: str | None = None) -> CudaBuild:
    """A :class:`CudaBuild` from a wheel's requirement lines (``importlib.metadata.requires``) and the
    CUDA version its build info states (preferred when both say)."""
    cuda = cudnn = None
    for line in requires or ():
        req = line.split(";")[0].strip()
        m = _CUDA_REQ.match(req)
        if m and cuda is None:
            cuda = m.group(1)
        m = _CUDNN_REQ.match(req)
        if m and cudnn is None:
            cudnn = m.group(2)
    if build_cuda:
        return CudaBuild(package, version, build_cuda, cudnn, "onnxruntime build info and package metadata")
    return CudaBuild(package, version, cuda, cudnn, "package metadata" if cuda else "nothing: no CUDA build")


def _build_info_cuda() -> str | None:
    try:
        from onnxruntime.capi import build_and_package_info as info
    except ImportError:
        return None
    return getattr(info, "cuda_version", None) or None


@functools.lru_cache(maxsize=1)
def cuda_build() -> CudaBuild:
    """What the installed ONNX Runtime distribution needs, read from its metadata and build info."""
    for pkg in ORT_PACKAGES:
        try:
            requires, version = metadata.requires(pkg), metadata.version(pkg)
        except metadata.PackageNotFoundError:
            continue
        if pkg != "onnxruntime-gpu":
            return CudaBuild(pkg, version, None, None, "package metadata: a CPU build")
        return from_requirements(requires, _build_info_cuda(), package=pkg, version=version)
    return CudaBuild(None, None, None, None, "no onnxruntime installed")


__all__ = ["CudaBuild", "cuda_build", "from_requirements", "ORT_PACKAGES"]
