"""The token candidates a sampler chain narrows down (llama.cpp's ``llama_token_data_array``).

A :class:`Candidates` holds parallel arrays of token ids and f32 logits. It starts as
the whole vocabulary in id order; samplers rescale logits in place and drop the tokens
they mask (llama.cpp sets those to -inf or shrinks its array; dropping them is the same
distribution and keeps later steps cheap). ``is_sorted`` says the arrays are ordered by
logit, descending, and a selecting sampler (greedy, dist, mirostat) sets ``selected``.

Ties are broken by position, so every result is reproducible: the "k largest" of equal
logits are the ones that come first, which for a fresh vocabulary means the lowest ids.
"""
from __future__ import annotations

import functools

import numpy as np

from ..errors import InputError

__all__ = ["Candidates", "top_positions", "softmax"]

_SAMPLE_SIZE = 1024       # values a top-k threshold is estimated from
_SMALL = 4096             # below this many candidates, selection works on all of them


class Candidates:
    """Token ids and logits of the tokens still in play for one sampling step."""

    __slots__ = ("ids", "logits", "n_vocab", "is_sorted", "selected", "_ids_are_positions")

    def __init__(self, ids: np.ndarray, logits: np.ndarray, n_vocab: int, is_sorted: bool = False):
        self.ids = ids
        self.logits = logits
        self.n_vocab = n_vocab
        self.is_sorted = is_sorted
        self.selected: int | None = None
        self._ids_are_positions = False

    @classmethod
    def from_logits(cls, logits, row: int | None = None) -> "Candidates":
        """All tokens of a vocabulary, from one row of logits (copied to f32).

        -inf marks a banned token; nan, +inf and a row with no finite logit are errors."""
        where = "logits" if row is None else f"logits row {row}"
        values = np.asarray(logits)
        if values.ndim != 1 or values.size == 0 or not is_real_dtype(values.dtype):
            raise InputError(f"{where} must be a non-empty 1-D array of real numbers, "
                             f"got {values.dtype} of shape {values.shape}")
        values = values.astype(np.float32)           # a copy: samplers change it in place
        check_logits(values, where)
        out = cls(_identity(values.size), values, values.size)
        out._ids_are_positions = True
        return out

    def __len__(self) -> int:
        return self.ids.size

    @property
    def token(self) -> int:
        """The selected token id."""
        if self.selected is None:
            raise InputError("no token was selected: the chain has no selecting sampler at its end")
        return int(self.ids[self.selected])

    def select(self, position: int) -> None:
        self.selected = int(position)

    def keep(self, positions, is_sorted: bool | None = None) -> None:
        """Keep only the candidates at ``positions`` (an index array or a boolean mask), in
        that order; ``is_sorted`` is the new ordering flag (unchanged if None)."""
        self.ids = self.ids[positions]
        self.logits = self.logits[positions]
        self._ids_are_positions = False
        if is_sorted is not None:
            self.is_sorted = is_sorted

    def sort(self) -> None:
        """Order by logit, descending (stable)."""
        if not self.is_sorted:
            self.keep(np.argsort(-self.logits, kind="stable"), is_sorted=True)

    def top(self, k: int) -> None:
        """Keep the ``k`` largest logits, sorted (ties: earlier position first)."""
        if self.is_sorted:
            self.keep(slice(0, k))
        else:
            self.keep(top_positions(self.logits, k), is_sorted=True)

    def softmax(self) -> np.ndarray:
        """Probabilities of the candidates (f64, max-subtracted, -inf -> 0)."""
        return softmax(self.logits)

    def positions_of(self, token_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For ``token_ids`` (ints < n_vocab): (positions of those still present, mask of
        which of ``token_ids`` they are)."""
        token_ids = np.asarray(token_ids, dtype=np.int64)
        if token_ids.size and (token_ids.min() < 0 or token_ids.max() >= self.n_vocab):
            bad = token_ids[(token_ids < 0) | (token_ids >= self.n_vocab)][0]
            raise InputError(f"token id {bad} is outside the vocabulary of {self.n_vocab} tokens")
        if self._ids_are_positions:
            return token_ids, np.ones(token_ids.size, bool)
        order = np.argsort(self.ids)                              # ids are unique
        sorted_ids = self.ids[order]
        slot = np.searchsorted(sorted_ids, token_ids).clip(max=sorted_ids.size - 1)
        found = sorted_ids[slot] == token_ids
        return order[slot[found]], found

    def __repr__(self) -> str:
        return f"Candidates({len(self)} of {self.n_vocab}, sorted={self.is_sorted}, selected={self.selected})"


def is_real_dtype(dtype: np.dtype) -> bool:
    """ints and floats, including ml_dtypes' bfloat16 (numpy sees it as a void kind)."""
    return dtype.kind in "fiu" or dtype.name == "bfloat16"


def check_logits(values: np.ndarray, where: str) -> None:
    """One reduction finds nan (max propagates it), +inf, and an all -inf row."""
    peak = values.max(axis=-1)
    if not np.isfinite(peak).all():
        bad = int(np.flatnonzero(~np.isfinite(np.atleast_1d(peak)))[0])
        row = np.atleast_2d(values)[bad]
        what = "nan" if np.isnan(row).any() else "+inf" if np.isposinf(row).any() else "only -inf (every token banned)"
        where = where if values.ndim == 1 else f"{where} row {bad}"
        raise InputError(f"{where} must hold finite values or -inf (banned tokens) with at least one "
                         f"finite value, got {what}")


def softmax(logits: np.ndarray) -> np.ndarray:
    """f64 softmax of a 1-D array whose max is finite."""
    z = logits.astype(np.float64)
    peak = z.max()
    if not np.isfinite(peak):
        raise InputError("every remaining candidate has logit -inf: no token can be sampled "
                         "(a logit bias or penalty banned them all)")
    z -= peak
    np.exp(z, out=z)
    z /= z.sum()
    return z


def top_positions(logits: np.ndarray, k: int) -> np.ndarray:
    """Positions of the ``k`` largest of ``logits``, by logit descending, ties by position.

    The k-th largest value comes from a partition of a small superset (see
    :func:`_superset_of_top`); all values above it and the first of those equal to it win."""
    n = logits.size
    if k >= n:
        return np.argsort(-logits, kind="stable")
    pool = _superset_of_top(logits, k)
    values = logits[pool]
    kth = np.partition(values, values.size - k)[values.size - k]
    above = values > kth
    chosen = np.concatenate([pool[above], pool[values == kth][:k - int(above.sum())]])
    chosen.sort()
    return chosen[np.argsort(-logits[chosen], kind="stable")]


def _superset_of_top(logits: np.ndarray, k: int) -> np.ndarray:
    """Ascending positions of a subset that holds the ``k`` largest logits.

    A threshold is read off a strided sample so that about ``4k + 8*stride`` values pass
    it (one vectorised compare, instead of partitioning the whole vocabulary); if fewer
    than ``k`` pass -- an adversarial layout -- the whole range is returned. A threshold
    of -inf (most tokens masked, e.g. by top-n-sigma) takes the finite logits and, if they
    are fewer than ``k``, the first -inf positions (the ones ties by position pick):
    partitioning a mostly -inf vocabulary is several times slower than that."""
    n = logits.size
    if n <= _SMALL:
        return _identity(n)
    stride = n // _SAMPLE_SIZE
    sample = logits[::stride]
    rank = min(sample.size, -(-4 * k // stride) + 8)
    threshold = np.partition(sample, sample.size - rank)[sample.size - rank]
    if threshold == -np.inf:
        finite = np.flatnonzero(logits > -np.inf)
        if finite.size >= k:
            return finite
        # the first k - f masked positions lie among the first k (at most f are finite)
        masked = np.flatnonzero(logits[:k] == -np.inf)[:k - finite.size]
        return np.union1d(finite, masked)
    pool = np.flatnonzero(logits >= threshold)
    return pool if pool.size >= k else _identity(n)


@functools.lru_cache(maxsize=8)
def _identity(n: int) -> np.ndarray:
    ids = np.arange(n, dtype=np.int64)
    ids.flags.writeable = False
    return ids
