"""rlx-serve: RLX graphs and ONNX models served on Ray Serve.

    import rlx_serve
    from ray import serve
    rlx_serve.start_local(port=8000, num_cpus=2)        # Ray and Serve on 127.0.0.1 only
    handle = serve.run(rlx_serve.deployment("model.onnx", replicas=2), name="rlx", route_prefix="/")
    handle.predict.remote({"x": x}).result().outputs    # or POST http://127.0.0.1:8000/

Importing the package does not import Ray (``rlx serve --help`` and the ``rlx`` command's
parser stay fast); the names below load their modules on first use.
"""
from __future__ import annotations

import importlib

__all__ = ["deployment", "replica_resources", "Batching", "IngressOptions", "Prediction", "Signature",
           "start_local", "stop_local", "ServeError", "ServeConfigError", "RequestError", "BadRequestError"]

_HOME = {"deployment": "app", "replica_resources": "app", "Batching": "model", "Signature": "model",
         "IngressOptions": "ingress", "Prediction": "reply", "start_local": "local", "stop_local": "local",
         "ServeError": "errors", "ServeConfigError": "errors", "RequestError": "errors", "BadRequestError": "errors"}


def __getattr__(name: str):
    if name in _HOME:
        return getattr(importlib.import_module(f".{_HOME[name]}", __name__), name)
    raise AttributeError(f"module 'rlx_serve' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
