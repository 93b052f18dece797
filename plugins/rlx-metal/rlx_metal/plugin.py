"""Entry-point module: cheap to import (no wgpu, no coremltools here). It declares the two
devices this plugin serves and the calibration hook.

* ``metal`` (backend ``metal``): Apple GPUs through wgpu's Metal backend, compiled with
  rlx-wgpu's code generation (``rlx_wgpu.api``). The cheap probe says no off macOS with
  the reason, unless ``RLX_METAL_ADAPTER_BACKEND=vulkan`` (a test aid) redirects the device
  to a Vulkan adapter.
* ``ane`` (backend ``coreml-ane``): the Neural Engine through Core ML. The cheap probe says
  no off macOS: coremltools builds and validates ML programs everywhere, but only macOS has
  the Core ML runtime that runs them.
"""
from __future__ import annotations

import platform
import sys

from rlx_core.errors import PolicyError
from rlx_core.runtime import Availability, BackendFactory, hookimpl

from . import env

RLX_PLUGIN_API = 1  # the RLX plugin API this module was written for (rlx_core.runtime.PLUGIN_API_VERSION)

METAL_BACKEND = "metal"
ANE_BACKEND = "coreml-ane"


def _system() -> str:
    return {"linux": "Linux", "win32": "Windows"}.get(sys.platform, platform.system() or sys.platform)


def metal_blocker() -> str | None:
    """Why the ``metal`` device cannot exist on this machine (without opening anything),
    or None. Raises PolicyError for an invalid RLX_METAL_* setting."""
    env.power_preference()
    if env.test_aid():
        return None
    if sys.platform != "darwin":
        return (f"Metal exists only on macOS (this machine runs {_system()}); "
                f"{env.ADAPTER_ENV}=vulkan runs this plugin's code path on a Vulkan adapter instead "
                f"(a test aid: that is not Metal)")
    return None


def ane_blocker() -> str | None:
    """Why the ``ane`` device cannot run here (cheaply), or None. Raises PolicyError for an
    invalid RLX_COREML_UNITS."""
    env.coreml_units()
    if sys.platform != "darwin":
        return (f"Core ML's runtime exists only on macOS (this machine runs {_system()}): coremltools builds and "
                f"validates ML programs here, but cannot run them")
    return None


def blocked(blocker) -> Availability | None:
    """Availability(False, why) when ``blocker()`` (``metal_blocker`` or ``ane_blocker``) says the
    device cannot run here, an invalid setting's PolicyError included; None when it can."""
    try:
        why = blocker()
    except PolicyError as e:
        return Availability(False, str(e))
    return Availability(False, why) if why else None


def _metal_probe() -> Availability:
    no = blocked(metal_blocker)
    if no is not None:
        return no
    opened = _opened_metal()
    if opened is not None:
        return opened
    what = f"{env.ADAPTER_ENV}=vulkan: a Vulkan adapter stands in (test aid)" if env.test_aid() else "macOS"
    return Availability(True, f"{what}; wgpu is installed (adapter not opened yet: `rlx devices --probe full` "
                              f"names it)")


def _opened_metal() -> Availability | None:
    module = sys.modules.get(f"{__package__}.metal")
    return module.opened_availability() if module is not None else None


def _ane_probe() -> Availability:
    no = blocked(ane_blocker)
    if no is not None:
        return no
    return Availability(True, "macOS; coremltools is installed (Core ML not asked yet: `rlx devices --probe full`)")


def _create_metal():
    from .metal import MetalBackend
    return MetalBackend()


def _create_ane():
    from .coreml.backend import AneBackend
    return AneBackend()


@hookimpl
def rlx_backends():
    return [BackendFactory(name=METAL_BACKEND, device="metal", create=_create_metal, priority=100,
                           description="Apple GPUs through wgpu's Metal backend (rlx-wgpu's WGSL code generation)",
                           requires=("wgpu",), probe=_metal_probe),
            BackendFactory(name=ANE_BACKEND, device="ane", create=_create_ane, priority=100,
                           description="Apple Neural Engine through Core ML (graphs lowered to ML Programs)",
                           requires=("coremltools",), probe=_ane_probe)]


@hookimpl
def rlx_calibrate(backend: str, device, force: bool):
    """Measure the metal backend for the cost model (see ``rlx_metal.calibrate``); ``ane``
    keeps the core's nominal figures. ``force`` measures again instead of reading
    rlx-metal's own cache."""
    if backend != METAL_BACKEND:
        return None
    from .calibrate import calibrate
    return calibrate(refresh=force)
