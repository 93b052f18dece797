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
GEMM). When it is quiet it runs the way stored for its shapes (``rlx_cpu.planner``:
kept with the kernel cache per machine, keyed by shapes, strides, dtype and cores), or,
until one is stored, on OpenBLAS's threads; a compile never times anything. The
planner measures the call's ways in the background once the whole machine is idle:
interleaved rounds (rotating order, medians) on arrays of its own; a multi-core way is
chosen only if it beats one thread by ``MARGIN``; where OpenBLAS's own threads are as
fast as one thread (within the cost of switching the count), the call keeps whatever
count the call before it left (``any``). A measurement in which OpenBLAS's threads
stalled is not stored. A call planned on OpenBLAS's threads carries a stall limit: the
run reports a call that exceeds it, and two such reports in quick succession switch the
state to loaded.

Why measure only on an idle machine: a choice measured while something else held a core
-- another process, or another runtime's thread pool spinning in this same process
(onnxruntime's intra-op threads spin between its runs) -- says one thread, and once
stored, every later process would run the MLP 784-512-512-10 at batch 64 on one thread
(about 950 us where two threads take about 525 us). The executable also keeps each
quiet plan honest at run time (``rlx_cpu.adaptive``): a plan with multi-core calls runs
against one with every call on one thread, and a plan without them against one with
every large call on OpenBLAS's threads (``multi_threaded``).

Small matmuls (OpenBLAS runs them on one thread anyway) are left alone.
``RLX_CPU_BLAS_THREADS=openblas|single|shared`` forces one way wherever it applies
(``1`` means ``single``). Delete ``decisions.json`` to measure again.
"""
from __future__ import annotations

import functools
import hashlib
import logging
import os

import numpy as np

from .cache import Decisions, threadpools
from .kernels import Call
from .kernels.linalg import OPENBLAS_SINGLE_THREADED, multiply_adds
from .load import LOADED
from .parallel import matmul_blocks, shared_work
from .planner import choice
from .timing import interleaved_times

__all__ = ["BlasThreads", "blas_threads", "plan_blas_call", "single_threaded", "multi_threaded", "ways_of",
           "choose", "OWN_THREADS", "MODES"]

log = logging.getLogger("rlx.cpu")
_decisions = Decisions()
MODES = ("openblas", "single", "shared")
OWN_THREADS = 0  # ``Call.threads`` of a call on OpenBLAS's own thread counts
MARGIN = 0.9  # a multi-core way must take at most this fraction of one thread's time
_SWITCH_S = 3e-6  # switching OpenBLAS's count to one thread and back (numpy's and scipy's)
_ROUNDS = 7
_ASSUMED_GFLOPS = 25.0  # for the stall limit of a call not measured yet: well below one core's rate


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


@functools.lru_cache(maxsize=1)
def blas_threads() -> BlasThreads | None:
    """Control of the OpenBLAS threads, or None (no multi-threaded OpenBLAS loaded)."""
    controller = threadpools()
    if controller is None:
        return None
    libraries = [lib for lib in controller.lib_controllers if lib.internal_api == "openblas" and lib.num_threads > 1]
    if not libraries:
        log.info("rlx-cpu: no multi-threaded OpenBLAS found; BLAS threads are left alone")
        return None
    return BlasThreads(libraries)


def plan_blas_call(call: Call, state: str) -> Call:
    """``call`` (an ``np.matmul`` with ``out=``) as a run in machine ``state`` makes it."""
    control = blas_threads()
    if control is None or multiply_adds(*call.args) <= OPENBLAS_SINGLE_THREADED:
        return call
    forced = _forced_mode()
    if state == LOADED and forced is None:
        return call._replace(threads=1)
    ways = ways_of(call)
    if forced in ways:
        return ways[forced]
    layout = _layout(call)
    decided = choice(_decisions, _key(layout, control), functools.partial(_measure_layout, layout, control),
                     valid=lambda v: _parse(v, ways)[0] is not None, default=f"openblas {_estimate(call):.3e}")
    mode, seconds = _parse(decided, ways)
    if mode == "openblas":
        return ways[mode]._replace(stall_after=_stall_limit(seconds))
    return ways[mode]


def single_threaded(call: Call) -> Call:
    """``call`` on one OpenBLAS thread (unchanged where ``plan_blas_call`` leaves it alone)."""
    control = blas_threads()
    if control is None or multiply_adds(*call.args) <= OPENBLAS_SINGLE_THREADED:
        return call
    return call._replace(threads=1)


def multi_threaded(call: Call) -> Call:
    """``call`` on OpenBLAS's own threads, with a stall limit (unchanged where
    ``plan_blas_call`` leaves it alone; as forced where ``RLX_CPU_BLAS_THREADS`` is set)."""
    control = blas_threads()
    if control is None or multiply_adds(*call.args) <= OPENBLAS_SINGLE_THREADED:
        return call
    if _forced_mode() is not None:
        return ways_of(call).get(_forced_mode(), call)
    return call._replace(threads=OWN_THREADS, stall_after=_stall_limit(_estimate(call)))


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


def _layout(call: Call) -> tuple:
    """The shapes, strides and dtypes of ``call``'s operands and output."""
    return tuple((a.shape, a.strides, a.dtype.str) for a in (*call.args, call.kwargs["out"]))


