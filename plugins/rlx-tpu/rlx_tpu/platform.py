"""Where the tpu backend runs (the PJRT platform) and the JAX settings it runs under.

``RLX_TPU_PLATFORM`` picks the PJRT platform, read when the backend starts:

* ``tpu`` (the default): the TPUs JAX sees; unavailable where there are none.
* ``cpu``: the same lowering and XLA pipeline on XLA:CPU. CI and the tests use it.
* ``gpu``: the same on XLA:GPU (JAX's CUDA or ROCm plugin), e.g. on an NVIDIA machine.

The device report shows a stand-in platform as such ("XLA:CPU standing in for a TPU").

64-bit types: JAX truncates f64/i64/c128 to 32 bits unless ``jax_enable_x64`` is on, and
RLX graphs use them (argmax and top-k indices are always i64). The plugin therefore
enables x64 only inside its own scope (:func:`x64`): while it traces, compiles, uploads
and runs. Code outside keeps the process's setting; arrays the plugin returns keep
their dtypes.

Nothing here imports JAX at module import time: the entry point stays cheap.
"""
from __future__ import annotations

import importlib.util
import os
from typing import Any

from rlx_core.errors import DeviceUnavailableError, PolicyError
from rlx_core.runtime import Availability

__all__ = ["PLATFORM_ENV", "PLATFORMS", "requested_platform", "describe", "cheap_availability",
           "availability", "jax_device", "x64"]

PLATFORM_ENV = "RLX_TPU_PLATFORM"
# platform -> how the device report names it
PLATFORMS = {"tpu": "TPU", "cpu": "XLA:CPU", "gpu": "XLA:GPU"}


def requested_platform() -> str:
    """The platform ``RLX_TPU_PLATFORM`` names (``tpu`` when unset); PolicyError if unknown."""
    raw = os.environ.get(PLATFORM_ENV, "").strip().lower()
    if not raw:
        return "tpu"
    if raw not in PLATFORMS:
        raise PolicyError(f"{PLATFORM_ENV}={raw!r} names no PJRT platform; expected one of "
                          f"{', '.join(PLATFORMS)} (unset means tpu)")
    return raw


def describe(platform: str) -> str:
    """How the device report names ``platform``: a TPU, or a stand-in for one."""
    if platform == "tpu":
        return "TPU through XLA (PJRT platform 'tpu')"
    return f"{PLATFORMS[platform]} standing in for a TPU ({PLATFORM_ENV}={platform})"


def cheap_availability() -> Availability:
    """Availability without importing JAX: a valid platform, and libtpu for a real TPU."""
    try:
        platform = requested_platform()
    except PolicyError as e:
        return Availability(False, str(e))
    if platform == "tpu" and importlib.util.find_spec("libtpu") is None:
        return Availability(False, f"no TPU runtime here (the libtpu package is not installed); set "
                                   f"{PLATFORM_ENV}=cpu or gpu to run the XLA path on that PJRT platform")
    return Availability(True, describe(platform), {"platform": platform})


def availability(platform: str) -> Availability:
    """Full probe: JAX imports and sees at least one device of ``platform``."""
    try:
        import jax
        devices = jax.devices(platform)
    except Exception as e:  # no such backend, driver failure, ...
        return Availability(False, f"JAX has no '{platform}' devices: {type(e).__name__}: {e}",
                            {"platform": platform})
    return Availability(True, f"{describe(platform)}: {len(devices)} x {devices[0].device_kind}",
                        {"platform": platform, "devices": len(devices), "device_kind": devices[0].device_kind,
                         "jax": jax.__version__, "stand_in": platform != "tpu"})


def jax_device(platform: str, index: int = 0) -> Any:
    """JAX's device ``index`` of ``platform``; DeviceUnavailableError names what exists."""
    import jax
    try:
        devices = jax.devices(platform)
    except Exception as e:
        raise DeviceUnavailableError(f"JAX has no '{platform}' devices: {e}") from None
    if not 0 <= index < len(devices):
        raise DeviceUnavailableError(f"device_index {index} is out of range: JAX sees {len(devices)} "
                                     f"'{platform}' device(s)")
    return devices[index]


def x64():
    """The scope every JAX call of the plugin runs in: ``jax_enable_x64`` on (see module doc)."""
    import jax
    enable = getattr(jax, "enable_x64", None)
    if enable is None:  # JAX before jax.enable_x64 was public
        from jax.experimental import enable_x64 as enable
    return enable(True)
