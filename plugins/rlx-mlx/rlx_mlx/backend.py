"""The mlx backend: every op kind lowered to MLX, each graph traced once and compiled
with ``mx.compile``.

``compile`` looks the graph up in a program cache keyed by what the MLX program
depends on: the graph's fingerprint, the precision policy, MLX's device, the
``compile`` option and the plugin lowerings in use. A second compile of an equal graph
(with another output kind or tracing) reuses the program and gets params of its own.

Backend options (``CompileOptions(backend={...})``):

* ``outputs``: ``"numpy"`` (default; read-only host arrays) or ``"mlx"`` (the MLX arrays,
  evaluation started, not waited for).
* ``compile``: ``True`` (default) runs control-flow-free (sub)graphs under
  ``mx.compile``; ``False`` runs them op by op (for debugging, or to compare).
"""
from __future__ import annotations

from typing import Mapping

from rlx_core.errors import PolicyError
from rlx_core.ir import DType, Graph, Node, all_schemas
from rlx_core.runtime import Availability, Backend, CompileOptions, Device, ProgramCache, backend_knobs, registry

from .executable import OUTPUT_KINDS, MlxExecutable, Program
from .lowering import LOWERINGS
from .platform import TF32_ENV, availability, mlx_device, requested_device, tf32_enabled

__all__ = ["MlxBackend", "BACKEND_OPTIONS", "PROGRAM_CACHE_SIZE", "NEVER", "GPU_LACKS"]

BACKEND_OPTIONS = {"outputs": "numpy", "compile": True}
PROGRAM_CACHE_SIZE = 64
NEVER = frozenset({DType.C128})  # MLX has no complex128
GPU_LACKS = frozenset({DType.F64})  # MLX computes float64 on its CPU device only
# Kinds MLX computes on its GEMM / convolution kernels: TF32 on GPUs unless MLX_ENABLE_TF32=0.
TF32_KINDS = frozenset({"matmul", "conv", "conv_transpose2d", "attention"})


class MlxBackend(Backend):
    name = "mlx"
    device = Device.MLX

    def __init__(self):
        self.requested = requested_device()
        self._availability: Availability | None = None
        self._device = None
        self._programs: ProgramCache[Program] = ProgramCache(PROGRAM_CACHE_SIZE)

    # --- where --------------------------------------------------------------------------
    def is_available(self) -> Availability:
        if self._availability is None:
            self._availability = availability(self.requested)
        return self._availability

    @property
    def mlx_device(self):
        """MLX's device the programs run on (``mx.Device``)."""
        if self._device is None:
            self._device = mlx_device(self.requested)
        return self._device

    @property
    def device_kind(self) -> str:
        """``"gpu"`` or ``"cpu"``: MLX's device, from the probe (imports MLX once)."""
        return self.is_available().detail.get("device", "cpu")

    def lacks(self) -> frozenset:
        """Dtypes this backend never runs on its device."""
        return NEVER | (GPU_LACKS if self.device_kind == "gpu" else frozenset())

    # --- what ---------------------------------------------------------------------------
    def supported_ops(self) -> Mapping[str, "frozenset[DType] | None"]:
        schemas, lacks = all_schemas(), self.lacks()
        return {kind: (schemas[kind].dtypes or frozenset(DType)) - lacks - rule.exclude
                for kind, rule in LOWERINGS.items() if kind in schemas}

    def check_node(self, node: Node) -> str | None:
        lacks = self.lacks()
        wide = sorted({s.dtype.value for s in node.outputs} & {d.value for d in lacks})
        if wide:
            where = "any device" if set(wide) & {d.value for d in NEVER} else "its GPU"
            return f"{node.kind} produces {', '.join(wide)}, which MLX does not compute on {where}"
        if (self.device_kind == "gpu" and node.kind in TF32_KINDS and tf32_enabled()
                and {s.dtype for s in node.outputs} & {DType.F32, DType.C64}):
            return (f"{node.kind} in f32 would run on TF32 tensor cores ({TF32_ENV} is set nonzero; "
                    f"unset it or set it to 0 before importing rlx_mlx)")
        rule = LOWERINGS.get(node.kind)
        if rule is not None and rule.check is not None:
            return rule.check(node, self.device_kind)
        return None

    def advisory_capabilities(self) -> frozenset[str]:
        return MlxExecutable.capabilities

    # --- compile ------------------------------------------------------------------------
    def compile(self, graph: Graph, options: CompileOptions) -> MlxExecutable:
        knobs = _backend_options(options)
        program = self._program(graph, options, knobs["compile"])
        return MlxExecutable(program, graph.name, options, knobs["outputs"])

    def _program(self, graph: Graph, options: CompileOptions, compile: bool) -> Program:
        """The cached program of an equal graph, or a new one (traced now)."""
        extra = registry().op_kernels(self.name)
        key = (graph.fingerprint(), options.precision.value, compile, tuple(sorted(extra)))
        return self._programs.get_or_build(key, lambda: Program(graph, self.mlx_device, extra, compile, self.lacks()))


def _backend_options(options: CompileOptions) -> dict:
    """``options.backend`` checked against :data:`BACKEND_OPTIONS`, defaults filled in."""
    knobs = backend_knobs("mlx", options, BACKEND_OPTIONS, OUTPUT_KINDS)
    if not isinstance(knobs["compile"], bool):
        raise PolicyError(f"mlx backend option compile must be True or False, got {knobs['compile']!r}")
    return knobs
