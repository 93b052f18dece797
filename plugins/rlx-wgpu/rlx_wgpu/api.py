"""The public API of rlx-wgpu for other distributions: compile RLX graphs with
rlx-wgpu's WGSL code generation onto a device chosen by the caller.

Everything named in ``__all__`` is public and documented (plugins/rlx-wgpu/README.md,
"Public API"); it follows rlx-wgpu's version (0.1.x keeps it compatible). Every other
module of ``rlx_wgpu`` is internal. rlx-metal is built on this module: it opens a Metal
adapter (or, as a test aid, a Vulkan one) with its own calibration and unified memory,
and runs large GEMMs through a host kernel where that is faster.

Importing this module imports neither wgpu nor the code generators; they load when a
device is opened or a graph compiled.

* :class:`DeviceSpec` -- which adapter to open and how: ``label`` (the RLX device label,
  used in messages, traces and ``describe()``), ``backend_type`` (a wgpu backend type:
  ``"Metal"``, ``"Vulkan"``, ``"D3D12"``, ``"OpenGL"``; None: any), ``power_preference``
  (``"high-performance"``: discrete first, the default order; ``"low-power"``: integrated
  first), ``adapter_name`` (substring of the adapter's name), ``portable`` (WebGPU
  spec-default limits, no optional features), ``unified_memory`` (``True``/``"auto"``:
  map the arena instead of staging copies where wgpu allows -- the adapter has wgpu's
  ``mappable-primary-buffers`` feature and, for ``"auto"``, shares the host's memory: an
  integrated GPU such as Apple silicon, or a CPU adapter), ``tuning`` (a callable
  ``(device) -> dict | None`` supplying the calibration, in particular ``"matmul_tile"``,
  the tile of large products; default: rlx-wgpu's own calibration cache). Frozen and
  hashable: one spec, one opened device per process.
* :func:`open_device` -- the process-wide opened :class:`WgpuDevice` of a spec (raises
  ``DeviceUnavailableError`` naming the adapters seen when none matches);
  :func:`opened_device` -- the same without opening anything.
* :class:`WgpuDevice` -- an opened device: ``info`` (adapter info), ``features``,
  ``limits``, ``f16``, ``unified_memory``, ``tuning`` (the calibration in use; assign to
  replace it), ``summary()``, ``describe()``, ``tuned_matmul_tile()``, ``sync()``.
* :class:`DeviceBackend` -- a ``rlx_core`` Backend over a spec:
  ``DeviceBackend(name, device, spec)``; subclasses override ``device_spec()``,
  ``is_available()``, ``overrides(graph, options)`` and extend ``option_names``.
* :func:`compile_graph` -- ``(graph, options, device, overrides=None) -> ExecutableGraph``
  for a legalized graph; ``overrides(graph, node) -> kernel | None`` runs the nodes it
  gives a kernel for on the host: ``kernel(node, inputs) -> array(s)`` with the
  inputs as host arrays (the run submits what came before, reads them, and writes the
  results back: mapped in place on a unified-memory device). Control-flow bodies are
  compiled with the same overrides.
* :func:`supported_ops`, :func:`check_node` -- what rlx-wgpu claims on a device (the
  ``Backend`` methods, for callers that build their own Backend).
* :data:`CAPABILITIES` -- the executable's capabilities.
* Tiles: :class:`Tile`, :data:`TILES` (the built-in tiles by name), :data:`LARGE_TILES`
  (the ones calibration tries), :func:`parse_tile` (``"BMxBNxBK/TMxTN[/db][/p][/wX]"`` -> Tile,
  or ``RlxError``), :func:`pick_tile` (the tile a product of ``m x n`` gets).
* Calibration: :func:`measure` ``(device, n, tiles=LARGE_TILES, progress=print, timings=3,
  incumbent=None) -> dict`` measures now, uncached (``incumbent``: the tile kept unless
  another is more than 5% faster; ``sgemm_gflops``, ``matmul_tile``, ``matmul_gflops_by_tile``,
  ``memory_bw_gbps``, ``roundtrip_overhead_ns``, ``transfer_bw_gbps``, the adapter
  facts of ``describe()``); :func:`device_seconds` times an executable's device work;
  caching is the caller's (``tuning`` reads it back).
* Adapters: :func:`list_adapters` (the info dict of every adapter wgpu sees),
  :func:`adapter_summary`, :func:`is_software`, :func:`adapter_rank`.
"""
from __future__ import annotations

from importlib import import_module

__all__ = ["DeviceSpec", "WgpuDevice", "open_device", "opened_device", "DeviceBackend", "compile_graph",
           "supported_ops", "check_node", "CAPABILITIES", "Tile", "TILES", "LARGE_TILES", "parse_tile", "pick_tile",
           "measure", "device_seconds", "list_adapters", "adapter_summary", "is_software", "adapter_rank",
           "POWER_PREFERENCES", "UNIFIED_MEMORY_FEATURE"]

# name -> (module, attribute): loaded on first use, so importing the API stays cheap.
_LAZY = {"DeviceSpec": ("gpu", "Profile"), "WgpuDevice": ("gpu", "Gpu"), "POWER_PREFERENCES": ("gpu", None),
         "UNIFIED_MEMORY_FEATURE": ("gpu", None), "adapter_summary": ("gpu", None), "is_software": ("gpu", None),
         "adapter_rank": ("gpu", None), "DeviceBackend": ("backend", None),
         "Tile": ("codegen.linalg", None), "TILES": ("codegen.linalg", None), "parse_tile": ("codegen.linalg", None),
         "pick_tile": ("codegen.linalg", None), "LARGE_TILES": ("calibrate", None),
         "measure": ("calibrate", None), "device_seconds": ("calibrate", None)}


def __getattr__(name: str):
    if name == "CAPABILITIES":
        value = import_module(f"{__package__}.executable").WgpuExecutable.capabilities
    elif name in _LAZY:
        module, attr = _LAZY[name]
        value = getattr(import_module(f"{__package__}.{module}"), attr or name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))


def open_device(spec):
    """The process-wide opened device of ``spec`` (a :class:`DeviceSpec`), opened on first use."""
    from .gpu import open_profile
    return open_profile(spec)


def opened_device(spec):
    """The opened device of ``spec`` if this process has opened it, else None (opens nothing)."""
    from .gpu import opened_profile
    return opened_profile(spec)


def compile_graph(graph, options, device, overrides=None):
    """An ``ExecutableGraph`` of ``graph`` (verified and legalized for this device) on
    ``device`` (a :class:`WgpuDevice`); ``overrides``: see the module docstring."""
    from .executable import WgpuExecutable
    return WgpuExecutable(graph, options, device, overrides)


def supported_ops(device) -> dict:
    """op kind -> dtypes rlx-wgpu runs on ``device`` (``Backend.supported_ops``)."""
    from .support import supported_ops as table
    return table(device.f16)


def check_node(node, device) -> str | None:
    """Why rlx-wgpu cannot run ``node`` on ``device`` beyond its kind and dtype, or None."""
    from .support import check_node as check
    return check(node, device)


def list_adapters() -> list[dict]:
    """The info of every adapter wgpu sees here (``backend_type``, ``adapter_type``,
    ``device``, ``description``, ...); opens no device."""
    from .gpu import _adapters
    return [dict(a.info) for a in _adapters()]
