"""RLX: build a graph once, compile it for a device, run it; backends are plugins.

    from rlx_core import Graph, Session, Shape
    g = Graph("hello")
    x = g.input("x", Shape((1, 4), "f32"))
    w = g.param("w", Shape((4, 2), "f32"))
    y = g.matmul(x, w, Shape((1, 2), "f32"))
    g.set_outputs([y])
    compiled = Session("cpu").compile(g)
    compiled.set_param("w", np.eye(4, 2, dtype=np.float32))
    out = compiled.run({"x": np.array([[1, 2, 3, 4]], np.float32)})

This module and the documented submodules (``ir``, ``reference``, ``runtime``,
``passes``, ``rng``, ``custom``, ``testing``, ``llm``, ``select``, ``hw``) are the
public API that plugins may use.
"""
from . import reference  # noqa: F401  (registers the reference kernels)
from .custom import CustomOp, register_custom_op
from .errors import *  # noqa: F401,F403
from .errors import __all__ as _errors_all
from .ir import Attr, DType, Graph, Node, Ref, Shape, Value, promote
from .reference import evaluate
from .rng import Philox, RngOptions
from .runtime import (Availability, Backend, BackendFactory, CompileCache, CompiledGraph, CompileOptions,
                      Device, ExecutableGraph, Outputs, PrecisionPolicy, Session, device_label, hookimpl,
                      parse_device, register_backends, register_device, registry)

# Device selection and hardware telemetry load on first use: ``import rlx_core`` stays
# cheap for programs that compile for a named device (and for pytest's plugin loading).
_LAZY = {name: "select" for name in (
    "BackendsManifest", "DeviceBenchResult", "DeviceCandidate", "DevicePolicy", "DeviceRouter", "FlexibleSession",
    "GraphDevices", "available_devices", "backends_manifest", "benchmark_devices", "device_report", "devices_for",
    "fastest_device_for", "resolve_device", "advisory_capabilities")} | {"GpuThermal": "hw", "HwSnapshot": "hw"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__version__ = "0.1.0"

__all__ = ["CustomOp", "register_custom_op", "Attr", "DType", "Graph", "Node", "Ref", "Shape", "Value",
           "promote", "evaluate", "Philox", "RngOptions", "Availability", "Backend", "BackendFactory",
           "CompileCache", "CompiledGraph", "CompileOptions", "Device", "ExecutableGraph", "Outputs",
           "PrecisionPolicy", "Session", "device_label", "hookimpl", "parse_device", "register_backends",
           "register_device", "registry", "__version__", "GpuThermal", "HwSnapshot", "BackendsManifest",
           "DeviceBenchResult", "DeviceCandidate", "DevicePolicy", "DeviceRouter", "FlexibleSession", "GraphDevices",
           "available_devices", "backends_manifest", "benchmark_devices", "device_report", "devices_for",
           "fastest_device_for", "resolve_device", "advisory_capabilities", *_errors_all]
