"""The availability probe: CuPy importable, a CUDA driver, at least one device.

It never raises: every failure (no CuPy, a CuPy whose CUDA libraries do not load, no
driver, no GPU) becomes ``Availability(False, reason)`` naming what is missing. The
import goes through ``runtime.import_cupy`` so tests can stand in for CuPy.
"""
from __future__ import annotations

from rlx_core.runtime import Availability

from . import runtime

__all__ = ["probe"]


def probe(index: int = 0) -> Availability:
    try:
        cp = runtime.import_cupy()
    except ImportError as e:
        return Availability(False, f"missing Python package: cupy ({e})")
    except Exception as e:  # e.g. CuPy built for another CUDA major version
        return Availability(False, f"cupy failed to import: {type(e).__name__}: {e}")
    try:
        count = cp.cuda.runtime.getDeviceCount()
    except Exception as e:
        return Availability(False, f"no usable CUDA driver: {type(e).__name__}: {e}")
    if count <= index:
        return Availability(False, f"no CUDA device {index}: the driver reports {count} device(s)")
    try:
        props = cp.cuda.runtime.getDeviceProperties(index)
        version = cp.cuda.runtime.driverGetVersion()
    except Exception as e:
        return Availability(False, f"CUDA device {index} unreadable: {type(e).__name__}: {e}")
    name = props.get("name", b"?")
    name = name.decode() if isinstance(name, bytes) else str(name)
    detail = {"name": name, "devices": count, "compute_capability": f"{props.get('major')}.{props.get('minor')}",
              "memory_bytes": props.get("totalGlobalMem"), "driver": version, "cupy": getattr(cp, "__version__", "?")}
    return Availability(True, f"{name} (sm_{props.get('major')}{props.get('minor')}, driver {version}, "
                              f"{count} device(s))", detail)
