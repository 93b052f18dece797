"""Adapters, the five device profiles, and one opened wgpu device per profile.

* ``gpu``: the best adapter of any backend type (see :func:`adapter_rank`), with its
  full limits and the optional feature RLX uses (``shader-f16``).
  ``RLX_WGPU_ADAPTER=<text>`` picks the first adapter whose name contains ``text``.
* ``vulkan``, ``opengl``, ``directx``: the best adapter of that wgpu backend type; a
  profile whose backend type has no adapter here is unavailable.
* ``webgpu``: the best adapter, restricted to the WebGPU specification's default limits
  and no optional features, so what compiles and runs there runs on any conformant
  WebGPU implementation (a browser included).

``Gpu`` is the opened device plus what every compiled graph on it shares: the pipeline
cache (one pipeline per WGSL source, the ``PIPELINE_CACHE_SIZE`` most recently used kept:
sources bake shapes and scalar constants in, so a process compiling many graphs that differ
only in a literal would otherwise keep every pipeline forever; a compiled graph holds its
own pipelines, so an evicted one lives exactly as long as the graphs using it) and the
bind-group layouts.
"""
from __future__ import annotations

import functools
import os
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable

from rlx_core.errors import DeviceError, DeviceUnavailableError
from rlx_core.runtime.safefs import cache_root, private_dir, private_temp_dir

__all__ = ["Profile", "PROFILES", "SPEC_DEFAULT_LIMITS", "Gpu", "open_gpu", "open_profile", "opened_profile",
           "find_adapter", "adapter_rank", "adapter_summary", "is_software", "opened", "SOFTWARE_ADAPTERS",
           "POWER_PREFERENCES", "UNIFIED_MEMORY_FEATURE", "wants_unified_memory"]


@dataclass(frozen=True)
class Profile:
    """What device to open and how (public as ``rlx_wgpu.api.DeviceSpec``; see there)."""

    label: str                # the RLX device label
    backend_type: str | None  # wgpu backend type to force; None: any
    portable: bool = False    # spec-default limits, no optional features
    power_preference: str | None = None  # "high-performance" | "low-power" | None (discrete first)
    adapter_name: str | None = None      # only adapters whose name contains this (case-insensitive)
    unified_memory: bool | str = False   # mapped arena instead of staging copies: True, False or "auto"
    tuning: Callable | None = field(default=None, compare=True)  # (Gpu) -> calibration dict or None
    env_adapter: bool = False            # RLX_WGPU_ADAPTER applies (the ``gpu`` profile)

    def __post_init__(self):
        if self.power_preference not in POWER_PREFERENCES:
            raise ValueError(f"power_preference must be one of {POWER_PREFERENCES}, got {self.power_preference!r}")
        if self.unified_memory not in (True, False, "auto"):
            raise ValueError(f"unified_memory must be True, False or 'auto', got {self.unified_memory!r}")


POWER_PREFERENCES = (None, "high-performance", "low-power")


PROFILES = {p.label: p for p in (Profile("gpu", None, env_adapter=True), Profile("vulkan", "Vulkan"), Profile("opengl", "OpenGL"),
                                 Profile("directx", "D3D12"), Profile("webgpu", None, portable=True))}

# The WebGPU specification's default limits (what every conformant implementation grants).
SPEC_DEFAULT_LIMITS = {
    "max-buffer-size": 268435456,
    "max-storage-buffer-binding-size": 134217728,
    "max-storage-buffers-per-shader-stage": 8,
    "min-storage-buffer-offset-alignment": 256,
    "max-compute-workgroup-storage-size": 16384,
    "max-compute-invocations-per-workgroup": 256,
    "max-compute-workgroup-size-x": 256,
    "max-compute-workgroup-size-y": 256,
    "max-compute-workgroup-size-z": 64,
    "max-compute-workgroups-per-dimension": 65535,
    "max-bind-groups": 4,
    "max-bindings-per-bind-group": 1000,
    "max-uniform-buffer-binding-size": 65536,
    "max-uniform-buffers-per-shader-stage": 12,
    "max-dynamic-storage-buffers-per-pipeline-layout": 4,
}
OPTIONAL_FEATURES = ("shader-f16", "timestamp-query")  # each requested where the adapter has it
_TYPE_RANK = {"DiscreteGPU": 0, "IntegratedGPU": 1, "VirtualGPU": 2, "CPU": 3}
_BACKEND_RANK = {"Vulkan": 0, "Metal": 1, "D3D12": 2, "OpenGL": 3}


_LOW_POWER_RANK = {"IntegratedGPU": 0, "DiscreteGPU": 1, "VirtualGPU": 2, "CPU": 3}


def adapter_rank(info, power_preference: str | None = None) -> tuple:
    """Sort key of an adapter (lower is better): discrete before integrated before
    virtual before CPU (integrated first with ``power_preference="low-power"``), then
    Vulkan, Metal, DirectX 12, OpenGL."""
    types = _LOW_POWER_RANK if power_preference == "low-power" else _TYPE_RANK
    return (types.get(info.get("adapter_type"), 4), _BACKEND_RANK.get(info.get("backend_type"), 4))


# Drivers that implement a GPU API on the CPU (lower case, matched as words in the adapter
# or driver name): they report adapter_type CPU, but not every wgpu version says so.
SOFTWARE_ADAPTERS = ("lavapipe", "llvmpipe", "softpipe", "swiftshader", "microsoft basic render driver", "warp")
_SOFTWARE_RE = re.compile(r"\b(" + "|".join(re.escape(n) for n in SOFTWARE_ADAPTERS) + r")\b")


def is_software(info) -> bool:
    """Whether an adapter is a software rasterizer running on the host CPU (lavapipe,
    llvmpipe, SwiftShader, WARP, ...): its type is CPU, or its name says so."""
    if info.get("adapter_type") == "CPU":
        return True
    return bool(_SOFTWARE_RE.search(f"{info.get('device') or ''} {info.get('description') or ''}".lower()))


def adapter_summary(info) -> str:
    name, driver = info.get("device") or "unknown adapter", info.get("description") or "driver ?"
    software = " [software adapter: runs on the host CPU]" if is_software(info) else ""
    return f"{name} ({info.get('backend_type')}, {driver}){software}"


def _runtime_dir() -> str:
    """A private folder for ``XDG_RUNTIME_DIR`` (Mesa prints an error per adapter without
    one): ``$XDG_CACHE_HOME/rlx/xdg-runtime``, shared by every process, so none leaves a
    folder behind; a temporary one removed at exit when the cache cannot be trusted."""
    try:
        return str(private_dir(cache_root() / "xdg-runtime"))
    except OSError:
        return str(private_temp_dir("rlx-xdg-"))


@functools.lru_cache(maxsize=1)
def _adapters() -> tuple:
    if not os.environ.get("XDG_RUNTIME_DIR"):
        os.environ["XDG_RUNTIME_DIR"] = _runtime_dir()
    import wgpu
    return tuple(wgpu.gpu.enumerate_adapters_sync())


def find_adapter(profile: Profile):
    """The adapter ``profile`` uses, or raise DeviceUnavailableError saying what exists."""
    found = sorted(_adapters(), key=lambda a: adapter_rank(a.info, profile.power_preference))
    candidates = [a for a in found if profile.backend_type in (None, a.info["backend_type"])]
    wanted = os.environ.get("RLX_WGPU_ADAPTER", "").strip() if profile.env_adapter else ""
    if wanted:
        candidates = [a for a in candidates if wanted.lower() in a.info["device"].lower()]
    if profile.adapter_name:
        candidates = [a for a in candidates if profile.adapter_name.lower() in a.info["device"].lower()]
    if not candidates:
        seen = "; ".join(adapter_summary(a.info) for a in found) or "none"
        need = f"backend type {profile.backend_type}" if profile.backend_type else "any backend type"
        if wanted:
            need += f" named like RLX_WGPU_ADAPTER={wanted!r}"
        if profile.adapter_name:
            need += f" named like {profile.adapter_name!r}"
        raise DeviceUnavailableError(f"no wgpu adapter of {need} on this machine (adapters: {seen})")
    return candidates[0]


