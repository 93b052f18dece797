"""The SIMD convolution routes' calls (``rlx_cpu.jit.simd``'s kernels): weights packed
once (constants) or when they change (params), the tiled and rows kernels per image,
and the two-core way of ``rows`` (``rows2``), see ``rlx_cpu.kernels.conv``.

``geometry`` arguments are ``conv._Geometry`` objects (the conv node's geometry as 2-D).
"""
from __future__ import annotations

import logging
import threading
import time
from typing import NamedTuple

import numba
import numpy as np

from ..jit import generated_kernel, library, specialize
from ..jit.simd import LANES, rows_conv_source, tiled_conv_source
from . import Call

__all__ = ["Epilogue", "tiled_calls", "rows_calls", "padded_images", "WhileQuiet", "Deferred", "Sustained",
           "ROWS_CHANNELS"]

log = logging.getLogger("rlx.cpu")

ROWS_CHANNELS = 8  # output channels per tile of the rows route


class Epilogue(NamedTuple):
    """What a conv route applies to its results as it stores them."""

    bias: np.ndarray | None  # [Co], added per channel
    relu: bool


def _packed(geometry, w4: np.ndarray, lanes: int, fixed_weights: bool) -> tuple[np.ndarray, list[Call]]:
    """The weights packed ``[ceil(Co/lanes), kh, kw, C, lanes]`` (lanes past Co zero), and
    the call that packs them again in a run where they changed: none for constant
    weights, packed now."""
    packed = np.zeros((-(-geometry.out_channels // lanes),) + geometry.kernel + (w4.shape[1], lanes), np.float32)
    if fixed_weights:
        specialize(library().pack_conv_weights, w4, packed)(w4, packed)
        return packed, []
    seen = np.full(w4.shape, np.nan, np.float32)  # differs from any weights: the first run packs
    args = (w4, seen, packed)
    return packed, [Call(specialize(library().repack_conv_weights, *args), args)]


def padded_images(geometry, x4: np.ndarray, scratch: list[np.ndarray]):
    """``(calls, image)`` per image: the image, or its padded copy in ``scratch[0]`` (also
    made where it has no padding but is not C-contiguous: the kernels read it flat)."""
    top, left = geometry.pads[:2]
    for i in range(x4.shape[0]):
        image = x4[i]
        if any(geometry.pads) or not image.flags.c_contiguous:
            pad_args = (image, scratch[0], top, left)
            yield [Call(specialize(library().pad2d, *pad_args), pad_args)], scratch[0]
        else:
            yield [], image


def tiled_calls(geometry, x4: np.ndarray, w4: np.ndarray, scratch: list[np.ndarray],
                 fixed_weights: bool) -> list[Call]:
    """Pack the weights (now if they are constant, else by a call each run), then per image:
    pad, and the tiled kernel into the channels-last result ``scratch[-1]``."""
    packed, calls = _packed(geometry, w4, LANES, fixed_weights)
    tiled = generated_kernel(tiled_conv_source(*geometry.tile()))
    (sh, sw), (dh, dw) = geometry.strides, geometry.dilations
    results = scratch[-1]
    for i, (pad, image) in enumerate(padded_images(geometry, x4, scratch)):
        args = (image, packed, results[i].reshape(geometry.out_hw + (results.shape[2],)), sh, sw, dh, dw)
        calls += pad + [Call(specialize(tiled, *args), args)]
    return calls


def rows_calls(geometry, x4: np.ndarray, w4: np.ndarray, out4: np.ndarray, scratch: list[np.ndarray],
                fixed_weights: bool, two_cores: bool = False, epilogue: Epilogue | None = None) -> list[Call]:
    """Pack the weights, then per image the rows kernel straight into ``out4`` (on a
    C-contiguous copy of an image that is not); ``two_cores``: as a ``WhileQuiet``."""
    packed, calls = _packed(geometry, w4, ROWS_CHANNELS, fixed_weights)
    epilogue = epilogue or Epilogue(None, False)
    bias = np.zeros(geometry.out_channels, np.float32) if epilogue.bias is None else epilogue.bias.reshape(-1)
    variant = dict(relu=epilogue.relu)
    tile = (ROWS_CHANNELS, min(2, geometry.out_hw[0]))
    rows = generated_kernel(rows_conv_source(*tile, **variant))
    sh, (dh, dw), (top, left) = geometry.strides[0], geometry.dilations, geometry.pads[:2]
    for i in range(x4.shape[0]):
        image = x4[i]
        if not image.flags.c_contiguous:
            calls.append(Call(np.copyto, (scratch[0], image)))
            image = scratch[0]
        args = (image, packed, out4[i], sh, dh, dw, top, left, 0, packed.shape[0], bias)
        serial = specialize(rows, *args)
        if two_cores:
            def both(args=args):  # numba's first get_num_threads() starts its threads: 20 ms, also deferred
                parts = min(numba.get_num_threads(), packed.shape[0])
                threads = specialize(generated_kernel(rows_conv_source(*tile, **variant), "kernel_threads"),
                                     *args, parts)
                return lambda *a: threads(*a, parts)
            calls.append(Call(WhileQuiet(serial, Deferred(both), _stall_limit(geometry)), args))
        else:
            calls.append(Call(serial, args))
    return calls


def _stall_limit(geometry) -> float:
    """Seconds beyond which a two-core conv counts as stalled: 3x its time at a low 50
    GFLOP/s, + 1 ms (as ``threads`` limits a BLAS call)."""
    c, _, _ = geometry.image
    flops = 2 * geometry.out_channels * c // geometry.groups * geometry.kernel[0] * geometry.kernel[1] \
        * geometry.out_hw[0] * geometry.out_hw[1]
    return 3 * flops / 50e9 + 1e-3


class Sustained:
    """When two-core conv calls came back to back (each within ``GAP_S`` of the one
    before) for ``SUSTAINED_S``: only then are OpenMP's workers awake. A worker idle
    longer has gone to sleep, and on this VM waking it (its vCPU halted) took 5-8 ms
    -- 100x the conv -- while a call 10 ms after the last waited 60 us. So sparse calls
    (a request now and then) run on one thread, loops of runs on two."""

    GAP_S = 0.005
    SUSTAINED_S = 0.05

    def __init__(self):
        self.last = self.since = -float("inf")

    def start(self, now: float) -> bool:
        """A call starts at ``now``: whether to run it on two cores."""
        if now - self.last > self.GAP_S:
            self.since = now
        return now - self.since >= self.SUSTAINED_S


_sustained = Sustained()  # one OpenMP pool per process


class Deferred:
    """A kernel whose compile ``make()`` runs on a daemon thread of its own once
    ``start()`` is called (the two-core conv kernel: 0.6 s, kept out of the compile of
    the graph; from numba's disk cache it loads at once). ``fn``: the kernel once ready
    (None until then, and after a failed compile, which is logged). Called directly, it
    compiles first where it must (a measurement)."""

    def __init__(self, make):
        self._make, self.fn, self._started = make, None, False

    def start(self) -> None:
        if not self._started:
            self._started = True
            threading.Thread(target=self._compile, name="rlx-cpu-compile", daemon=True).start()

    def _compile(self) -> None:
        try:
            self.fn = self._make()
        except Exception:  # noqa: BLE001 -- the one-thread kernel goes on serving
            log.exception("rlx-cpu: compiling a two-core conv kernel failed; its conv stays on one core")

    def __call__(self, *args):
        if self.fn is None:
            self.fn = self._make()
        return self.fn(*args)


class WhileQuiet:
    """``both(*args)`` (a kernel on numba's threads) while the machine is quiet and the
    calls are sustained (``Sustained``), else ``serial(*args)``; a run of ``both`` over
    ``stall_after`` seconds is reported to ``rlx_cpu.load`` (two in quick succession
    make the machine loaded). A ``Deferred`` ``both`` is started at the first call that
    would run it, and ``serial`` serves until it is ready."""

    def __init__(self, serial, both, stall_after: float, pace: Sustained | None = None):
        from ..load import QUIET, machine_load
        self.serial, self.both, self.stall_after = serial, both, stall_after
        self.pace = pace or _sustained
        self._quiet, self._load = QUIET, machine_load()
        self.__name__ = "rows_conv_while_quiet"

    def _ready(self) -> bool:
        both = self.both
        if isinstance(both, Deferred) and both.fn is None:
            both.start()
            return False
        return True

    def __call__(self, *args):
        t0 = time.perf_counter()
        if self.pace.start(t0) and self._load.state() == self._quiet and self._ready():
            self.both(*args)
            self.pace.last = time.perf_counter()
            if self.pace.last - t0 > self.stall_after:
                self._load.report_stall()
        else:
            self.serial(*args)
            self.pace.last = time.perf_counter()
