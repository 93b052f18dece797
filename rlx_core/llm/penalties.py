"""Samplers driven by the tokens a sequence has emitted: repetition penalties and DRY.

Both keep the history themselves, fed through ``accept(token)`` (llama.cpp's interface:
a chain's ``sample`` accepts the token it picks; feed a prompt with ``accept_all``).
"""
from __future__ import annotations

import math
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from .candidates import Candidates
from .samplers import Sampler
from .validate import LLMConfigError, check_float, check_int

__all__ = ["RepetitionPenalty", "DRY", "repeat_lengths"]

_FLOAT_MAX_LOG = 88.7228391          # ln(f32 max): DRY caps its exponent below it


def _history(last_n: int) -> deque:
    """The window of recent tokens: ``last_n`` of them, all of them for -1."""
    return deque(maxlen=None if last_n < 0 else last_n)


@dataclass
class RepetitionPenalty(Sampler):
    """llama.cpp's ``penalties``: over the last ``last_n`` accepted tokens (-1: all, 0:
    off), each token seen ``c > 0`` times has its logit divided by ``repeat`` if positive,
    multiplied by it otherwise, then lowered by ``c * frequency + presence``.

    (The original RLX subtracted first and divided after; this follows llama.cpp.)"""

    last_n: int = 64
    repeat: float = 1.0
    frequency: float = 0.0
    presence: float = 0.0
    _window: deque = field(init=False, repr=False, compare=False)
    _counts: Counter = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        self.last_n = check_int("RepetitionPenalty last_n", self.last_n, -1)
        self.repeat = check_float("RepetitionPenalty repeat", self.repeat, 0.0)
        if self.repeat == 0:
            raise LLMConfigError("RepetitionPenalty repeat must be > 0 (1 is off), got 0")
        self.frequency = check_float("RepetitionPenalty frequency", self.frequency)
        self.presence = check_float("RepetitionPenalty presence", self.presence)
        self.reset()

    @property
    def is_noop(self) -> bool:
        return self.last_n == 0 or (self.repeat == 1.0 and self.frequency == 0.0 and self.presence == 0.0)

    def reset(self) -> None:
        self._window = _history(self.last_n)
        self._counts = Counter()

    def accept(self, token: int) -> None:
        if self.last_n == 0:
            return
        if len(self._window) == self._window.maxlen:
            oldest = self._window[0]
            self._counts[oldest] -= 1
            if not self._counts[oldest]:
                del self._counts[oldest]
        self._window.append(int(token))
        self._counts[int(token)] += 1

    def apply(self, cands: Candidates) -> None:
        if self.is_noop or not self._counts:
            return
        ids = np.fromiter(self._counts.keys(), np.int64, len(self._counts))
        counts = np.fromiter(self._counts.values(), np.float32, len(self._counts))
        positions, found = cands.positions_of(ids)
        logits = cands.logits[positions]
        logits = np.where(logits <= 0, logits * np.float32(self.repeat), logits / np.float32(self.repeat))
        logits -= counts[found] * np.float32(self.frequency) + np.float32(self.presence)
        cands.logits[positions] = logits
        cands.is_sorted = False


