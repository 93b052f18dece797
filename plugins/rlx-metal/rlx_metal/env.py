"""The environment variables of rlx-metal; an invalid value raises ``PolicyError`` naming
the variable (as every ``RLX_*`` setting does). Cheap: imports nothing heavy.

* ``RLX_METAL_ADAPTER_BACKEND`` -- ``metal`` (default): the ``metal`` device opens an
  adapter of wgpu's Metal backend only. ``vulkan``: a TEST AID -- it opens a Vulkan
  adapter instead, so the plugin's whole code path (device spec, unified memory, Metal
  calibration, host GEMM overrides, the conformance suite) runs on Linux CI machines
  (Mesa's lavapipe). What runs then is not Metal, and reports say so.
* ``RLX_METAL_POWER_PREFERENCE`` -- ``high-performance`` (default: a discrete GPU first
  on Macs that have two) or ``low-power`` (the integrated GPU first).
* ``RLX_COREML_UNITS`` -- the Core ML compute units of the ``ane`` device: ``all``,
  ``cpu_and_gpu``, ``cpu_and_ne``, ``cpu_only``. Unset: ``cpu_and_ne`` for a graph that
  computes in f16 (the Neural Engine computes in f16), ``cpu_and_gpu`` otherwise.
"""
from __future__ import annotations

import os

from rlx_core.errors import PolicyError

__all__ = ["ADAPTER_ENV", "POWER_ENV", "UNITS_ENV", "UNITS", "adapter_backend", "power_preference", "coreml_units",
           "test_aid"]

ADAPTER_ENV = "RLX_METAL_ADAPTER_BACKEND"
POWER_ENV = "RLX_METAL_POWER_PREFERENCE"
UNITS_ENV = "RLX_COREML_UNITS"

_ADAPTER_BACKENDS = {"metal": "Metal", "vulkan": "Vulkan"}
_POWER = ("high-performance", "low-power")
UNITS = ("all", "cpu_and_gpu", "cpu_and_ne", "cpu_only")


def _read(name: str, allowed, default: str) -> str:
    raw = os.environ.get(name, "")
    value = raw.strip().lower()
    if not value:
        return default
    if value not in allowed:
        raise PolicyError(f"{name}={raw!r} is not valid: expected one of {', '.join(allowed)}")
    return value


def adapter_backend() -> str:
    """The wgpu backend type the ``metal`` device opens: ``"Metal"`` or, as a test aid, ``"Vulkan"``."""
    return _ADAPTER_BACKENDS[_read(ADAPTER_ENV, tuple(_ADAPTER_BACKENDS), "metal")]


def test_aid() -> bool:
    """Whether ``RLX_METAL_ADAPTER_BACKEND`` redirects the ``metal`` device to another backend type."""
    return adapter_backend() != "Metal"


def power_preference() -> str:
    return _read(POWER_ENV, _POWER, "high-performance")


def coreml_units() -> str | None:
    """The compute units ``RLX_COREML_UNITS`` asks for, or None when it is unset."""
    value = _read(UNITS_ENV, UNITS, "")
    return value or None
