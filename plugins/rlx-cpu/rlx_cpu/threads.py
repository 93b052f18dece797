"""How each BLAS call of a run uses the cores: measured once per shape and machine state.

A large matmul can run three ways:

* ``openblas`` -- on OpenBLAS's own threads (all cores). Fastest on a quiet machine
  (its threads spin between calls and share the packing), but OpenBLAS splits a GEMM
  statically and waits for every thread, so while another process holds a core it
  stalls for scheduler time slices (tens of ms);
* ``single`` -- OpenBLAS on one thread: never stalls, one core;
* ``shared`` -- column (or batch) blocks, each a one-thread BLAS call, taken from a
  shared counter by the caller and a helper thread (``rlx_cpu.parallel``): two cores
  when the helper gets one, one core -- not a stall -- when it does not. (The scheduler
  tends to wake the helper on the caller's own core, so on this VM the blocks often run
  one after another: 586 us for 64x784 @ 784x512, one thread 548 us, OpenBLAS's
  threads 295 us.)

Each call has one plan per machine state of ``rlx_cpu.load``. When the machine is
loaded it runs on one thread: OpenBLAS's threads stall then, and with a busy loop
holding one core the shared blocks took 635 us where one thread took 559 us (the same
GEMM). When it is quiet, the first time a call's shapes are compiled its three ways are
timed in interleaved rounds (rotating order, medians); a multi-core way is chosen only
if it beats one thread by ``MARGIN``; where OpenBLAS's own threads are as fast as one
thread (within the cost of switching the count), the call keeps whatever count the call
before it left (``any``). A measurement in which OpenBLAS's threads stalled, or after
which the machine is no longer quiet, decides for this process only; others are stored
with the kernel cache (``decisions.json``, keyed by shapes, strides, dtype and cores),
so they are measured once per machine. A call planned on OpenBLAS's threads carries a
stall limit: the run reports a call that exceeds it, and two such reports in quick
succession switch the state to loaded.

Small matmuls (OpenBLAS runs them on one thread anyway) are left alone.
``RLX_CPU_BLAS_THREADS=openblas|single|shared`` forces one way wherever it applies
(``1`` means ``single``). Delete ``decisions.json`` to measure again.
"""
from __future__ import annotations

import hashlib
import logging
import os
from functools import lru_cache

import numpy as np

from .cache import Decisions
from .kernels import Call
from .load import LOADED, QUIET, machine_load
from .parallel import matmul_blocks, shared_work
from .timing import interleaved_times

__all__ = ["BlasThreads", "blas_threads", "plan_blas_call", "single_threaded", "ways_of", "OWN_THREADS", "MODES"]

log = logging.getLogger("rlx.cpu")
_decisions = Decisions()
MODES = ("openblas", "single", "shared")
OWN_THREADS = 0  # ``Call.threads`` of a call on OpenBLAS's own thread counts
MARGIN = 0.9  # a multi-core way must take at most this fraction of one thread's time
_SWITCH_S = 3e-6  # switching OpenBLAS's count to one thread and back (numpy's and scipy's)
_ROUNDS = 7
# OpenBLAS runs a GEMM of at most this many multiply-adds (M*N*K) on one thread anyway
# (interface/gemm.c: 65536 * GEMM_MULTITHREAD_THRESHOLD, which defaults to 4).
_OPENBLAS_SINGLE_THREADED = 65536 * 4


class BlasThreads:
    """The thread counts of every OpenBLAS in the process (numpy's, and scipy's, which
    numba loads): ``set(n)`` sets them all, ``restore()`` gives each its own count back.
    About 1.5 us per library."""

    def __init__(self, libraries):
        self._libraries = [(lib.set_num_threads, lib.num_threads) for lib in libraries]
        self.cores = max(default for _, default in self._libraries)

    def set(self, n: int) -> None:
        for set_threads, _ in self._libraries:
            set_threads(n)

    def restore(self) -> None:
        for set_threads, default in self._libraries:
            set_threads(default)

    def apply(self, threads: int) -> None:
        """``set(threads)``, or ``restore()`` for ``OWN_THREADS``."""
        self.restore() if threads == OWN_THREADS else self.set(threads)


@lru_cache(maxsize=1)
def blas_threads() -> BlasThreads | None:
    """Control of the OpenBLAS threads, or None (no multi-threaded OpenBLAS loaded)."""
    import numpy  # noqa: F401  (its OpenBLAS must be loaded for threadpoolctl to see it)
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:
        return None
    libraries = [lib for lib in ThreadpoolController().lib_controllers
                 if lib.internal_api == "openblas" and lib.num_threads > 1]
    if not libraries:
        log.info("rlx-cpu: no multi-threaded OpenBLAS found; BLAS threads are left alone")
        return None
    return BlasThreads(libraries)


