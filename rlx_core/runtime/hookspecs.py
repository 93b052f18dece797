"""The plugin contract as pluggy hook specifications (project name ``rlx``).

A plugin distribution names, in the ``rlx.backends`` entry-point group, a module (or
object) holding ``@hookimpl`` functions for any of these hooks::

    [project.entry-points."rlx.backends"]
    mydev = "rlx_mydev.plugin"

The module must be cheap to import: return factories and defer heavy imports to
``BackendFactory.create``. It declares the plugin API version it was written for::

    RLX_PLUGIN_API = 1

The registry loads a plugin whose ``RLX_PLUGIN_API`` is in :data:`SUPPORTED_PLUGIN_APIS`;
any other value marks the plugin failed, with a message saying which side to upgrade
(``rlx devices`` lists it). A plugin that declares none is loaded as API 1, with a note.
Version 1 is the contract of this module and of ``rlx_core.runtime.backend``: the hooks
below, ``BackendFactory``, ``Backend`` (``supported_ops`` maps op kinds to ``None`` or a
set of ``DType``) and ``ExecutableGraph``.
"""
from __future__ import annotations

import pluggy

hookspec = pluggy.HookspecMarker("rlx")
hookimpl = pluggy.HookimplMarker("rlx")

__all__ = ["hookspec", "hookimpl", "RlxHookSpecs", "PLUGIN_API_VERSION", "SUPPORTED_PLUGIN_APIS"]

#: The plugin API this rlx-core speaks (what a plugin's ``RLX_PLUGIN_API`` must say).
PLUGIN_API_VERSION = 1
#: Every plugin API version this rlx-core can load.
SUPPORTED_PLUGIN_APIS = frozenset({PLUGIN_API_VERSION})


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
    def rlx_calibrate(self, backend: str, device, force: bool):
        """Measure ``backend`` on ``device`` for the cost model; return a dict with
        ``sgemm_gflops``, ``memory_bw_gbps`` and ``roundtrip_overhead_ns``, or None.
        ``force`` (``rlx calibrate --force``): measure again, ignoring any cache of the
        plugin's own; a result read from such a cache names it in ``read_from``.
        (Implementations written before ``force`` existed may leave it out.)"""
