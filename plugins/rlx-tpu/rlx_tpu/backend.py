"""The tpu backend: every op kind lowered to JAX, compiled once per graph by XLA.

``compile`` looks the graph up in a program cache keyed by what the XLA program depends
on: the graph's fingerprint, the precision policy, the device (or the sharding) and
the plugin lowerings in use. A second compile of an equal graph (also with other output
kinds or tracing) reuses the XLA executable and only gets params of its own.

Backend options (``CompileOptions(backend={...})``):

* ``outputs``: ``"numpy"`` (default; read-only host arrays, see ``executable``) or
  ``"jax"`` (the device arrays, no copy, not waited for).
* ``device_index``: which of the platform's devices runs the program (default 0).

``CompileOptions(sharding=...)`` (or ``Session("tpu", mesh=...)``) compiles the graph
over a mesh of the platform's first devices instead (:mod:`rlx_tpu.sharding`).
"""
from __future__ import annotations

from typing import Mapping

from rlx_core.errors import PolicyError, ShardingError
from rlx_core.ir import DType, Graph, Node, all_schemas
from rlx_core.runtime import Availability, Backend, CompileOptions, Device, ProgramCache, backend_knobs, registry

from .executable import OUTPUT_KINDS, Program, TpuExecutable
from .lowering import LOWERINGS
from .platform import availability, jax_device, requested_platform
from .sharding import mesh_placement, single_device

__all__ = ["TpuBackend", "BACKEND_OPTIONS", "PROGRAM_CACHE_SIZE"]

BACKEND_OPTIONS = {"outputs": "numpy", "device_index": 0}
PROGRAM_CACHE_SIZE = 64
# XLA:TPU has no 64-bit floats; other platforms run every dtype.
_TPU_LACKS = frozenset({DType.F64, DType.C128})


class TpuBackend(Backend):
    name = "tpu"
    device = Device.TPU

    def __init__(self):
        self.platform = requested_platform()
        self._programs: ProgramCache[Program] = ProgramCache(PROGRAM_CACHE_SIZE)

    def is_available(self) -> Availability:
        return availability(self.platform)

    def supported_ops(self) -> Mapping[str, "frozenset[DType] | None"]:
        schemas = all_schemas()
        if self.platform != "tpu":
            return {kind: None for kind in LOWERINGS if kind in schemas}
        return {kind: (schemas[kind].dtypes or frozenset(DType)) - _TPU_LACKS
                for kind in LOWERINGS if kind in schemas}

    def check_node(self, node: Node) -> str | None:
        if self.platform == "tpu":
            wide = sorted({s.dtype.value for s in node.outputs} & {d.value for d in _TPU_LACKS})
            if wide:
                return f"{node.kind} produces {', '.join(wide)}, which TPUs do not compute"
        return None

    def advisory_capabilities(self) -> frozenset[str]:
        return TpuExecutable.capabilities

    def compile(self, graph: Graph, options: CompileOptions) -> TpuExecutable:
        knobs = _backend_options(options)
        program = self._program(graph, options, knobs["device_index"])
        return TpuExecutable(program, graph.name, options, knobs["outputs"])

    def _program(self, graph: Graph, options: CompileOptions, device_index: int) -> Program:
        """The cached program of an equal graph, or a new one (compiled now)."""
        extra = registry().op_kernels(self.name)
        sharding = options.sharding
        key = (graph.fingerprint(), options.precision.value, device_index, sharding, tuple(sorted(extra)))

        def build() -> Program:
            placement = single_device(graph, jax_device(self.platform, device_index)) if sharding is None \
                else mesh_placement(graph, sharding, self.platform)
            return Program(graph, placement, extra, options.rng.mode)
        return self._programs.get_or_build(key, build)


def _backend_options(options: CompileOptions) -> dict:
    """``options.backend`` checked against :data:`BACKEND_OPTIONS`, defaults filled in."""
    knobs = backend_knobs("tpu", options, BACKEND_OPTIONS, OUTPUT_KINDS)
    index = knobs["device_index"]
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise PolicyError(f"tpu backend option device_index must be an integer >= 0, got {index!r}")
    if options.sharding is not None and "device_index" in options.backend:
        raise ShardingError(f"tpu backend option device_index={index!r} and sharding exclude each other: a "
                            f"sharded graph runs on the first {options.sharding.devices} devices of its mesh")
    return knobs
