"""The OpenCL platform and device behind ``rocm``, opened once per process.

Which device: by default the first GPU of an AMD OpenCL platform (ROCm's OpenCL runtime
reports the vendor "Advanced Micro Devices, Inc." and platform "AMD Accelerated Parallel
Processing"). ``RLX_ROCM_OPENCL_PLATFORM=<text>`` admits the first platform whose name or
vendor contains ``text`` (case-insensitive; its first GPU, else its first device) as a
*stand-in*: PoCL (``Portable``) in CI, NVIDIA's OpenCL on the H200. A stand-in says so in
its availability reason, and a device of OpenCL type CPU is marked ``software`` (the
device selection then never prefers it to ``cpu`` on the cost model alone).

``ClDevice`` holds the context, one in-order queue and the program cache (in memory, and
on disk through ``rlx_rocm.cache``).
"""
from __future__ import annotations

import logging
import os
import threading
import warnings

from rlx_core.errors import DeviceError, DeviceUnavailableError
from rlx_core.runtime import Availability

from . import cache
from .plugin import PLATFORM_ENV

__all__ = ["ClDevice", "open_device", "opened", "select", "BUILD_OPTIONS"]

log = logging.getLogger("rlx.rocm")
BUILD_OPTIONS = ""  # no fast-math: nan, inf and signed zeros must behave as the reference says
_AMD_NAMES = ("amd", "advanced micro devices")
_lock = threading.Lock()
_devices: dict[tuple, "ClDevice"] = {}


def _cl():
    try:
        import pyopencl
    except Exception as e:  # not installed, or its native library does not load
        raise DeviceUnavailableError(f"pyopencl is not usable: {type(e).__name__}: {e} "
                                     f"(pip install pyopencl)") from None
    return pyopencl


def _platforms(cl) -> list:
    try:
        return cl.get_platforms()
    except Exception as e:  # no ICD loader, or no platform registered
        raise DeviceUnavailableError(f"no OpenCL platform here ({type(e).__name__}: {e}); install ROCm's OpenCL "
                                     f"runtime, or for a stand-in PoCL (apt-get install pocl-opencl-icd)") from None


def _is_amd(platform) -> bool:
    text = f"{platform.name} {platform.vendor}".lower()
    return any(n in text for n in _AMD_NAMES)


def select() -> tuple:
    """``(platform, device, stand_in)`` the current settings pick; raises
    DeviceUnavailableError saying what was found otherwise."""
    cl = _cl()
    platforms = _platforms(cl)
    seen = "; ".join(f"{p.name} ({', '.join(d.name.strip() for d in _devices_of(p)) or 'no devices'})"
                     for p in platforms) or "none"
    wanted = os.environ.get(PLATFORM_ENV, "").strip()
    if wanted:
        matches = [p for p in platforms if wanted.lower() in f"{p.name} {p.vendor}".lower()]
        for p in matches:
            devices = _devices_of(p)
            gpus = [d for d in devices if d.type & cl.device_type.GPU]
            if devices:
                device = (gpus or devices)[0]
                return p, device, not (_is_amd(p) and bool(gpus))
        raise DeviceUnavailableError(f"{PLATFORM_ENV}={wanted!r} matches no OpenCL platform with a device "
                                     f"(platforms here: {seen})")
    for p in platforms:
        if _is_amd(p):
            gpus = [d for d in _devices_of(p) if d.type & cl.device_type.GPU]
            if gpus:
                return p, gpus[0], False
    raise DeviceUnavailableError(f"no AMD GPU among the OpenCL platforms here ({seen}); set {PLATFORM_ENV}=<part of "
                                 f"a platform name> to run on another platform as a stand-in")


def _devices_of(platform) -> list:
    try:
        return platform.get_devices()
    except Exception:  # a platform without devices raises DEVICE_NOT_FOUND
        return []


def open_device() -> "ClDevice":
    """The device the current settings pick, opened once per process."""
    platform, device, stand_in = select()
    key = (platform.name, platform.version, device.name, device.driver_version)
    with _lock:
        if key not in _devices:
            _devices[key] = ClDevice(platform, device, stand_in)
        return _devices[key]


def opened() -> "ClDevice | None":
    """The device the current settings pick if this process opened it already, else None."""
    try:
        platform, device, _ = select()
    except DeviceUnavailableError:
        return None
    with _lock:
        return _devices.get((platform.name, platform.version, device.name, device.driver_version))


def _type_name(cl, value: int) -> str:
    names = [n for n in ("GPU", "CPU", "ACCELERATOR", "CUSTOM") if value & getattr(cl.device_type, n, 0)]
    return " | ".join(names) or str(value)


