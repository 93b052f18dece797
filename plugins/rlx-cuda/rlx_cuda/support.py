"""What the CUDA backend runs: every op kind of the IR on every dtype its schema
accepts, minus the combinations below (rejected by legalize with the reason).

* ``dense_solve`` on f16/bf16/complex is fine, but cuSOLVER has no integer path: the
  schema already excludes integers.
* ``fft``/``rfft``/``irfft``: any dtype the schema takes (computed in double).
* Kinds are matched against ``LOWERINGS`` so that a kind without a lowering can never
  be claimed.
"""
from __future__ import annotations

from rlx_core.ir import Node, all_schemas
from rlx_core.reference import has_kernel

from .kernels.elementwise import ELEMENTWISE_KINDS
from .lower import ALIAS_KINDS, LOWERINGS, PERSISTENT_KINDS

__all__ = ["supported_ops", "check_node"]

_SOURCES = frozenset({"input", "param"})


def supported_ops() -> dict[str, None]:
    served = set(LOWERINGS) | ELEMENTWISE_KINDS | ALIAS_KINDS | PERSISTENT_KINDS | _SOURCES
    return {kind: None for kind in all_schemas() if kind in served and has_kernel(kind) or kind in _SOURCES}


def check_node(node: Node) -> str | None:
    """Finer rejections than kind/dtype (none today: every accepted combination runs)."""
    return None
