"""Where a program's arguments and results live: one device, or a ``jax.sharding`` mesh.

A :class:`Placement` gives the JAX sharding of every param and input (by name), of the
rng seed, and the ``out_shardings`` the program is jitted with. Without
``CompileOptions(sharding=...)`` everything sits on one device (``device_index``);
with it, :func:`mesh_placement` turns the core's :class:`rlx_core.runtime.Sharding`
into a ``Mesh`` of the platform's first devices and one ``NamedSharding`` per value
(the spec :meth:`Sharding.plan` checked against the graph). XLA's SPMD partitioner
then splits the one program over the mesh and inserts the collectives the shardings
imply: the all-reduce after a row-parallel matmul, the all-gather of gathered outputs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from rlx_core.errors import ShardingError
from rlx_core.ir import Graph
from rlx_core.runtime import Sharding

__all__ = ["Placement", "single_device", "mesh_placement"]


@dataclass(frozen=True)
class Placement:
    """The JAX shardings of one program's values (see the module docstring).

    ``params`` / ``inputs`` map names to shardings; ``replicated`` holds scalars such as
    the seed; ``outputs`` is the jit ``out_shardings`` (None: left to XLA).
    """

    platform: str
    params: Mapping[str, Any]
    inputs: Mapping[str, Any]
    replicated: Any
    outputs: Any = None
    mesh: Any = None  # the jax.sharding.Mesh, None on one device

    @property
    def device_count(self) -> int:
        return 1 if self.mesh is None else self.mesh.size


def single_device(graph: Graph, device) -> Placement:
    """Every value on ``device`` (the program's only one)."""
    import jax
    one = jax.sharding.SingleDeviceSharding(device)
    return Placement(device.platform, dict.fromkeys(graph.param_names, one),
                     dict.fromkeys(graph.input_names, one), one)


def mesh_placement(graph: Graph, sharding: Sharding, platform: str) -> Placement:
    """``sharding`` over the first ``sharding.devices`` devices of ``platform``."""
    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec
    plan = sharding.plan(graph)
    devices = jax.devices(platform)
    if sharding.devices > len(devices):
        hint = (" (XLA:CPU shows more with XLA_FLAGS=--xla_force_host_platform_device_count=N, set before "
                "JAX starts)" if platform == "cpu" else "")
        raise ShardingError(f"mesh {dict(sharding.mesh)} spans {sharding.devices} devices; JAX sees "
                            f"{len(devices)} '{platform}' device(s){hint}")
    mesh = Mesh(np.array(devices[:sharding.devices]).reshape(sharding.axis_sizes), sharding.axis_names)

    def named(spec) -> NamedSharding:
        return NamedSharding(mesh, PartitionSpec(*spec))
    replicated = named(())
    return Placement(platform, {n: named(s) for n, s in plan.params.items()},
                     {n: named(s) for n, s in plan.inputs.items()}, replicated,
                     replicated if sharding.outputs == "gathered" else None, mesh)