class ClDevice:
    def __init__(self, platform, device, stand_in: bool):
        cl = self.cl = _cl()
        self.platform, self.device, self.stand_in = platform, device, stand_in
        try:
            self.context = cl.Context([device])
            self.queue = cl.CommandQueue(self.context, device)
        except Exception as e:
            raise DeviceUnavailableError(f"cannot open OpenCL device {device.name.strip()!r} on "
                                         f"{platform.name!r}: {type(e).__name__}: {e}") from None
        exts = set(device.extensions.split())
        self.software = bool(device.type & cl.device_type.CPU)
        self.fp64 = "cl_khr_fp64" in exts or device.double_fp_config != 0
        self.fp16 = "cl_khr_fp16" in exts
        self.alignment = max(256, device.mem_base_addr_align // 8)
        self.max_alloc = int(device.max_mem_alloc_size)
        self.max_work_group = int(device.max_work_group_size)
        self.local_mem = int(device.local_mem_size)
        self.compute_units = int(device.max_compute_units)
        self.lock = threading.RLock()
        self.tuning: dict = {}
        self._programs: dict[str, object] = {}
        self.info = {
            "platform": platform.name.strip(), "platform_version": platform.version.strip(),
            "device": device.name.strip(), "vendor": device.vendor.strip(),
            "device_type": _type_name(cl, device.type), "compute_units": self.compute_units,
            "global_mem_bytes": int(device.global_mem_size), "max_alloc_bytes": self.max_alloc,
            "local_mem_bytes": self.local_mem, "max_work_group_size": self.max_work_group,
            "opencl_version": device.version.strip(), "opencl_c_version": device.opencl_c_version.strip(),
            "driver": device.driver_version.strip(), "fp16": self.fp16, "fp64": self.fp64,
        }
        self.device_id = "|".join(str(self.info[k]) for k in ("platform", "platform_version", "device", "driver",
                                                               "opencl_version"))
        self.workgroup = min(1024 if self.software else 256, self.max_work_group)  # of 1-D kernels
        from .calibrate import load_tuning
        self.tuning = load_tuning(self) or {}  # the calibrated GEMM tile, when measured before

    # --- reports ---------------------------------------------------------------------
    def describe(self) -> dict:
        return {**self.info, "stand_in": self.stand_in, "software": self.software,
                "adapter": self.info["device"]}

    def summary(self) -> str:
        i = self.info
        gib = i["global_mem_bytes"] / 2**30
        flags = ", ".join(f for f, on in (("fp16", self.fp16), ("fp64", self.fp64)) if on) or "no fp16/fp64"
        text = (f"{i['device']} on {i['platform']} ({i['opencl_version']}, driver {i['driver']}, "
                f"{i['compute_units']} compute units, {gib:.1f} GiB, {flags})")
        if self.stand_in:
            text += (f" -- a stand-in, not an AMD GPU: admitted by {PLATFORM_ENV}="
                     f"{os.environ.get(PLATFORM_ENV, '')!r}")
        if self.software:
            text += " [software: OpenCL on the host CPU]"
        return text

    def availability(self) -> Availability:
        return Availability(True, self.summary(), self.describe())

    # --- programs --------------------------------------------------------------------
    def program(self, source: str):
        """The built program of ``source`` (memory cache, then disk cache, then a build)."""
        with self.lock:
            hit = self._programs.get(source)
        if hit is not None:
            return hit
        cl = self.cl
        key = cache.program_key(source, BUILD_OPTIONS, self.device_id)
        program = None
        binary = cache.load_binary(key)
        if binary is not None:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    program = cl.Program(self.context, [self.device], [binary]).build(options=BUILD_OPTIONS)
            except Exception as e:  # a binary this driver no longer takes: rebuild from source
                log.info("rlx-rocm: cached program %s not accepted (%s); rebuilding", key, e)
                cache.discard(key)
                program = None
        if program is None:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # compiler remarks are not failures
                    program = cl.Program(self.context, source).build(options=BUILD_OPTIONS, cache_dir=False)
            except Exception as e:
                raise DeviceError(f"OpenCL build failed on {self.info['device']}: {e}") from None
            try:
                cache.store_binary(key, program.get_info(cl.program_info.BINARIES)[0])
            except Exception as e:  # a driver that returns no binary: only the disk cache is lost
                log.info("rlx-rocm: no program binary to cache (%s)", e)
        with self.lock:
            self._programs.setdefault(source, program)
            return self._programs[source]

    def buffer(self, nbytes: int, what: str):
        if nbytes > self.max_alloc:
            raise DeviceError(f"{what} needs {nbytes} bytes, more than this OpenCL device's largest allocation "
                              f"({self.max_alloc} bytes, CL_DEVICE_MAX_MEM_ALLOC_SIZE)")
        try:
            return self.cl.Buffer(self.context, self.cl.mem_flags.READ_WRITE, max(int(nbytes), 4))
        except Exception as e:
            raise DeviceError(f"cannot allocate {nbytes} bytes for {what} on {self.info['device']}: {e}") from None
