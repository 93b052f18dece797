"""Entry-point module: cheap to import (no pyopencl import here). It declares the ``rocm``
backend and the calibration hook. GPU telemetry (AMD SMI) is the core's own
(``rlx_core.hw.amdsmi``), served with or without this plugin.

The cheap probe only looks at files and variables: ``RLX_ROCM_OPENCL_PLATFORM`` (a stand-in
platform was asked for) or an AMD OpenCL driver registered with the ICD loader
(``/etc/OpenCL/vendors/*.icd``, ``$OCL_ICD_VENDORS``, ``$OCL_ICD_FILENAMES``). The full probe
(``RocmBackend.is_available``) opens the platform and names the device.
"""
from __future__ import annotations

import glob
import os
import sys

from rlx_core.runtime import Availability, BackendFactory, hookimpl

RLX_PLUGIN_API = 1  # the RLX plugin API this module was written for (rlx_core.runtime.PLUGIN_API_VERSION)

BACKEND_NAME = "rocm"
PLATFORM_ENV = "RLX_ROCM_OPENCL_PLATFORM"


def amd_icds() -> list[str]:
    """ICD registrations (files or library names) that look like AMD's OpenCL runtime."""
    found = []
    names = [n for n in os.environ.get("OCL_ICD_FILENAMES", "").split(os.pathsep) if n]
    dirs = [os.environ["OCL_ICD_VENDORS"]] if os.environ.get("OCL_ICD_VENDORS") else ["/etc/OpenCL/vendors"]
    for d in dirs:
        if os.path.isfile(d):
            names.append(d)
        else:
            names.extend(glob.glob(os.path.join(d, "*.icd")))
    for name in names:
        text = os.path.basename(name)
        if name.endswith(".icd"):
            try:
                with open(name, encoding="utf-8", errors="replace") as f:
                    text += " " + f.read(512)
            except OSError:
                pass
        if "amd" in text.lower():
            found.append(name)
    return found


def _probe() -> Availability:
    opened = _opened()
    if opened is not None:  # this process already opened the device: say which, for free
        return opened.availability()
    wanted = os.environ.get(PLATFORM_ENV, "").strip()
    if wanted:
        return Availability(True, f"{PLATFORM_ENV}={wanted!r} asks for a stand-in OpenCL platform (not opened yet: "
                                  f"`rlx devices --probe full` names the device)")
    icds = amd_icds()
    if icds:
        return Availability(True, f"AMD OpenCL driver registered ({', '.join(icds)}); device not opened yet")
    return Availability(False, "no AMD OpenCL driver is registered with the ICD loader (ROCm's OpenCL runtime "
                               "installs /etc/OpenCL/vendors/amdocl64.icd); to run on another OpenCL platform as a "
                               f"stand-in set {PLATFORM_ENV}=<part of its name>, e.g. Portable (PoCL) or NVIDIA")


def _opened():
    module = sys.modules.get(f"{__package__}.opencl")
    return module.opened() if module is not None else None


def _create():
    from .backend import RocmBackend
    return RocmBackend()


@hookimpl
def rlx_backends():
    return [BackendFactory(name=BACKEND_NAME, device="rocm", create=_create, priority=100,
                           description="AMD GPUs through OpenCL (pyopencl): generated OpenCL C, one flush per run",
                           requires=("pyopencl",), probe=_probe)]


@hookimpl
def rlx_calibrate(backend: str, device, force: bool):
    """Measure the rocm backend for the cost model (see ``rlx_rocm.calibrate``); ``force``
    measures again instead of reading rlx-rocm's own cache."""
    if backend != BACKEND_NAME:
        return None
    from .calibrate import calibrate
    return calibrate(refresh=force)
