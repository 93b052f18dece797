"""Where the mlx backend runs: which MLX build is installed and which device it uses.

MLX ships per platform: ``mlx`` with ``mlx-metal`` on macOS (Metal GPU on Apple
silicon), and on Linux ``mlx`` plus one of ``mlx-cpu`` (``pip install "mlx[cpu]"``),
``mlx-cuda-12`` or ``mlx-cuda-13`` (``mlx[cuda12]`` / ``mlx[cuda13]``); plain ``mlx``
does not import on Linux without one of them.

``RLX_MLX_DEVICE`` picks MLX's device, read when the backend starts:

* unset: MLX's default device -- the GPU where the build has one (Metal, CUDA), else the CPU;
* ``gpu``: the GPU; unavailable without one;
* ``cpu``: MLX's CPU device (also on a GPU build).

On the CPU device f64 values run (MLX computes float64 only there); on GPUs they are
rejected at compile time. Nothing here imports MLX at module import time: the entry
point stays cheap.
"""
from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import os
import shutil
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Iterator

from rlx_core.errors import DeviceUnavailableError, PolicyError
from rlx_core.runtime import Availability

__all__ = ["DEVICE_ENV", "DEVICES", "BUILDS", "requested_device", "installed_builds", "build_name",
           "cheap_availability", "availability", "mlx_device", "cpu_fusion", "jit_lock", "TF32_ENV",
           "tf32_enabled"]

DEVICE_ENV = "RLX_MLX_DEVICE"
TF32_ENV = "MLX_ENABLE_TF32"  # MLX's switch; rlx_mlx sets it to 0 where it is unset (see rlx_mlx/__init__.py)
DEVICES = ("gpu", "cpu")
# distribution -> what it is (the Linux builds and the macOS Metal library)
BUILDS = {"mlx-metal": "Metal", "mlx-cuda-13": "CUDA 13", "mlx-cuda-12": "CUDA 12", "mlx-cpu": "CPU"}
_INSTALL = ("pip install 'mlx[cpu]' (or rlx-mlx[cuda12] / rlx-mlx[cuda13] for MLX's CUDA builds)")


def requested_device() -> str | None:
    """The device ``RLX_MLX_DEVICE`` names (None when unset: MLX's default); PolicyError if unknown."""
    raw = os.environ.get(DEVICE_ENV, "").strip().lower()
    if not raw:
        return None
    if raw not in DEVICES:
        raise PolicyError(f"{DEVICE_ENV}={raw!r} names no MLX device; expected one of {', '.join(DEVICES)} "
                          f"(unset means MLX's default device)")
    return raw


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def installed_builds() -> dict[str, str]:
    """The MLX build distributions installed here, with their versions (no import)."""
    return {dist: v for dist in BUILDS if (v := _version(dist)) is not None}


def build_name() -> str:
    """``mlx 0.32.4 (mlx-cpu)``: the installed MLX and the build under it."""
    builds = installed_builds()
    under = ", ".join(builds) or "no build package"
    return f"mlx {_version('mlx') or '?'} ({under})"


def cheap_availability() -> Availability:
    """Availability without importing MLX: a valid ``RLX_MLX_DEVICE``, and on Linux one of
    MLX's builds (plain ``mlx`` alone does not import there)."""
    try:
        requested_device()
    except PolicyError as e:
        return Availability(False, str(e))
    builds = installed_builds()
    if sys.platform.startswith("linux") and not builds:
        return Availability(False, f"mlx is installed without a Linux build (mlx-cpu, mlx-cuda-12 or "
                                   f"mlx-cuda-13), so it cannot import; {_INSTALL}")
    return Availability(True, f"{build_name()}: not probed yet", {"builds": builds})


def tf32_enabled() -> bool:
    """Whether MLX may run float32 GEMMs, convolutions and attention on TF32 tensor cores
    (``MLX_ENABLE_TF32`` set to a nonzero value before rlx_mlx was imported)."""
    raw = os.environ.get(TF32_ENV, "0").strip()
    try:
        return int(raw) != 0
    except ValueError:
        return bool(raw)


@functools.lru_cache(maxsize=1)
def cpu_fusion() -> bool:
    """Whether MLX can fuse on its CPU device: ``mx.compile`` builds fused CPU kernels with
    the system's C++ compiler (``g++`` on Linux, ``clang++`` from Xcode on macOS) and runs
    the ops one by one where there is none."""
    return shutil.which("g++" if sys.platform.startswith("linux") else "clang++") is not None


def availability(requested: str | None) -> Availability:
    """Full probe: MLX imports and has the requested device. Never raises."""
    try:
        import mlx.core as mx
        gpu = _gpu_kind(mx)
    except Exception as e:  # missing build, broken driver, ...
        return Availability(False, f"MLX does not import: {type(e).__name__}: {e}; {_INSTALL}",
                            {"builds": installed_builds()})
    builds = installed_builds()
    if requested == "gpu" and gpu is None:
        return Availability(False, f"{build_name()} has no GPU here (no Metal, no CUDA device); "
                                   f"unset {DEVICE_ENV} (or set it to cpu) to run on MLX's CPU device",
                            {"builds": builds, "mlx": mx.__version__})
    device = "cpu" if requested == "cpu" or gpu is None else "gpu"
    info = _device_info(mx, device)
    name = info.get("device_name") or info.get("name") or ""
    if device == "gpu":
        where = f"{gpu} GPU" + (f" {name}" if name else "")
    else:
        fusion = "fused kernels through the C++ compiler" if cpu_fusion() else \
            "no C++ compiler, so ops run unfused"
        why = "" if gpu is None else f" ({DEVICE_ENV}=cpu)"
        where = f"the CPU{why}" + (f" ({name})" if name else "") + f", {fusion}"
    detail: dict[str, Any] = {"mlx": mx.__version__, "builds": builds, "device": device, "gpu": gpu,
                              "device_name": name, "software": device == "cpu"}
    if device == "cpu":
        detail["cpu_fusion"] = cpu_fusion()
    return Availability(True, f"{build_name()} on {where}", detail)


def _gpu_kind(mx) -> str | None:
    """``"Metal"``, ``"CUDA"`` or None: the GPU this MLX build can use."""
    metal = getattr(mx, "metal", None)
    if metal is not None and metal.is_available():
        return "Metal"
    cuda = getattr(mx, "cuda", None)
    if cuda is not None and cuda.is_available():
        return "CUDA"
    return None


def _device_info(mx, device: str) -> dict:
    try:
        if hasattr(mx, "device_info"):
            try:
                return dict(mx.device_info(mx.Device(getattr(mx, device))))
            except TypeError:  # older signature: the default device only
                return dict(mx.device_info())
        if device == "gpu" and hasattr(mx, "metal"):
            return dict(mx.metal.device_info())
    except Exception:
        pass
    return {}


def mlx_device(requested: str | None) -> Any:
    """MLX's device for ``requested`` (None: the GPU if there is one, else the CPU);
    DeviceUnavailableError when the GPU was asked for and there is none."""
    import mlx.core as mx
    gpu = _gpu_kind(mx)
    if requested == "gpu" and gpu is None:
        raise DeviceUnavailableError(f"{DEVICE_ENV}=gpu, but {build_name()} has no GPU here")
    return mx.Device(mx.cpu if requested == "cpu" or gpu is None else mx.gpu)


_JIT_THREADS = threading.Lock()


@contextlib.contextmanager
def jit_lock() -> Iterator[None]:
    """Held around the first evaluation of a compiled function on MLX's CPU device, where
    MLX builds its fused kernels: an exclusive lock shared by every process on the host.

    MLX keeps the kernels it builds with the C++ compiler in one folder per version under
    the temporary directory, shared by all processes, and a process that finds a kernel's
    library there loads it -- also while another process is still writing it, or the
    source it compiles from (pytest-xdist workers compiling the same graphs do exactly
    that: truncated libraries, failed compiles, hangs). With the lock, RLX processes
    build kernels one at a time; later runs, which only load them, do not take it."""
    try:
        import fcntl
    except ImportError:  # Windows: no fcntl (and MLX's CPU JIT uses MSVC there)
        with _JIT_THREADS:
            yield
        return
    folder = Path(tempfile.gettempdir()) / "mlx"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handle = open(folder / "rlx-mlx-jit.lock", "a+")
    except OSError:  # an unwritable temporary directory: MLX cannot build kernels there either
        with _JIT_THREADS:
            yield
        return
    with _JIT_THREADS, handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