class Gpu:
    """An opened wgpu device for one profile, shared by every graph compiled for it."""

    def __init__(self, profile: Profile):
        import wgpu
        self.wgpu = wgpu
        self.profile = profile
        self.adapter = find_adapter(profile)
        self.info = dict(self.adapter.info)
        if profile.portable:
            features, limits = [], dict(SPEC_DEFAULT_LIMITS)
        else:
            features, limits = [f for f in OPTIONAL_FEATURES if f in self.adapter.features], None
        self.unified_memory = wants_unified_memory(profile, self.info, self.adapter.features)
        if self.unified_memory:
            features.append(UNIFIED_MEMORY_FEATURE)
        self.device = self.adapter.request_device_sync(label=f"rlx-{profile.label}", required_features=features,
                                                       required_limits=limits)
        self.features = frozenset(self.device.features)
        self.limits = dict(self.device.limits)
        self.f16 = "shader-f16" in self.features
        self.alignment = max(16, self.limits["min-storage-buffer-offset-alignment"])
        self.tuning: dict | None = None  # the calibration (rlx_wgpu.calibrate), read on first use
        self._pipelines: OrderedDict[str, object] = OrderedDict()  # source -> pipeline, least recent first
        self.pipeline_cache_size = PIPELINE_CACHE_SIZE
        self._layouts: dict[int, tuple] = {}
        self._lock = threading.Lock()

    # --- capabilities -----------------------------------------------------------------
    @property
    def max_bindings(self) -> int:
        return self.limits["max-storage-buffers-per-shader-stage"]

    @property
    def max_binding_bytes(self) -> int:
        return self.limits["max-storage-buffer-binding-size"]

    @property
    def workgroup_bytes(self) -> int:
        return self.limits["max-compute-workgroup-storage-size"]

    @property
    def timestamp_period(self) -> float | None:
        """Nanoseconds per tick of this device's GPU timestamps, or None when it has none
        (no ``timestamp-query`` feature, or a wgpu-py without wgpu-native's
        ``wgpuQueueGetTimestampPeriod``, which WebGPU itself does not expose)."""
        if not hasattr(self, "_timestamp_period"):
            self._timestamp_period = None
            if "timestamp-query" in self.features:
                try:
                    from wgpu.backends.wgpu_native._ffi import lib
                    period = float(lib.wgpuQueueGetTimestampPeriod(self.device.queue._internal))
                    self._timestamp_period = period if period > 0 else None
                except Exception:  # another wgpu-py backend or layout: time on the host instead
                    pass
        return self._timestamp_period

    def describe(self) -> dict:
        """What device_report shows: adapter, driver, backend type, whether it is a software
        adapter (``software``: the flag the core's device selection reads) and the key limits."""
        return {"adapter": self.info.get("device"), "vendor": self.info.get("vendor"),
                "driver": self.info.get("description"), "backend_type": self.info.get("backend_type"),
                "adapter_type": self.info.get("adapter_type"), "software": is_software(self.info),
                "profile": self.profile.label, "unified_memory": self.unified_memory,
                "shader_f16": self.f16, "max_buffer_size": self.limits["max-buffer-size"],
                "max_storage_binding": self.max_binding_bytes, "workgroup_storage": self.workgroup_bytes}

    def summary(self) -> str:
        """One line for reports: adapter, backend type, driver, software marker, profile."""
        portable = " (WebGPU spec-default limits, no optional features)" if self.profile.portable else ""
        return adapter_summary(self.info) + portable

    def tuned_matmul_tile(self) -> str | None:
        """The fastest large matmul tile measured by calibration on this adapter, if any
        (from ``profile.tuning`` when the profile supplies its own calibration)."""
        if self.tuning is None:
            if self.profile.tuning is not None:
                self.tuning = self.profile.tuning(self) or {}
            else:
                from .calibrate import load_calibration
                self.tuning = load_calibration(self) or {}
        return self.tuning.get("matmul_tile")

    # --- pipelines ----------------------------------------------------------------------
    def pipeline(self, source: str, n_bindings: int):
        """The compute pipeline of a WGSL source (entry point ``main``): from the LRU cache,
        else compiled and cached (evicting the least recently used beyond
        ``pipeline_cache_size``)."""
        with self._lock:
            hit = self._pipelines.get(source)
            if hit is not None:
                self._pipelines.move_to_end(source)
                return hit
            module = self.device.create_shader_module(code=source)
            _, pipe_layout = self._layout(n_bindings)
            hit = self.device.create_compute_pipeline(layout=pipe_layout,
                                                      compute={"module": module, "entry_point": "main"})
            self._pipelines[source] = hit
            while len(self._pipelines) > max(1, self.pipeline_cache_size):
                self._pipelines.popitem(last=False)
            return hit

    def bind_group_layout(self, n_bindings: int):
        with self._lock:
            return self._layout(n_bindings)[0]

    def _layout(self, n: int):
        """Bind-group and pipeline layouts of ``n`` read-write storage bindings. Every
        binding is read-write so that one buffer (the arena) can back several of them."""
        if n not in self._layouts:
            wgpu = self.wgpu
            entries = [{"binding": i, "visibility": wgpu.ShaderStage.COMPUTE,
                        "buffer": {"type": wgpu.BufferBindingType.storage}} for i in range(n)]
            bgl = self.device.create_bind_group_layout(entries=entries)
            self._layouts[n] = (bgl, self.device.create_pipeline_layout(bind_group_layouts=[bgl]))
        return self._layouts[n]

    @property
    def pipeline_count(self) -> int:
        return len(self._pipelines)

    # --- buffers --------------------------------------------------------------------------
    def storage_buffer(self, nbytes: int, label: str = "", mappable: bool = False):
        """A storage buffer; ``mappable``: also mapped by the host for reading and writing
        (only on a device opened with unified memory)."""
        u = self.wgpu.BufferUsage
        if nbytes > self.limits["max-buffer-size"]:
            raise DeviceError(f"{label or 'buffer'} needs {nbytes} bytes, more than this device's "
                                         f"max-buffer-size {self.limits['max-buffer-size']}")
        usage = u.STORAGE | u.COPY_SRC | u.COPY_DST
        if mappable and self.unified_memory:
            usage |= u.MAP_READ | u.MAP_WRITE
        return self.device.create_buffer(size=max(nbytes, 4), usage=usage, label=label)

    def sync(self) -> None:
        """Block until the device has finished all submitted work. (A 4-byte read waits for
        the queue; wgpu-py 0.32's on_submitted_work_done_sync does not work.)"""
        if not hasattr(self, "_sync_buffer"):
            self._sync_buffer = self.storage_buffer(4, "sync")
        self.read(self._sync_buffer, 0, 4)

    def read(self, buffer, offset: int, nbytes: int) -> memoryview:
        """``nbytes`` of ``buffer`` from ``offset`` (4-byte aligned) once the queue has done
        all work submitted so far. The readback is mapped with ``map_sync``, which polls the
        device in this thread: wgpu-py 0.32's ``queue.read_buffer`` waits for its poll
        thread instead, and on the H200 such a wait took about 45 ms of this thread's CPU
        however little the queue held, in bursts of many calls (calibration timed each
        4096^3 matmul tile 2-4x slow and ranked them wrongly)."""
        if not nbytes:
            return memoryview(b"")
        staging = self.readback_buffer(nbytes)
        encoder = self.device.create_command_encoder()
        encoder.copy_buffer_to_buffer(buffer, offset, staging, 0, nbytes)
        self.device.queue.submit([encoder.finish()])
        staging.map_sync(self.wgpu.MapMode.READ)
        try:
            return staging.read_mapped()
        finally:
            staging.unmap()
            staging.destroy()

    def readback_buffer(self, nbytes: int):
        u = self.wgpu.BufferUsage
        return self.device.create_buffer(size=max(nbytes, 4), usage=u.MAP_READ | u.COPY_DST)


