"""Entry-point module (``rlx.backends``: ``toy = "rlx_toy.plugin"``).

The registry imports it in every process that uses RLX, so it must stay cheap: it
declares the device kind, describes the backend and defers the real import to
``create``.
"""
import os

from rlx_core.runtime import Availability, BackendFactory, hookimpl, register_device

RLX_PLUGIN_API = 1  # the plugin API this module was written for

# A device kind of our own: afterwards "toy" parses (Session("toy"), RLX_DEVICES=toy,
# `rlx devices`) like a built-in one. Serving a built-in kind ("cpu") needs no call.
TOY = register_device("toy", "example device: a handful of ops in numpy (rlx-toy)", aliases=("toydev",))


def _probe() -> Availability:
    """The cheap probe: no heavy import, never raises."""
    if os.environ.get("RLX_TOY_DISABLE", "").strip() not in ("", "0"):
        return Availability(False, "RLX_TOY_DISABLE is set")
    return Availability(True, "numpy on the host")


def _create():
    from .backend import ToyBackend  # the heavy part, imported on first use
    return ToyBackend()


@hookimpl
def rlx_backends():
    return [BackendFactory(name="toy", device="toy", create=_create, priority=0,
                           description="example plugin: numpy kernels for a handful of ops",
                           requires=("numpy",), probe=_probe)]