@dataclass
class DRY(Sampler):
    """"Don't Repeat Yourself" (llama.cpp's port of koboldcpp's sampler).

    Over the last ``last_n`` accepted tokens (-1: all), for every earlier place where the
    text so far ends with a repeat of length ``L >= allowed_length`` (see
    :func:`repeat_lengths`), the token that followed that place would extend the repeat:
    its logit is lowered by ``multiplier * base ** (L - allowed_length)`` (the largest
    ``L`` per token; the exponent is capped so the power stays finite in f32).

    ``sequence_breakers`` are token sequences (llama.cpp takes strings and tokenizes them;
    there is no tokenizer here). A repeat never extends back over the most recent
    breaker, and a single-token breaker is never penalised. ``multiplier == 0`` is off.
    """

    multiplier: float
    base: float = 1.75
    allowed_length: int = 2
    last_n: int = -1
    sequence_breakers: Sequence[Sequence[int]] = ()
    _window: deque = field(init=False, repr=False, compare=False)
    _tails: dict = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        self.multiplier = check_float("DRY multiplier", self.multiplier, 0.0)
        self.base = check_float("DRY base", self.base, 1.0)
        self.allowed_length = check_int("DRY allowed_length", self.allowed_length, 0)
        self.last_n = check_int("DRY last_n", self.last_n, -1)
        self.sequence_breakers = tuple(tuple(check_int("DRY sequence breaker token", t, 0) for t in seq)
                                       for seq in self.sequence_breakers)
        self._tails = {}
        for seq in self.sequence_breakers:
            if not seq:
                raise LLMConfigError("DRY sequence breakers must be non-empty token sequences, got ()")
            self._tails.setdefault(seq[0], []).append(seq[1:])
        self.reset()

    @property
    def is_noop(self) -> bool:
        return self.multiplier == 0.0 or self.last_n == 0

    def reset(self) -> None:
        self._window = _history(self.last_n)

    def accept(self, token: int) -> None:
        if not self.is_noop:
            self._window.append(int(token))

    def apply(self, cands: Candidates) -> None:
        if self.is_noop or len(self._window) <= self.allowed_length:
            return
        window = np.fromiter(self._window, np.int64, len(self._window))
        limit = self._repeat_limit(window)
        if limit < self.allowed_length:
            return
        lengths = repeat_lengths(window, limit)
        ends = np.flatnonzero(lengths >= self.allowed_length)
        if not ends.size:
            return
        tokens, slot = np.unique(window[ends + 1], return_inverse=True)
        longest = np.zeros(tokens.size, np.int64)
        np.maximum.at(longest, slot, lengths[ends])
        penalised = np.array([not any(len(t) == 0 for t in self._tails.get(int(tok), ())) for tok in tokens])
        exponent = longest[penalised] - self.allowed_length
        if self.base > 1.000001:
            exponent = np.minimum(exponent, int(_FLOAT_MAX_LOG / math.log(self.base)))
        penalty = (self.multiplier * np.power(self.base, exponent.astype(np.float64))).astype(np.float32)
        positions, found = cands.positions_of(tokens[penalised])
        cands.logits[positions] -= penalty[found]
        cands.is_sorted = False

    def _repeat_limit(self, window: np.ndarray) -> int:
        """How far back a repeat may reach: up to (not over) the newest complete breaker.

        Scanning from the newest token, the first token that heads a breaker whose tail
        follows it in the window ends the scan; ``i`` tokens from the end with a tail of
        ``t`` tokens limits repeats to ``i - t`` (llama.cpp's step 1)."""
        if not self._tails:
            return window.size
        heads = np.flatnonzero(np.isin(window, list(self._tails)))
        last = window.size - 1
        for position in heads[::-1]:
            back = last - position
            matches = [len(tail) for tail in self._tails[int(window[position])]
                       if len(tail) <= back and tuple(window[position + 1:position + 1 + len(tail)]) == tail]
            if matches:
                return back - max(matches)
        return window.size


def repeat_lengths(window: np.ndarray, limit: int) -> np.ndarray:
    """For each position ``e < len(window) - 1``: the length of the longest common suffix of
    ``window[:e+1]`` and ``window`` (how many tokens ending at ``e`` repeat the newest
    ones), capped at ``limit``. llama.cpp gets the same numbers with a reverse Z-algorithm;
    here all places that still match are extended one token back per vectorised step."""
    last = window.size - 1
    lengths = np.zeros(last, np.int64)
    active = np.flatnonzero(window[:last] == window[last])
    n = 0
    while active.size and n < limit:
        n += 1
        lengths[active] = n
        active = active[active >= n]
        active = active[window[active - n] == window[last - n]]
    return lengths