def plan_blas_call(call: Call, state: str) -> Call:
    """``call`` (an ``np.matmul`` with ``out=``) as a run in machine ``state`` makes it."""
    control = blas_threads()
    if control is None or _multiply_adds(*call.args) <= _OPENBLAS_SINGLE_THREADED:
        return call
    forced = _forced_mode()
    if state == LOADED and forced is None:
        return call._replace(threads=1)
    ways = ways_of(call)
    if forced in ways:
        return ways[forced]
    key = _key(call, control)
    mode, seconds = _parse(_decisions.get(key), ways)
    if mode is None:
        mode, seconds = _parse(_decide({m: c for m, c in ways.items() if m != "any"}, control, key), ways)
    if mode == "openblas":
        return ways[mode]._replace(stall_after=_stall_limit(seconds))
    return ways[mode]


def single_threaded(call: Call) -> Call:
    """``call`` on one OpenBLAS thread (unchanged where ``plan_blas_call`` leaves it alone)."""
    control = blas_threads()
    if control is None or _multiply_adds(*call.args) <= _OPENBLAS_SINGLE_THREADED:
        return call
    return call._replace(threads=1)


def _forced_mode() -> str | None:
    """The way ``RLX_CPU_BLAS_THREADS`` forces (``1`` means ``single``), if any."""
    value = os.environ.get("RLX_CPU_BLAS_THREADS", "")
    value = "single" if value == "1" else value
    return value if value in MODES else None


def ways_of(call: Call) -> dict[str, Call]:
    """The ways ``call`` can run (``shared`` only where it splits into blocks; ``any``:
    with whatever thread count the call before it left)."""
    ways = {"openblas": call._replace(threads=OWN_THREADS), "single": call._replace(threads=1), "any": call}
    blocks = matmul_blocks(*call.args, call.kwargs["out"])
    if blocks is not None:
        ways["shared"] = Call(shared_work().run, (blocks,), threads=1)
    return ways


def _key(call: Call, control: BlasThreads) -> str:
    arrays = [*call.args, call.kwargs["out"]]
    layout = repr([(a.shape, a.strides, a.dtype.str) for a in arrays] + [os.cpu_count(), control.cores])
    return f"blas:{hashlib.sha256(layout.encode()).hexdigest()[:24]}"


def _parse(decided: str | None, ways: dict[str, Call]) -> tuple[str | None, float]:
    """A stored decision "<mode> <median seconds>" as (mode, seconds); (None, 0) when
    missing or unusable here."""
    try:
        mode, seconds = decided.split()
        return (mode, float(seconds)) if mode in ways else (None, 0.0)
    except (AttributeError, ValueError):
        return None, 0.0


def _multiply_adds(a: np.ndarray, b: np.ndarray) -> int:
    """M*N*K of one matrix product of ``a @ b`` (batch dims aside)."""
    m = a.shape[-2] if a.ndim > 1 else 1
    n = b.shape[-1] if b.ndim > 1 else 1
    return m * n * a.shape[-1]


def _stall_limit(seconds: float) -> float:
    """How long a call measured at ``seconds`` may take before it counts as stalled:
    beyond noise, below a scheduler time slice's stall (a lone one is not acted on)."""
    return 3 * seconds + 1e-3


def _decide(ways: dict[str, Call], control: BlasThreads, key: str) -> str:
    """Time the ways, pick one ("<mode> <median seconds>"), and store it if the
    measurement was clean (no stall, the machine still quiet)."""
    load = machine_load()
    times = measure(ways, control)
    medians = {mode: float(np.median(t)) for mode, t in times.items()}
    stalled = "openblas" in times and max(times["openblas"]) > _stall_limit(medians["openblas"])
    if stalled:
        load.report_stall()
        del medians["openblas"]
    fastest = min((m for m in medians if m != "single"), key=medians.get, default="single")
    mode = fastest if medians[fastest] <= MARGIN * medians["single"] else "single"
    if mode == "single" and medians.get("openblas", float("inf")) <= medians["single"] + _SWITCH_S:
        mode = "any"  # as fast either way: not worth switching OpenBLAS's count for
    decided = f"{mode} {medians['single' if mode == 'any' else mode]:.3e}"
    if not stalled and load.state() == QUIET:
        _decisions.set(key, decided)
    log.debug("rlx-cpu: BLAS call %s: %s (medians %s)", key, decided, medians)
    return decided


def measure(ways: dict[str, Call], control: BlasThreads, rounds: int = _ROUNDS) -> dict[str, list[float]]:
    """Seconds per call of each way (``timing.interleaved_times``), each with its thread
    count; OpenBLAS's counts restored after."""
    def timed(c: Call):
        def call():
            control.apply(c.threads)
            c.fn(*c.args, **c.kwargs)
        return call
    try:
        return interleaved_times({name: timed(c) for name, c in ways.items()}, rounds)
    finally:
        control.restore()
