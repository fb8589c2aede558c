"""What machine a figure came from: CPU, cores, memory, GPU, providers, versions.

Every benchmark result carries this description, because a latency without
its machine is not a fact anyone can check (MEASURING.md, rule 6).
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from importlib import metadata

from .microarch import host_microarch
from .session import cuda_status

#: Packages whose versions change what a benchmark measures.
PACKAGES = ("onnxruntime", "onnxruntime-gpu", "onnx", "torch", "transformers", "onnxscript", "numpy")
#: CPU features that decide which kernels run (fp32 AVX-512, int8 VNNI, AMX).
CPU_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_int8")


#: Instruction sets that decide which kernels run, by the name /proc/cpuinfo gives them (x86 "flags",
#: ARM "Features"), in the order reports list them.
ISA_NAMES = {
    "sse4_2": "SSE4.2", "avx": "AVX", "avx2": "AVX2", "fma": "FMA", "f16c": "F16C", "avx512f": "AVX-512",
    "avx512_vnni": "AVX512-VNNI", "avx_vnni": "AVX-VNNI", "avx512_bf16": "AVX512-BF16", "avx512_fp16": "AVX512-FP16",
    "amx_tile": "AMX", "amx_int8": "AMX-INT8", "amx_bf16": "AMX-BF16",
    "asimd": "NEON", "asimddp": "DOTPROD", "i8mm": "I8MM", "sve": "SVE", "sve2": "SVE2", "bf16": "BF16",
    "asimdhp": "FP16",
}
#: macOS (Apple silicon) sysctl keys for the same features.
_MAC_FEATURES = {"hw.optional.neon": "NEON", "hw.optional.arm.FEAT_DotProd": "DOTPROD",
                 "hw.optional.arm.FEAT_I8MM": "I8MM", "hw.optional.arm.FEAT_BF16": "BF16",
                 "hw.optional.arm.FEAT_FP16": "FP16", "hw.optional.avx2_0": "AVX2", "hw.optional.avx512f": "AVX-512"}


def isa_from_flags(flags) -> list[str]:
    """The instruction sets that matter, named for people, from cpuinfo flags or ARM features."""
    have = set(flags)
    return [name for flag, name in ISA_NAMES.items() if flag in have]


def _mac_isa() -> list[str]:
    exe = shutil.which("sysctl")
    if not exe:
        return []
    try:
        out = subprocess.run([exe, *_MAC_FEATURES], capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    on = {k.strip() for k, _, v in (line.partition(":") for line in out.splitlines()) if v.strip() == "1"}
    return [name for key, name in _MAC_FEATURES.items() if key in on]


def _ort_build() -> dict:
    try:
        import onnxruntime as ort
    except ImportError:
        return {}
    info = ort.get_build_info() if hasattr(ort, "get_build_info") else ""
    return {"version": ort.__version__, "device": ort.get_device(), "providers": list(ort.get_available_providers()),
            "build": info.replace("ORT Build Info: ", "").strip()}


def package_version(pkg: str) -> str | None:
    """The installed version of a distribution, or None."""
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return None


def cpu_info() -> tuple[str, list[str]]:
    """The processor's name and its instruction-set flags (``/proc/cpuinfo``, else the platform's words)."""
    model, flags = platform.processor() or platform.machine(), []
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and value.strip():
                    model = value.strip()
                elif key in ("flags", "Features") and not flags:
                    flags = value.split()
    except OSError:
        pass
    return model, flags


def _memory_gb() -> float | None:
    """Total memory in GiB on every platform (psutil), or None where it cannot tell."""
    try:
        import psutil

        return round(psutil.virtual_memory().total / 1024 ** 3, 1)
    except Exception:  # psutil missing or refused by the platform: the figure says "unknown"
        return None


def nvidia_smi(query: str) -> list[str]:
    """One line per GPU of ``nvidia-smi --query-gpu=QUERY`` (csv, no header); [] without nvidia-smi or a driver.
    Reads no CUDA library."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return []
    try:
        out = subprocess.run([exe, f"--query-gpu={query}", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.stdout.splitlines() if line.strip()] if out.returncode == 0 else []


def gpu_names() -> list[str]:
    """GPU names from nvidia-smi, without importing a CUDA library."""
    return nvidia_smi("name,memory.total,driver_version")


def describe_machine(threads: int | None = None, *, check_cuda: bool = True) -> dict:
    """A plain-dict description of this machine for results and reports.

    Args:
        threads: the thread count a benchmark used, recorded alongside.
        check_cuda: open a probe CUDA session to say honestly whether the
            GPU path works here (costs a fraction of a second).

    Returns:
        ``{"cpu", "cores", "usable_cores", "memory_gb", "cpu_flags", "isa", "microarch", "gpus",
        "providers", "cuda": {"available", "reason"}, "os", "python",
        "packages", "threads"}``.
    """
    cpu, flags = cpu_info()
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        usable = os.cpu_count()
    try:
        import onnxruntime as ort
        providers = list(ort.get_available_providers())
    except ImportError:
        providers = []
    cuda = {"available": False, "reason": "not checked"}
    if check_cuda:
        ok, reason = cuda_status()
        cuda = {"available": ok, "reason": reason}
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "usable_cores": usable,
        "memory_gb": _memory_gb(),
        "cpu_flags": [f for f in CPU_FLAGS if f in flags],
        "isa": isa_from_flags(flags) or _mac_isa(),
        "microarch": host_microarch(),
        "onnxruntime": _ort_build(),
        "gpus": gpu_names(),
        "providers": providers,
        "cuda": cuda,
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "packages": {p: v for p in PACKAGES if (v := package_version(p))},
        "threads": threads,
    }


def machine_line(machine: dict) -> str:
    """One line for tables and the CLI: CPU, cores, threads, GPU, onnxruntime."""
    pk = machine.get("packages", {})
    ort_v = pk.get("onnxruntime-gpu") or pk.get("onnxruntime") or "?"
    gpu = "; GPU " + ", ".join(machine["gpus"]) if machine.get("gpus") else "; no GPU"
    thr = f", {machine['threads']} threads" if machine.get("threads") else ""
    isa = f" ({', '.join(machine['isa'])})" if machine.get("isa") else ""
    return (f"{machine.get('cpu', '?')}{isa}, {machine.get('usable_cores', '?')} cores{thr}{gpu}; "
            f"onnxruntime {ort_v}, torch {pk.get('torch', '?')}")
