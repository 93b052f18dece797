"""The plugin contract as pluggy hook specifications (project name ``rlx``).

A plugin distribution names, in the ``rlx.backends`` entry-point group, a module (or
object) holding ``@hookimpl`` functions for any of these hooks::

    [project.entry-points."rlx.backends"]
    mydev = "rlx_mydev.plugin"

The module must be cheap to import: return factories and defer heavy imports to
``BackendFactory.create``.
"""
from __future__ import annotations

import pluggy

hookspec = pluggy.HookspecMarker("rlx")
hookimpl = pluggy.HookimplMarker("rlx")

__all__ = ["hookspec", "hookimpl", "RlxHookSpecs"]


class RlxHookSpecs:
    @hookspec
    def rlx_backends(self):
        """Return a list of :class:`BackendFactory` (one per backend the plugin serves)."""

    @hookspec
    def rlx_custom_ops(self):
        """Return a list of :class:`CustomOp` declarations (new op kinds with a shape
        rule and a reference kernel) that the plugin's graphs may use."""

    @hookspec
    def rlx_op_kernels(self, backend: str):
        """Return ``{op_kind: kernel}`` for extra kernels the plugin provides to the
        backend called ``backend`` (e.g. a custom op's CPU kernel), or None."""

    @hookspec(firstresult=True)
    def rlx_calibrate(self, backend: str, device):
        """Measure ``backend`` on ``device`` for the cost model; return a dict with
        ``sgemm_gflops``, ``memory_bw_gbps`` and ``roundtrip_overhead_ns``, or None."""
