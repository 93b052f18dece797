"""One exception hierarchy for everything RLX raises on bad input.

Every message names the node, input, parameter or setting at fault and says what was
expected versus what was given, so that a user never has to read a numpy traceback
from deep inside a kernel to find the mistake in their own code.
"""
from __future__ import annotations

__all__ = [
    "RlxError", "GraphError", "ShapeError", "DTypeError", "OpAttributeError",
    "UnsupportedOpError", "InputError", "ParamError", "DeviceError",
    "UnknownDeviceError", "DeviceUnavailableError", "PluginError", "CacheError",
    "KVCacheFullError", "ThermalError", "DeviceFallbackError", "PolicyError", "FrontendError",
    "ArgumentTypeError", "InputTypeError", "GraphFormatError", "ResourceError", "BackendOutputError",
    "ShardingError", "CapabilityError",
]


class RlxError(Exception):
    """Base class of every error RLX raises on purpose."""


class GraphError(RlxError):
    """The graph is malformed: bad node reference, cycle, wrong arity, bad outputs."""


class ShapeError(GraphError):
    """Input shapes of a node do not fit its shape rule (raised while building)."""


class DTypeError(GraphError):
    """Input dtypes of a node are not accepted by its op kind (raised while building)."""


class GraphFormatError(GraphError, ValueError):
    """A serialized graph document does not follow the format (``rlx_core.ir.graph_format``);
    ``path`` is the JSON path of the problem, e.g. ``$.nodes[3].inputs[0]``."""

    def __init__(self, path: str, message: str):
        self.path = path
        super().__init__(f"{path}: {message}")


class OpAttributeError(GraphError):
    """An op attribute is missing, unknown or out of range."""


class UnsupportedOpError(RlxError):
    """A backend cannot run some nodes of a graph; raised at compile time.

    ``offending`` lists ``(node_label, reason)`` pairs, one per node the backend rejects.
    """

    def __init__(self, backend: str, offending: list[tuple[str, str]]):
        self.backend = backend
        self.offending = list(offending)
        lines = "\n".join(f"  {node}: {why}" for node, why in self.offending)
        super().__init__(
            f"backend '{backend}' cannot run {len(self.offending)} node(s) of this graph:\n{lines}")


class CapabilityError(RlxError, NotImplementedError):
    """A compiled graph's backend lacks what the call needs (e.g. ``clone``); the
    message names the backend and the capability."""


class InputError(RlxError):
    """A run was given a missing, unknown, or wrongly shaped/typed input."""


class ArgumentTypeError(RlxError, TypeError):
    """An API call got an argument of the wrong type; the message names the argument."""


class InputTypeError(InputError, ArgumentTypeError):
    """``run``/``run_typed`` got inputs or ``out=`` buffers of the wrong type (a caller
    error like every InputError: fallback chains raise it at once)."""


class ParamError(RlxError):
    """A parameter is unknown, wrongly shaped/typed, or was never set before a run."""


class DeviceError(RlxError):
    """Base for device lookup and availability problems."""


class UnknownDeviceError(DeviceError, ValueError):
    """A device name that no built-in device or installed plugin knows."""


class DeviceUnavailableError(DeviceError):
    """The device is known but cannot be used here (no plugin, no driver, no hardware)."""


class PluginError(RlxError):
    """A backend plugin failed to load, or broke its contract."""


class BackendOutputError(PluginError):
    """A backend's run returned outputs that disagree with the graph (count, dims or
    dtype): a backend failure, which fallback chains answer by trying the next device."""


class ResourceError(RlxError, MemoryError):
    """A compiled graph would need more memory than its device has; the message names the
    node and the bytes (raised at compile time, before anything is allocated)."""


class CacheError(RlxError):
    """A cache file could not be used (callers usually rebuild instead of raising)."""


class KVCacheFullError(RlxError):
    """A KV cache has no free block or slot left for the requested append."""


class ThermalError(RlxError):
    """GPU telemetry or control failed (no permission, unsupported knob, no driver)."""


class PolicyError(RlxError, ValueError):
    """A DevicePolicy setting or RLX_* environment variable has an invalid value."""


class DeviceFallbackError(RlxError):
    """Every device in a fallback chain failed; ``attempts`` holds (device, error) pairs."""

    def __init__(self, attempts: list[tuple[str, BaseException]]):
        self.attempts = list(attempts)
        lines = "\n".join(f"  {dev}: {type(err).__name__}: {err}" for dev, err in self.attempts)
        super().__init__(f"no device in the chain could run the graph:\n{lines}")


class FrontendError(RlxError):
    """A model file uses something the importer cannot map; the message names the node,
    its op type and the opset."""


class ShardingError(RlxError, ValueError):
    """A sharding spec is malformed, does not fit the graph or the devices, or the
    backend cannot shard (``CompileOptions(sharding=...)``); the message names which."""