PIPELINE_CACHE_SIZE = 256  # compute pipelines kept per device for reuse (see the module docstring)
UNIFIED_MEMORY_FEATURE = "mappable-primary-buffers"  # wgpu-native: MAP_READ/MAP_WRITE on storage buffers
_SHARED_MEMORY_TYPES = ("IntegratedGPU", "CPU")    # adapters whose memory is the host's


def wants_unified_memory(profile: Profile, info, features) -> bool:
    """Whether a device of ``profile`` on this adapter maps its arena (see ``DeviceSpec``):
    never for portable profiles or adapters without wgpu's ``mappable-primary-buffers``;
    with ``"auto"`` only where the adapter shares the host's memory (integrated or CPU)."""
    if profile.portable or not profile.unified_memory or UNIFIED_MEMORY_FEATURE not in features:
        return False
    return profile.unified_memory is True or info.get("adapter_type") in _SHARED_MEMORY_TYPES


_OPEN: dict[Profile, Gpu] = {}
_OPEN_LOCK = threading.Lock()


def opened(label: str) -> Gpu | None:
    """The opened device of profile ``label`` if this process has opened it, else None
    (opens nothing)."""
    with _OPEN_LOCK:
        return _OPEN.get(PROFILES[label]) if label in PROFILES else None


def open_gpu(label: str) -> Gpu:
    """The process-wide opened device of profile ``label`` (opened on first use)."""
    return open_profile(PROFILES[label])


def open_profile(profile: Profile) -> Gpu:
    """The process-wide opened device of ``profile`` (opened on first use)."""
    with _OPEN_LOCK:
        if profile not in _OPEN:
            _OPEN[profile] = Gpu(profile)
        return _OPEN[profile]


def opened_profile(profile: Profile) -> Gpu | None:
    """The opened device of ``profile`` if this process has opened it (opens nothing)."""
    with _OPEN_LOCK:
        return _OPEN.get(profile)
