"""Devices, the backend contract, the plugin registry, sessions and compiled graphs."""
from .backend import CAPABILITIES, Availability, Backend, BackendFactory, ExecutableGraph
from .compile_cache import CompileCache
from .device import DEVICE_PRIORITY, Device, device_label, known_devices, parse_device, register_device
from .hookspecs import PLUGIN_API_VERSION, hookimpl, hookspec
from .options import CompileOptions, PrecisionPolicy
from .program_cache import ProgramCache, backend_knobs
from .registry import ENTRY_POINT_GROUP, register_backends, registry, reset_registry
from .session import CompiledGraph, Outputs, Session, compile_graph
from .sharding import Sharding
from .stream import Handle, Pending
from .trace import Tracer

__all__ = ["CAPABILITIES", "Availability", "Backend", "BackendFactory", "ExecutableGraph", "CompileCache",
           "ProgramCache", "backend_knobs",
           "DEVICE_PRIORITY", "Device", "device_label", "known_devices", "parse_device", "register_device",
           "PLUGIN_API_VERSION", "hookimpl", "hookspec", "CompileOptions", "PrecisionPolicy", "ENTRY_POINT_GROUP",
           "register_backends", "registry", "reset_registry", "CompiledGraph", "Outputs", "Session",
           "compile_graph", "Tracer", "Sharding", "Handle", "Pending"]
