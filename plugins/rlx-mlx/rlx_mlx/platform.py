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

MLX builds code into folders under the temporary directory, which every user shares, and
later loads it from there: CPU kernels (:func:`jit_folder`, checked and made private before
MLX compiles anything, else MLX's compilation is turned off) and CUDA PTX
(:func:`point_ptx_cache` moves it into RLX's cache folder, or into memory).
"""
from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import logging
import os
import shutil
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Iterator

from rlx_core.errors import DeviceUnavailableError, PolicyError
from rlx_core.runtime import Availability
from rlx_core.runtime.safefs import cache_root, open_trusted, private_dir

__all__ = ["DEVICE_ENV", "DEVICES", "BUILDS", "requested_device", "installed_builds", "build_name",
           "cheap_availability", "availability", "mlx_device", "cpu_fusion", "std_temp_dir", "jit_folder",
           "jit_lock", "point_ptx_cache", "PTX_CACHE_ENV", "TF32_ENV", "tf32_enabled"]

DEVICE_ENV = "RLX_MLX_DEVICE"
PTX_CACHE_ENV = "MLX_PTX_CACHE_DIR"  # MLX's CUDA kernel cache folder (see point_ptx_cache)
TF32_ENV = "MLX_ENABLE_TF32"  # MLX's switch; rlx_mlx sets it to 0 where it is unset (see rlx_mlx/__init__.py)
DEVICES = ("gpu", "cpu")
# distribution -> what it is (the Linux builds and the macOS Metal library)
BUILDS = {"mlx-metal": "Metal", "mlx-cuda-13": "CUDA 13", "mlx-cuda-12": "CUDA 12", "mlx-cpu": "CPU"}
log = logging.getLogger("rlx.mlx")
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
    if gpu == "CUDA":
        point_ptx_cache()
    return mx.Device(mx.cpu if requested == "cpu" or gpu is None else mx.gpu)


@functools.lru_cache(maxsize=1)
def point_ptx_cache() -> None:
    """Point MLX's CUDA kernel cache (the PTX it compiles and later loads onto the GPU; by
    default ``<tmp>/mlx/<version>/ptx``, open to every user) at ``MLX_PTX_CACHE_DIR``
    (default ``$XDG_CACHE_HOME/rlx/mlx-ptx``) if that folder is trusted, else at none (an
    empty value: MLX then compiles in memory), with one warning. MLX reads the variable at
    its first CUDA kernel build, which comes after this (called when the device is chosen)."""
    folder = os.environ.get(PTX_CACHE_ENV) or str(cache_root() / "mlx-ptx")
    try:
        private_dir(folder)
        os.environ[PTX_CACHE_ENV] = folder
    except OSError as e:  # UntrustedPathError included
        log.warning("rlx-mlx: not using %s as MLX's PTX cache (%s); MLX compiles CUDA kernels in memory "
                    "for this process", folder, e)
        os.environ[PTX_CACHE_ENV] = ""


_JIT_THREADS = threading.Lock()
_LOCK_NAME = "rlx-mlx-jit.lock"


def std_temp_dir() -> Path:
    """The temporary folder MLX gets from C++'s ``std::filesystem::temp_directory_path()``:
    the first of ``TMPDIR``, ``TMP``, ``TEMP``, ``TEMPDIR`` that is set, else ``/tmp``
    (Python's ``tempfile`` reads them in another order and keeps its first answer)."""
    if os.name == "nt":
        return Path(tempfile.gettempdir())
    for name in ("TMPDIR", "TMP", "TEMP", "TEMPDIR"):
        if value := os.environ.get(name):
            return Path(value)
    return Path("/tmp")


def jit_folder() -> Path | None:
    """``<tmp>/mlx/<version>/cpu``, where MLX's CPU device writes the fused kernels it builds
    and loads them from (``dlopen``), once it is safe to: missing folders are created 0700
    as this user. None when the folder is not trusted (another user's, writable by others,
    a link: :func:`rlx_core.runtime.safefs.private_dir`) or cannot be made: whoever can
    write there runs code in this process, so MLX's compilation is then turned off for the
    process (``mx.disable_compile()``: ops run one by one) after one warning."""
    import mlx.core as mx
    return _checked_jit_folder(std_temp_dir() / "mlx" / mx.__version__ / "cpu")


@functools.lru_cache(maxsize=None)  # MLX reads the variables on every build: one check per folder
def _checked_jit_folder(folder: Path) -> Path | None:
    try:
        return private_dir(folder)
    except OSError as e:  # UntrustedPathError included
        import mlx.core as mx
        mx.disable_compile()
        log.warning("rlx-mlx: not letting MLX build and load CPU kernels in %s (%s); mx.compile is off "
                    "for this process, ops run unfused", folder, e)
        return None


@contextlib.contextmanager
def jit_lock() -> Iterator[None]:
    """Held around the first evaluation of a compiled function on MLX's CPU device, where
    MLX builds its fused kernels: an exclusive lock shared by this user's processes.

    MLX keeps the kernels it builds with the C++ compiler in one folder per version under
    the temporary directory (:func:`jit_folder`, checked here before MLX compiles anything),
    shared by all processes, and a process that finds a kernel's library there loads it --
    also while another process is still writing it, or the source it compiles from
    (pytest-xdist workers compiling the same graphs do exactly that: truncated libraries,
    failed compiles, hangs). With the lock, RLX processes build kernels one at a time;
    later runs, which only load them, do not take it. The lock file lives in that folder
    and is opened without following a link (:func:`~rlx_core.runtime.safefs.open_trusted`)."""
    folder = jit_folder()
    try:
        import fcntl
    except ImportError:  # Windows: no fcntl (and MLX's CPU JIT uses MSVC there)
        fcntl = None
    fd = None
    if folder is not None and fcntl is not None:
        try:
            fd = open_trusted(folder / _LOCK_NAME, writable=True)
        except OSError as e:  # UntrustedPathError (a link, another user's file) included
            log.warning("rlx-mlx: not using the lock file %s (%s); builds are serialized in this process only",
                        folder / _LOCK_NAME, e)
    if fd is None:  # no folder (MLX compiles nothing), no fcntl, or no usable lock file
        with _JIT_THREADS:
            yield
        return
    with _JIT_THREADS:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock
