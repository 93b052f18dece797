"""Samplers that rescale or truncate the candidates, each with llama.cpp's definition.

The interface is llama.cpp's ``llama_sampler``: ``apply(candidates)`` changes the
candidates in place, ``accept(token)`` records each token the sequence emits (the
history penalties look at), ``reset()`` forgets that state, ``clone()`` copies a sampler
with its state. Each sampler shrinks the candidates exactly where llama.cpp shrinks its
array, and masks to -inf where llama.cpp masks (top-n-sigma): the masked tokens stay
candidates of probability 0, so later steps count them as llama.cpp does (XTC's
``min_keep``, dynamic temperature's ``ln n``). Only temperature 0 drops the tokens
llama.cpp sets to -inf; after it a single token has non-zero probability, which no later
step can change. Probabilities are computed in f64 (llama.cpp: f32), so results can
differ from llama.cpp's in the last bits of a probability, never in which tokens survive
except at an exact floating-point tie with a threshold.

Samplers that pick the token (greedy, dist, mirostat) are in :mod:`.selectors`; those
driven by the token history (repetition penalties, DRY) in :mod:`.penalties`.
"""
from __future__ import annotations

import abc
import copy
import math
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from ..rng import Philox
from .candidates import Candidates, top_positions
from .validate import LLMConfigError, check_float, check_int

__all__ = ["Sampler", "Temperature", "DynamicTemperature", "TopK", "TopP", "MinP", "TopNSigma",
           "TypicalP", "XTC", "LogitBias", "entropy"]

_TOP_P_FIRST_TRY = 256    # top-p on unsorted candidates first tries the top this many


class Sampler(abc.ABC):
    """One step of a sampler chain (see the module docstring for the interface)."""

    #: True for samplers that choose the token (they must end a chain)
    selects = False

    @abc.abstractmethod
    def apply(self, cands: Candidates) -> None:
        """Transform (or select from) the candidates in place."""

    def accept(self, token: int) -> None:
        """Record a token the sequence emitted; stateless samplers ignore it."""

    def reset(self) -> None:
        """Forget all state (history, adaptive targets, random stream position)."""

    def clone(self) -> "Sampler":
        """An independent copy, with the current state."""
        return copy.deepcopy(self)


def entropy(probs: np.ndarray) -> float:
    """Shannon entropy in nats; zero-probability terms contribute 0 (llama.cpp's typical
    sampler computes ``0 * log 0 = nan`` there; its dynamic temperature skips them)."""
    nonzero = probs[probs > 0]
    return float(-(nonzero * np.log(nonzero)).sum())


def _scale(cands: Candidates, temperature: float) -> None:
    """llama.cpp's temperature step: ``t <= 0`` keeps only the first highest logit."""
    if temperature <= 0:
        cands.keep(np.argmax(cands.logits)[None], is_sorted=True)
    elif temperature != 1.0:
        cands.logits /= np.float32(temperature)


@dataclass
class Temperature(Sampler):
    """``logits /= t``; ``t <= 0`` is greedy: only the highest logit (the first of equals) stays."""

    t: float

    def __post_init__(self):
        self.t = check_float("Temperature t", self.t)

    def apply(self, cands: Candidates) -> None:
        _scale(cands, self.t)


@dataclass
class DynamicTemperature(Sampler):
    """llama.cpp's ``temp_ext`` (entropy-based dynamic temperature).

    With ``delta <= 0`` it is :class:`Temperature` ``(t)``. Otherwise, over the current
    ``n > 1`` candidates: ``H`` = entropy of their softmax (nats), normalised by ``ln n``;
    ``T = lo + (hi - lo) * (H / ln n) ** exponent`` with ``lo = max(0, t - delta)``,
    ``hi = t + delta``; then the temperature step with ``T``. The original RLX took the
    range as ``(min, max)``: that is ``t = (min + max) / 2``, ``delta = (max - min) / 2``.
    """

    t: float
    delta: float
    exponent: float = 1.0

    def __post_init__(self):
        self.t = check_float("DynamicTemperature t", self.t)
        self.delta = check_float("DynamicTemperature delta", self.delta)
        self.exponent = check_float("DynamicTemperature exponent", self.exponent, 0.0)

    def apply(self, cands: Candidates) -> None:
        if self.delta <= 0:
            _scale(cands, self.t)
            return
        if len(cands) <= 1:
            return
        lo, hi = max(0.0, self.t - self.delta), self.t + self.delta
        normalized = entropy(cands.softmax()) / math.log(len(cands))
        _scale(cands, lo + (hi - lo) * normalized ** self.exponent)


@dataclass
class TopK(Sampler):
    """Keep the ``k`` highest logits (ties: the first ones); ``k <= 0`` or ``k >= n`` is a no-op."""

    k: int

    def __post_init__(self):
        self.k = check_int("TopK k", self.k)

    def apply(self, cands: Candidates) -> None:
        if 0 < self.k < len(cands):
            cands.top(self.k)


@dataclass
class TopP(Sampler):
    """Nucleus: keep the smallest prefix (by probability, descending) whose cumulative
    probability reaches ``p``, and at least ``min_keep`` tokens; ``p >= 1`` is a no-op.

    Unsorted candidates are not sorted in full: the top 256 are tried first (enough for
    a peaked distribution); otherwise :func:`nucleus` finds the prefix from a histogram,
    as llama.cpp's bucket sort does, and the kept tokens are left unsorted."""

    p: float
    min_keep: int = 0

    def __post_init__(self):
        self.p = check_float("TopP p", self.p, 0.0, 1.0)
        self.min_keep = check_int("TopP min_keep", self.min_keep, 0)

    def apply(self, cands: Candidates) -> None:
        if self.p >= 1.0:
            return
        probs = cands.softmax()
        n = len(cands)
        head = np.arange(n) if cands.is_sorted else top_positions(cands.logits, min(_TOP_P_FIRST_TRY, n))
        stop = _prefix_reaching(np.cumsum(probs[head]), self.p)
        if stop is not None or head.size == n:
            kept, is_sorted = head[:stop or n], True
        else:
            kept, is_sorted = nucleus(cands.logits, probs, self.p), False
        if kept.size < self.min_keep:
            cands.top(self.min_keep)
        else:
            cands.keep(kept, is_sorted)


def _prefix_reaching(cumulative: np.ndarray, p: float) -> int | None:
    """Length of the shortest prefix whose cumulative sum is >= p (None if none is)."""
    reached = cumulative >= p
    return int(np.argmax(reached)) + 1 if reached.any() else None


def nucleus(logits: np.ndarray, probs: np.ndarray, p: float, bins: int = 2048) -> np.ndarray:
    """Positions of the shortest by-logit-descending prefix with probability mass >= p,
    without sorting: the mass per logit bin locates the bin where the prefix ends, and
    only that bin is sorted (ties by position). Masses are summed per bin, so the cut can
    differ from a sequential sum by rounding alone."""
    top, low = logits.max(), logits.min()
    banned = low == -np.inf
    if banned:
        low = logits[logits > -np.inf].min()
    if top == low:                                      # flat: by position among the finite ones
        finite = np.flatnonzero(logits > -np.inf) if banned else np.arange(logits.size)
        return finite[:_prefix_reaching(np.cumsum(probs[finite]), p) or finite.size]
    depth = (float(top) - logits.astype(np.float64)) * ((bins - 1) / (float(top) - float(low)))  # f64: tiny ranges
    if banned:
        depth[logits == -np.inf] = bins - 1             # probability 0; sorted last within the bin
    slot = depth.astype(np.intp)                        # 0 .. bins - 1 (no clamp: np.minimum is slow)
    cumulative = np.cumsum(np.bincount(slot, weights=probs, minlength=bins))
    edge = min(int(np.searchsorted(cumulative, p)), bins - 1)
    inside = np.flatnonzero(slot == edge)
    inside = inside[np.argsort(-logits[inside], kind="stable")]
    before = cumulative[edge - 1] if edge else 0.0
    stop = _prefix_reaching(before + np.cumsum(probs[inside]), p) or inside.size
    return np.concatenate([np.flatnonzero(slot < edge), inside[:stop]])


@dataclass
class MinP(Sampler):
    """Keep tokens with ``p >= p_min * p_max`` -- ``logit >= max + ln(p_min)`` in f32 --
    and at least ``max(min_keep, 1)`` (the highest ones); ``p_min <= 0`` is a no-op and
    ``p_min > 1`` keeps only the highest."""

    p: float
    min_keep: int = 0

    def __post_init__(self):
        self.p = check_float("MinP p", self.p, 0.0)
        self.min_keep = check_int("MinP min_keep", self.min_keep, 0)

    def apply(self, cands: Candidates) -> None:
        if self.p <= 0.0:
            return
        floor = cands.logits.max() + np.log(np.float32(self.p))
        passing = cands.logits >= floor
        count = int(passing.sum())
        if count >= max(self.min_keep, 1):
            cands.keep(passing)
        else:
            cands.top(max(self.min_keep, 1))


@dataclass
class TopNSigma(Sampler):
    """Set logits below ``max - n * sigma`` to -inf, with the (population) standard
    deviation over the finite logits; ``n <= 0`` is a no-op. As in llama.cpp the cut
    tokens stay candidates (of probability 0): later steps count them."""

    n: float

    def __post_init__(self):
        self.n = check_float("TopNSigma n", self.n)

    def apply(self, cands: Candidates) -> None:
        if self.n <= 0 or len(cands) <= 1:
            return
        logits = cands.logits
        finite = logits[logits > -np.inf] if logits.min() == -np.inf else logits
        cutoff = finite.max() - self.n * finite.std(dtype=np.float64)
        logits[logits < cutoff] = -np.inf           # a sorted order stays sorted


@dataclass
class TypicalP(Sampler):
    """Locally typical sampling: with ``H`` the entropy of the softmax, order tokens by
    ``|-ln p - H|`` ascending and keep the shortest such prefix whose cumulative probability
    exceeds ``p`` (strictly) with at least ``min_keep`` tokens; ``p >= 1`` is a no-op.
    The result is in that order (not sorted by logit). Zero-probability tokens have
    score +inf and their (nan in llama.cpp) entropy term is 0."""

    p: float
    min_keep: int = 0

    def __post_init__(self):
        self.p = check_float("TypicalP p", self.p, 0.0, 1.0)
        self.min_keep = check_int("TypicalP min_keep", self.min_keep, 0)

    def apply(self, cands: Candidates) -> None:
        if self.p >= 1.0:
            return
        cands.sort()
        probs = cands.softmax()
        with np.errstate(divide="ignore"):
            scores = np.abs(-np.log(probs) - entropy(probs))
        order = np.argsort(scores, kind="stable")
        cumulative = np.cumsum(probs[order])
        reached = (cumulative > self.p) & (np.arange(1, order.size + 1) >= self.min_keep)
        stop = int(np.argmax(reached)) + 1 if reached.any() else order.size
        cands.keep(order[:stop], is_sorted=False)


@dataclass
class XTC(Sampler):
    """Exclude Top Choices: with chance ``probability`` (one f32 draw from its own
    Philox stream per step with >= 2 candidates), remove every token whose probability
    is ``>= threshold`` except the least likely of them, keeping at least ``min_keep``
    (masked candidates count, as in llama.cpp). ``probability <= 0`` or ``threshold >
    0.5`` disables it (then nothing is drawn). A token of probability 0 is never "above"
    the threshold: with ``threshold == 0`` llama.cpp would keep only the last -inf token
    and select it; here the least likely token of positive probability stays."""

    probability: float
    threshold: float
    min_keep: int = 0
    seed: int = 0
    rng: Philox = field(init=False, repr=False)

    def __post_init__(self):
        self.probability = check_float("XTC probability", self.probability, 0.0, 1.0)
        self.threshold = check_float("XTC threshold", self.threshold, 0.0, 1.0)
        self.min_keep = check_int("XTC min_keep", self.min_keep, 0)
        self.seed = check_int("XTC seed", self.seed, 0)
        self.reset()

    def reset(self) -> None:
        self.rng = Philox(self.seed)

    def apply(self, cands: Candidates) -> None:
        if self.probability <= 0 or self.threshold > 0.5 or len(cands) < 2:
            return
        if self.rng.random() > self.probability:
            return
        # the tokens at or above the threshold are exactly the leading run of the sorted
        # candidates; all but the least likely of them (the last of equals) go
        probs = cands.softmax()
        above = np.flatnonzero((probs >= self.threshold) & (probs > 0))
        if above.size < 2 or len(cands) - (above.size - 1) < self.min_keep:
            return
        logits = cands.logits[above]
        least = above[np.flatnonzero(logits == logits.min())[-1]]
        drop = np.zeros(len(cands), bool)
        drop[above] = True
        drop[least] = False
        cands.keep(~drop)


@dataclass
class LogitBias(Sampler):
    """Add ``bias[token]`` to those tokens' logits (-inf bans a token). Token ids must
    exist in the vocabulary: an id past its end is an error (the original ignored it)."""

    bias: Mapping[int, float]
    _ids: np.ndarray = field(init=False, repr=False)
    _values: np.ndarray = field(init=False, repr=False)

    def __post_init__(self):
        if not isinstance(self.bias, Mapping):
            raise LLMConfigError(f"LogitBias takes a mapping token id -> bias, got {type(self.bias).__name__}")
        items = sorted((check_int("LogitBias token id", t, 0), _check_bias(t, b)) for t, b in self.bias.items())
        self.bias = dict(items)
        self._ids = np.array([t for t, _ in items], np.int64)
        self._values = np.array([b for _, b in items], np.float32)

    def apply(self, cands: Candidates) -> None:
        positions, found = cands.positions_of(self._ids)
        cands.logits[positions] += self._values[found]
        cands.is_sorted = False


def _check_bias(token, value) -> float:
    if isinstance(value, (int, float)) and value == -math.inf:
        return -math.inf
    return check_float(f"LogitBias bias of token {token}", value)
