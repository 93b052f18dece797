"""Samplers that choose the token: greedy, dist (a seeded draw), Mirostat v1 and v2.

A selector sets ``candidates.selected`` and must be the last step of a chain. Draws
come from the selector's own :class:`~rlx_core.rng.Philox` stream: ``reset()`` rewinds
it to the seed, ``clone()`` copies its position, so a clone repeats the original's draws.

Deliberate differences from llama.cpp:

* dist: a 53-bit uniform ``u`` picks the first token whose cumulative probability
  exceeds ``u`` (llama.cpp: "reaches" ``u * sum``), so a zero-probability token is
  never picked, even for ``u = 0``.
* Mirostat selects the token itself. The original RLX emitted a one-hot +inf logit row
  that its final softmax turned into a *uniform* draw over the vocabulary; that bug is
  not reproduced. Mirostat v1's Zipf estimate uses only tokens of non-zero probability,
  and its degenerate cases (flat distribution, ``s_hat = 1``) take their limits instead
  of llama.cpp's float nan.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..rng import Philox
from .candidates import Candidates
from .samplers import Sampler
from .validate import check_float, check_int

__all__ = ["Greedy", "Dist", "MirostatV1", "MirostatV2", "draw_unit", "draw"]

_TWO_POW_53 = float(2 ** 53)
_DRAW_BLOCK = 1024


def draw_unit(rng: Philox) -> float:
    """A uniform float in [0, 1) with 53 random bits, from two u32 of ``rng``."""
    hi, lo = (int(u) for u in rng.u32(2))
    return ((hi >> 5) * 67108864 + (lo >> 6)) / _TWO_POW_53


def draw(probs: np.ndarray, rng: Philox) -> int:
    """Index of the first entry whose cumulative probability exceeds ``u * total`` for a
    uniform ``u``. Long arrays are searched by block sums first, then within one block."""
    target = draw_unit(rng) * float(probs.sum())
    start, stop = 0, probs.size
    if probs.size > _DRAW_BLOCK:
        block_ends = np.cumsum(np.add.reduceat(probs, np.arange(0, probs.size, _DRAW_BLOCK)))
        block = min(int(np.searchsorted(block_ends, target, side="right")), block_ends.size - 1)
        start, stop = block * _DRAW_BLOCK, min((block + 1) * _DRAW_BLOCK, probs.size)
        target -= block_ends[block - 1] if block else 0.0
    cumulative = np.cumsum(probs[start:stop])
    index = min(int(np.searchsorted(cumulative, target, side="right")), stop - start - 1)
    if probs[start + index] == 0:          # a rounding overshoot at the block's end
        index = int(np.flatnonzero(probs[start:stop])[-1])
    return start + index


@dataclass
class Greedy(Sampler):
    """Select the highest logit (the first of equals)."""

    selects = True

    def apply(self, cands: Candidates) -> None:
        cands.select(int(np.argmax(cands.logits)))


@dataclass
class Dist(Sampler):
    """Draw a token from the softmax of the candidates' logits (one draw per step; a
    single candidate is selected without drawing, as in llama.cpp)."""

    seed: int = 0
    rng: Philox = field(init=False, repr=False, compare=False)
    selects = True

    def __post_init__(self):
        self.seed = check_int("Dist seed", self.seed, 0)
        self.reset()

    def reset(self) -> None:
        self.rng = Philox(self.seed)

    def apply(self, cands: Candidates) -> None:
        cands.select(0 if len(cands) == 1 else draw(cands.softmax(), self.rng))


@dataclass
class _Mirostat(Sampler):
    """State shared by both versions: the target surprise ``tau`` (bits), learning rate
    ``eta``, running threshold ``mu`` (starts at ``2 tau``) and the random stream."""

    tau: float = 5.0
    eta: float = 0.1
    seed: int = 0
    mu: float = field(init=False)
    rng: Philox = field(init=False, repr=False, compare=False)
    selects = True

    def __post_init__(self):
        self.tau = check_float(f"{type(self).__name__} tau", self.tau, 0.0)
        self.eta = check_float(f"{type(self).__name__} eta", self.eta, 0.0)
        self.seed = check_int(f"{type(self).__name__} seed", self.seed, 0)
        self.reset()

    def reset(self) -> None:
        self.mu = 2.0 * self.tau
        self.rng = Philox(self.seed)

    def _select_and_learn(self, cands: Candidates) -> None:
        """Draw from the (truncated, sorted) candidates; ``mu -= eta * (surprise - tau)``."""
        probs = cands.softmax()
        index = draw(probs, self.rng)
        cands.select(index)
        self.mu -= self.eta * (-math.log2(probs[index]) - self.tau)


@dataclass
class MirostatV1(_Mirostat):
    """Mirostat 1.0: estimate the Zipf exponent ``s`` from the top ``m`` probabilities
    (least squares over ``t_i = ln((i+2)/(i+1))``, ``b_i = ln(p_i / p_(i+1))``), choose
    ``k = ((eps 2**mu) / (1 - V**-eps)) ** (1/s)`` with ``eps = s - 1`` and ``V`` the
    vocabulary size, keep the top ``k`` (at least 1), draw, and update ``mu``."""

    m: int = 100

    def __post_init__(self):
        self.m = check_int("MirostatV1 m", self.m, 2)
        super().__post_init__()

    def apply(self, cands: Candidates) -> None:
        cands.sort()
        cands.top(self._k(cands.softmax(), cands.n_vocab))
        self._select_and_learn(cands)

    def _k(self, probs: np.ndarray, n_vocab: int) -> int:
        n = probs.size
        positive = int(np.count_nonzero(probs))
        i = np.arange(min(self.m - 1, positive - 1))
        if i.size == 0:
            return 1
        t = np.log((i + 2) / (i + 1))
        s_hat = float((t * np.log(probs[i] / probs[i + 1])).sum() / (t * t).sum())
        if not s_hat > 0:                 # flat distribution: nothing to truncate
            return n
        eps = s_hat - 1.0
        ratio = eps / -math.expm1(-eps * math.log(n_vocab)) if eps else 1.0 / math.log(n_vocab)
        with np.errstate(over="ignore"):
            k = float(np.power(ratio * np.exp2(self.mu), 1.0 / s_hat))
        return int(min(max(k, 1.0), n)) if math.isfinite(k) else n


@dataclass
class MirostatV2(_Mirostat):
    """Mirostat 2.0: keep the most likely tokens while their surprise ``-log2 p`` is at
    most ``mu`` (at least one), renormalise, draw, and update ``mu``."""

    def apply(self, cands: Candidates) -> None:
        cands.sort()
        with np.errstate(divide="ignore"):
            surprise = -np.log2(cands.softmax())
        too_surprising = surprise > self.mu
        keep = int(np.argmax(too_surprising)) if too_surprising.any() else len(cands)
        cands.keep(slice(0, max(keep, 1)))
        self._select_and_learn(cands)