def _key(layout: tuple, control: BlasThreads) -> str:
    text = repr(list(layout) + [os.cpu_count(), control.cores])
    return f"blas:{hashlib.sha256(text.encode()).hexdigest()[:24]}"


def _estimate(call: Call) -> float:
    """Seconds ``call`` takes at most on one core, about (before it was measured)."""
    return 2.0 * multiply_adds(*call.args) / (_ASSUMED_GFLOPS * 1e9)


def _parse(decided: str | None, ways: dict[str, Call]) -> tuple[str | None, float]:
    """A stored decision "<mode> <median seconds>" as (mode, seconds); (None, 0) when
    missing or unusable here."""
    try:
        mode, seconds = decided.split()
        return (mode, float(seconds)) if mode in ways else (None, 0.0)
    except (AttributeError, ValueError):
        return None, 0.0


def _stall_limit(seconds: float) -> float:
    """How long a call measured at ``seconds`` may take before it counts as stalled:
    beyond noise, below a scheduler time slice's stall (a lone one is not acted on)."""
    return 3 * seconds + 1e-3


def _measure_layout(layout: tuple, control: BlasThreads) -> str | None:
    """Time the ways of a call with ``layout`` on arrays of its own: its choice
    (``choose``), or None where OpenBLAS's threads stalled (something took a core)."""
    rng = np.random.default_rng(0)
    a, b, out = (_array_like(shape, strides, np.dtype(dtype), rng) for shape, strides, dtype in layout)
    ways = ways_of(Call(np.matmul, (a, b), {"out": out}))
    del ways["any"]
    times = measure(ways, control)
    if "openblas" in times and max(times["openblas"]) > _stall_limit(float(np.median(times["openblas"]))):
        return None
    return choose({mode: float(np.median(t)) for mode, t in times.items()})


def choose(medians: dict[str, float]) -> str:
    """The choice ("<mode> <median seconds>") from each way's median seconds: the fastest
    multi-core way if it takes at most ``MARGIN`` of one thread's time, else one thread,
    or ``any`` where OpenBLAS's threads are as fast as one (not worth switching for)."""
    fastest = min((m for m in medians if m != "single"), key=medians.get, default="single")
    mode = fastest if medians[fastest] <= MARGIN * medians["single"] else "single"
    if mode == "single" and medians.get("openblas", float("inf")) <= medians["single"] + _SWITCH_S:
        mode = "any"
    return f"{mode} {medians['single' if mode == 'any' else mode]:.3e}"


def _array_like(shape: tuple, strides: tuple, dtype: np.dtype, rng: np.random.Generator) -> np.ndarray:
    """An array of its own with ``shape`` and (non-negative) ``strides``, values in [-1, 1)."""
    if any(s < 0 for s in strides):
        strides = None
    extent = 1 if strides is None else 1 + sum((n - 1) * s // dtype.itemsize for n, s in zip(shape, strides))
    base = rng.uniform(-1, 1, int(np.prod(shape)) if strides is None else max(extent, 1)).astype(dtype)
    if strides is None:
        return base.reshape(shape)
    return np.lib.stride_tricks.as_strided(base, shape, strides)


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
