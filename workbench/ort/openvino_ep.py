"""ONNX Runtime's OpenVINO execution provider, shipped as a plugin (``onnxruntime-ep-openvino``): registered
once per process, its CPU device found, put on a session with OpenVINO's settings.

Since ONNX Runtime 1.23 an execution provider can come as a plugin library: ``register_execution_provider_library``
loads it, ``get_ep_devices()`` lists the devices each provider offers, ``SessionOptions.add_provider_for_devices``
puts one on a session (ONNX Runtime's CPU provider takes the nodes it leaves). The plugin's factory offers Intel
devices only: its ``GetSupportedDevices`` skips every hardware device whose vendor id is not Intel's (0x8086), so
on an AMD CPU it offers none, and the recipes say so in one line. Its old provider options ``device_type``,
``precision`` and ``num_of_threads`` are ignored with a warning: the device is the one handed over, and the
precision and threads are OpenVINO properties in its ``load_config`` (``{"CPU": {"INFERENCE_PRECISION_HINT":
"f32", "INFERENCE_NUM_THREADS": "2"}}``). Wheels exist for x86-64 Linux and Windows only.

``WORKBENCH_DISABLE_OPENVINO_EP=1`` makes the workbench behave as if the plugin were not installed (how the
tests check that path without uninstalling it).
"""

from __future__ import annotations

import functools
import json
import os
import platform
import sys
from importlib import metadata

from ..errors import RuntimeUnavailableError, availability, first_line

PACKAGE = "onnxruntime-ep-openvino"
#: The provider's name in ``get_providers()`` and on its devices.
EP = "OpenVINOExecutionProvider"
#: The name the library is registered under (any name works; one per process).
REGISTRATION = "openvino_ep"
DISABLE_ENV = "WORKBENCH_DISABLE_OPENVINO_EP"
INTEL = 0x8086
#: The platforms PyPI has a wheel of the plugin for: (sys.platform, machine).
WHEELS = (("linux", "x86_64"), ("win32", "amd64"))


def _has_wheel() -> bool:
    return (sys.platform, platform.machine().lower()) in WHEELS


def _missing() -> str:
    if not _has_wheel():
        return (f"{PACKAGE} (ONNX Runtime's OpenVINO execution provider) has no wheel for {sys.platform} "
                f"{platform.machine()} (x86-64 Linux and Windows only)")
    return (f"{PACKAGE} (ONNX Runtime's OpenVINO execution provider) is not installed; add it with pip install "
            f"{PACKAGE} (it is in the workbench's peers extra)")


def _version() -> str:
    try:
        return metadata.version(PACKAGE)
    except metadata.PackageNotFoundError:
        return "?"


def _no_device(devices) -> str:
    """Why the plugin offers no device here, naming this machine's processor's vendor."""
    import onnxruntime as ort

    cpus = [d.device for d in devices if d.device.type == ort.OrtHardwareDeviceType.CPU]
    cpu = (f"this CPU is {cpus[0].vendor or 'not Intel'} (vendor id {cpus[0].vendor_id:#06x})" if cpus else
           "ONNX Runtime found no Intel device here")
    if cpus and cpus[0].vendor_id == INTEL:
        cpu = "OpenVINO found no CPU device it can use"
    return (f"the OpenVINO execution provider ({PACKAGE} {_version()}) offers no device here: it serves Intel "
            f"devices only, and {cpu}")


@functools.lru_cache(maxsize=1)
def _registered() -> tuple[tuple, str]:
    """``(the plugin's devices, why none)``, the library registered on the first call (once per process)."""
    try:
        import onnxruntime_ep_openvino as plugin
    except ImportError:
        return (), _missing()
    import onnxruntime as ort

    if not hasattr(ort, "register_execution_provider_library"):
        return (), f"onnxruntime {ort.__version__} cannot load execution provider plugins (1.23 and later can)"
    try:
        ort.register_execution_provider_library(REGISTRATION, plugin.get_library_path())
    except Exception as e:  # noqa: BLE001 - a plugin built for another onnxruntime, a missing library
        if "already registered" not in str(e):
            return (), f"ONNX Runtime cannot load the OpenVINO execution provider ({PACKAGE} {_version()}): " \
                       f"{first_line(e)}"
    devices = ort.get_ep_devices()
    ours = tuple(d for d in devices if d.ep_name == EP)
    return (ours, "") if ours else ((), _no_device(devices))


def cpu_device():
    """The OpenVINO provider's CPU device (an ``OrtEpDevice``), or a one-line RuntimeUnavailableError: the plugin
    missing or switched off, an onnxruntime too old for plugins, or no Intel CPU here."""
    if os.environ.get(DISABLE_ENV):
        raise RuntimeUnavailableError(f"the OpenVINO execution provider ({PACKAGE}) is switched off ({DISABLE_ENV} "
                                      f"is set); unset it to time it")
    devices, why = _registered()
    cpu = [d for d in devices if d.ep_metadata.get("ov_device") == "CPU"]
    if not cpu:
        offered = ", ".join(sorted({d.ep_metadata.get("ov_device", "?") for d in devices}))
        raise RuntimeUnavailableError(why or f"the OpenVINO execution provider offers {offered} here, but no CPU")
    return cpu[0]


def status() -> tuple[bool, str]:
    """``(ok, why)``: the OpenVINO execution provider can run a session on this CPU."""
    return availability(cpu_device)


def load_config(settings: dict | None) -> dict:
    """The provider options that carry OpenVINO ``settings`` (property → value) for its CPU device."""
    if not settings:
        return {}
    return {"load_config": json.dumps({"CPU": {k: str(v) for k, v in settings.items()}})}


def add_openvino(so, settings: dict | None = None) -> None:
    """Put the OpenVINO provider's CPU device on session options ``so``, with OpenVINO ``settings``
    (``INFERENCE_PRECISION_HINT``, ``INFERENCE_NUM_THREADS``, ...; None: OpenVINO's defaults)."""
    so.add_provider_for_devices([cpu_device()], load_config(settings))


__all__ = ["PACKAGE", "EP", "REGISTRATION", "DISABLE_ENV", "WHEELS", "cpu_device", "status", "load_config",
           "add_openvino"]
