"""Sampler chains, their builder, the flat :class:`SampleOpts`, and batched sampling.

A :class:`SamplerChain` is itself a :class:`Sampler` (as in llama.cpp): ``apply`` runs
its steps in order, ``accept``/``reset``/``clone`` reach every step. It always ends with
exactly one selecting step; if none is given, ``Dist(seed)`` is appended.
``chain.sample(logits)`` runs the chain on one row of logits, accepts the chosen
token and returns it; :func:`sample_batch` does that for a ``[batch, vocab]`` array with
one chain per row.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Iterable, Mapping, Sequence

import numpy as np

from ..errors import InputError
from ..rng import combine_seed
from .candidates import Candidates, check_logits, is_real_dtype
from .penalties import DRY, RepetitionPenalty
from .samplers import XTC, DynamicTemperature, LogitBias, MinP, Sampler, Temperature, TopK, TopNSigma, TopP, TypicalP
from .selectors import Dist, Greedy, MirostatV1, MirostatV2
from .validate import LLMConfigError, check_float, check_int

__all__ = ["SamplerChain", "ChainBuilder", "SampleOpts", "sample_batch"]

_XTC_STREAM = 1      # XTC draws from combine_seed(seed, 1); selectors from seed itself


class SamplerChain(Sampler):
    """Samplers applied in order, the last one selecting the token."""

    selects = True

    def __init__(self, steps: Iterable[Sampler], seed: int = 0):
        steps = list(steps)
        for i, step in enumerate(steps):
            if not isinstance(step, Sampler):
                raise LLMConfigError(f"chain step {i} must be a Sampler, got {type(step).__name__}")
            if step.selects and i != len(steps) - 1:
                raise LLMConfigError(f"chain step {i} ({type(step).__name__}) selects the token, so it must be "
                                     f"the last step, but {len(steps) - 1 - i} step(s) follow it")
        if not steps or not steps[-1].selects:
            steps.append(Dist(check_int("chain seed", seed, 0)))
        self.steps = steps

    @staticmethod
    def builder(seed: int = 0) -> "ChainBuilder":
        return ChainBuilder(seed)

    def apply(self, cands: Candidates) -> None:
        for step in self.steps:
            step.apply(cands)

    def accept(self, token: int) -> None:
        for step in self.steps:
            step.accept(token)

    def accept_all(self, tokens: Iterable[int]) -> None:
        """Accept each of ``tokens`` in order (e.g. the prompt, before the first sample)."""
        for token in tokens:
            self.accept(int(token))

    def reset(self) -> None:
        for step in self.steps:
            step.reset()

    def clone(self) -> "SamplerChain":
        return SamplerChain([step.clone() for step in self.steps])

    def sample(self, logits, row: int | None = None) -> int:
        """Choose a token from one row of logits ``[vocab]``, accept it, return it."""
        cands = Candidates.from_logits(logits, row)
        self.apply(cands)
        token = cands.token
        self.accept(token)
        return token

    @property
    def is_greedy(self) -> bool:
        """True when the chain always picks the highest raw logit (``argmax``)."""
        return len(self.steps) == 1 and isinstance(self.steps[0], Greedy)

    def __repr__(self) -> str:
        return f"SamplerChain([{', '.join(map(repr, self.steps))}])"


class ChainBuilder:
    """Fluent construction: ``SamplerChain.builder(seed).top_k(40).temperature(0.8).build()``.

    Random steps take their streams from the builder's seed: selectors use ``seed``,
    XTC ``combine_seed(seed, 1)`` (llama.cpp seeds both with the same value, so its XTC
    and dist draws are the same numbers)."""

    def __init__(self, seed: int = 0):
        self.seed = check_int("chain seed", seed, 0)
        self._steps: list[Sampler] = []

    def push(self, sampler: Sampler) -> "ChainBuilder":
        self._steps.append(sampler)
        return self

    def logit_bias(self, bias: Mapping[int, float]) -> "ChainBuilder":
        return self.push(LogitBias(bias))

    def penalties(self, last_n: int = 64, repeat: float = 1.0, frequency: float = 0.0,
                  presence: float = 0.0) -> "ChainBuilder":
        return self.push(RepetitionPenalty(last_n, repeat, frequency, presence))

    def dry(self, multiplier: float, base: float = 1.75, allowed_length: int = 2, last_n: int = -1,
            sequence_breakers: Sequence[Sequence[int]] = ()) -> "ChainBuilder":
        return self.push(DRY(multiplier, base, allowed_length, last_n, sequence_breakers))

    def top_n_sigma(self, n: float) -> "ChainBuilder":
        return self.push(TopNSigma(n))

    def top_k(self, k: int) -> "ChainBuilder":
        return self.push(TopK(k))

    def typical_p(self, p: float, min_keep: int = 0) -> "ChainBuilder":
        return self.push(TypicalP(p, min_keep))

    def top_p(self, p: float, min_keep: int = 0) -> "ChainBuilder":
        return self.push(TopP(p, min_keep))

    def min_p(self, p: float, min_keep: int = 0) -> "ChainBuilder":
        return self.push(MinP(p, min_keep))

    def xtc(self, probability: float, threshold: float, min_keep: int = 0) -> "ChainBuilder":
        return self.push(XTC(probability, threshold, min_keep, combine_seed(self.seed, _XTC_STREAM)))

    def temperature(self, t: float) -> "ChainBuilder":
        return self.push(Temperature(t))

    def dynamic_temperature(self, t: float, delta: float, exponent: float = 1.0) -> "ChainBuilder":
        return self.push(DynamicTemperature(t, delta, exponent))

    def greedy(self) -> "ChainBuilder":
        return self.push(Greedy())

    def dist(self) -> "ChainBuilder":
        return self.push(Dist(self.seed))

    def mirostat_v1(self, tau: float = 5.0, eta: float = 0.1, m: int = 100) -> "ChainBuilder":
        return self.push(MirostatV1(tau, eta, self.seed, m))

    def mirostat_v2(self, tau: float = 5.0, eta: float = 0.1) -> "ChainBuilder":
        return self.push(MirostatV2(tau, eta, self.seed))

    def build(self) -> SamplerChain:
        return SamplerChain(self._steps, self.seed)


@dataclass
class SampleOpts:
    """Flat sampling settings with the meaning of llama.cpp's ``common_params_sampling``.
    The default is greedy decoding; :meth:`llama_defaults` gives llama.cpp's.

    Field names -- where llama.cpp and the original RLX (``rlx_runtime::lm::SampleOpts``)
    agree, that name; where they differ, the one named here:

    * Both: ``top_k``, ``top_p``, ``min_p``, ``top_n_sigma``, ``min_keep``,
      ``xtc_threshold``, ``dry_multiplier``, ``dry_base``, ``dry_allowed_length``,
      ``dry_sequence_breakers`` (token sequences here; llama.cpp takes strings),
      ``mirostat``, ``mirostat_tau``, ``mirostat_eta``.
    * llama.cpp's: ``xtc_probability`` (RLX: ``xtc_prob``), ``dynatemp_range`` and
      ``dynatemp_exponent`` (RLX: ``dynamic_temp = (min, max)``, ``dynamic_temp_exponent``;
      ``(min, max)`` is ``temperature = (min + max) / 2``, ``dynatemp_range = (max - min) / 2``),
      ``logit_bias`` and ``seed`` (not in RLX's).
    * The original RLX's: ``temperature`` (llama.cpp: ``temp``), ``typical_p`` (``typ_p``),
      ``repetition_penalty`` (``penalty_repeat``), ``frequency_penalty`` (``penalty_freq``),
      ``presence_penalty`` (``penalty_present``), ``repetition_window`` (``penalty_last_n``),
      ``mirostat_m`` (llama.cpp fixes m = 100).
    * Neither: ``dry_window`` is llama.cpp's ``dry_penalty_last_n``, named after
      ``repetition_window``. RLX's ``dry_max_ngram`` is not kept (llama.cpp has no such cap).

    Defaults are llama.cpp's where it has the field, except the greedy ``temperature``,
    ``top_k``, ``top_p``, ``min_p`` (see :meth:`llama_defaults`), ``top_n_sigma = 0``
    (llama.cpp: -1; both are off), no ``dry_sequence_breakers`` (llama.cpp's are strings)
    and ``seed = 0`` (llama.cpp's default picks a random seed). ``min_keep`` is llama.cpp's
    0 (the original RLX: 1).

    Off values: ``top_k <= 0``, ``top_p >= 1``, ``min_p <= 0``, ``typical_p >= 1``,
    ``top_n_sigma <= 0``, ``xtc_probability <= 0``, ``dry_multiplier <= 0``,
    ``dynatemp_range <= 0``, ``repetition_penalty == 1`` with zero frequency/presence,
    ``mirostat == 0``. ``temperature <= 0`` is greedy."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    typical_p: float = 1.0
    top_n_sigma: float = 0.0
    dynatemp_range: float = 0.0
    dynatemp_exponent: float = 1.0
    repetition_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    repetition_window: int = 64
    dry_multiplier: float = 0.0
    dry_base: float = 1.75
    dry_allowed_length: int = 2
    dry_window: int = -1
    dry_sequence_breakers: tuple = ()
    xtc_probability: float = 0.0
    xtc_threshold: float = 0.1
    mirostat: int = 0
    mirostat_tau: float = 5.0
    mirostat_eta: float = 0.1
    mirostat_m: int = 100
    min_keep: int = 0
    logit_bias: Mapping[int, float] = field(default_factory=dict)
    seed: int = 0

    def __post_init__(self):
        for f in fields(self):
            if f.type == "float":
                setattr(self, f.name, check_float(f"SampleOpts.{f.name}", getattr(self, f.name)))
            elif f.type == "int":
                setattr(self, f.name, check_int(f"SampleOpts.{f.name}", getattr(self, f.name)))
        self.mirostat = check_int("SampleOpts.mirostat", self.mirostat, 0, 2)
        self.into_chain()             # the samplers check their own ranges

    @classmethod
    def greedy(cls, **overrides) -> "SampleOpts":
        return cls(**overrides)

    @classmethod
    def nucleus(cls, temperature: float, top_p: float, **overrides) -> "SampleOpts":
        return cls(temperature=temperature, top_p=top_p, **overrides)

    @classmethod
    def llama_defaults(cls, **overrides) -> "SampleOpts":
        """llama.cpp's defaults: top-k 40, top-p 0.95, min-p 0.05, temperature 0.8."""
        return cls(**{"temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05, **overrides})

    def is_greedy(self) -> bool:
        return self.temperature <= 0 and self.mirostat == 0

    def is_classic(self) -> bool:
        """Only temperature / top-k / top-p are active: the fast path applies (greedy is
        a plain argmax)."""
        return (self.dynatemp_range <= 0 and self.typical_p >= 1 and self.top_n_sigma <= 0
                and self.min_p <= 0 and self.xtc_probability <= 0 and self.dry_multiplier <= 0
                and self.mirostat == 0 and not self._penalties_active() and not self.logit_bias)

    def _penalties_active(self) -> bool:
        return (self.repetition_penalty != 1.0 or self.frequency_penalty != 0.0
                or self.presence_penalty != 0.0) and self.repetition_window != 0

    def into_chain(self) -> SamplerChain:
        """The chain in llama.cpp's order: logit bias, then either penalties -> DRY ->
        top-n-sigma -> top-k -> typical -> top-p -> min-p -> XTC -> temperature -> dist,
        or (Mirostat) temperature -> mirostat. Inactive steps are left out."""
        b = SamplerChain.builder(self.seed)
        if self.logit_bias:
            b.logit_bias(self.logit_bias)
        if self.mirostat:
            b.temperature(self.temperature)
            if self.mirostat == 1:
                return b.mirostat_v1(self.mirostat_tau, self.mirostat_eta, self.mirostat_m).build()
            return b.mirostat_v2(self.mirostat_tau, self.mirostat_eta).build()
        if self._penalties_active():
            b.penalties(self.repetition_window, self.repetition_penalty, self.frequency_penalty,
                        self.presence_penalty)
        if self.dry_multiplier > 0:
            b.dry(self.dry_multiplier, self.dry_base, self.dry_allowed_length, self.dry_window,
                  self.dry_sequence_breakers)
        if self.top_n_sigma > 0:
            b.top_n_sigma(self.top_n_sigma)
        if self.top_k > 0:
            b.top_k(self.top_k)
        if self.typical_p < 1:
            b.typical_p(self.typical_p, self.min_keep)
        if self.top_p < 1:
            b.top_p(self.top_p, self.min_keep)
        if self.min_p > 0:
            b.min_p(self.min_p, self.min_keep)
        if self.xtc_probability > 0:
            b.xtc(self.xtc_probability, self.xtc_threshold, self.min_keep)
        if self.dynatemp_range > 0:
            b.dynamic_temperature(self.temperature, self.dynatemp_range, self.dynatemp_exponent)
        elif self.temperature != 1.0:
            b.temperature(self.temperature)
        return b.build()

    def into_sampler(self) -> SamplerChain:
        """The fastest chain with :meth:`into_chain`'s results: a lone ``Greedy`` for
        classic greedy settings (which :func:`sample_batch` turns into one batched argmax),
        else :meth:`into_chain`."""
        if self.is_classic() and self.temperature <= 0:
            return SamplerChain([Greedy()])
        return self.into_chain()


def sample_batch(chains: Sequence[SamplerChain], logits) -> np.ndarray:
    """One token per row of ``logits [batch, vocab]``, row ``i`` sampled (and accepted)
    by ``chains[i]``. Rows of greedy chains are one vectorised argmax."""
    logits = np.asarray(logits)
    if logits.ndim != 2 or logits.shape[1] == 0 or not is_real_dtype(logits.dtype):
        raise InputError(f"batched logits must be a [batch, vocab] array of real numbers, "
                         f"got {logits.dtype} of shape {logits.shape}")
    if len(chains) != logits.shape[0]:
        raise InputError(f"sample_batch got {len(chains)} chains for {logits.shape[0]} rows of logits")
    check_logits(logits, "logits")
    tokens = np.empty(logits.shape[0], np.int64)
    greedy = np.array([chain.is_greedy for chain in chains], bool)
    if greedy.any():
        tokens[greedy] = logits[greedy].argmax(axis=1)
        for row in np.flatnonzero(greedy):
            chains[row].accept(int(tokens[row]))
    for row in np.flatnonzero(~greedy):
        tokens[row] = chains[row].sample(logits[row], row)
    return tokens
