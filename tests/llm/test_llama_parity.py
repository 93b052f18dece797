"""Sampler chains against an independent transliteration of llama.cpp's
``src/llama-sampling.cpp`` (issue 21): the candidate array keeps its size where llama.cpp
keeps it -- top-n-sigma and temperature 0 mask to -inf, the other samplers shrink it --
and every step sees the same number of candidates as in llama.cpp.

The reference below follows llama.cpp's code path by path (sorted flags, the unsorted and
sorted branches of min-p, XTC's leading run, temp-ext's ``ln(size)``), with two documented
choices of RLX: probabilities in f64 (llama.cpp: f32) and ties broken by position
(llama.cpp's partial sort leaves their order unspecified). Typical-p is left out: with a
-inf candidate llama.cpp computes its entropy as ``0 * log 0 = nan`` (undefined order).
"""
import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from rlx_core.llm import XTC, Candidates, DynamicTemperature, SampleOpts, Temperature, TopNSigma, TopP
from rlx_core.llm.selectors import Dist


class RefArray:
    """llama.cpp's ``llama_token_data_array``: ids, f32 logits, a ``sorted`` flag; its size
    is the length of the arrays."""

    def __init__(self, logits):
        self.logits = np.array(logits, np.float32)
        self.ids = np.arange(self.logits.size)
        self.sorted = False

    @property
    def size(self):
        return self.ids.size

    def take(self, index):
        self.ids, self.logits = self.ids[index], self.logits[index]

    def sort(self):
        if not self.sorted:
            self.take(np.argsort(-self.logits, kind="stable"))
            self.sorted = True

    def probs(self):
        z = np.exp(self.logits.astype(np.float64) - float(self.logits.max()))
        return z / z.sum()

    def probs_by_id(self, n_vocab):
        out = np.zeros(n_vocab)
        out[self.ids] = self.probs()
        return out


def ref_top_n_sigma(a, n):
    if n <= 0 or a.size <= 1:
        return
    finite = a.logits[a.logits != -np.inf].astype(np.float64)
    top, std = finite.max(), math.sqrt(((finite - finite.mean()) ** 2).mean())
    a.logits = np.where(a.logits < top - n * std, np.float32(-np.inf), a.logits)
    a.sort()                                               # softmax_impl(cur_p, true)


def ref_top_k(a, k):
    if k <= 0:
        return
    a.sort()
    a.take(slice(0, min(k, a.size)))


def ref_top_p(a, p, min_keep):
    if p >= 1:
        return
    a.sort()
    cumulative, last = 0.0, a.size
    for i, prob in enumerate(a.probs()):
        cumulative += prob
        if cumulative >= p and i + 1 >= min_keep:
            last = i + 1
            break
    a.take(slice(0, last))


def ref_min_p(a, p, min_keep):
    if p <= 0:
        return
    if not a.sorted:
        floor = a.logits.max() + np.log(np.float32(p))
        passing = np.flatnonzero(a.logits >= floor)
        if passing.size and passing.size >= min_keep:
            a.take(passing)
            return
    a.sort()
    floor = a.logits[0] + np.log(np.float32(p))
    i = 1
    while i < a.size and not (a.logits[i] < floor and i >= min_keep):
        i += 1
    a.take(slice(0, i))


def ref_xtc(a, threshold, min_keep):
    """With probability 1: the uniform draw never exceeds it."""
    if threshold > 0.5 or a.size < 2:
        return
    a.sort()
    pos_last = 0
    for i, prob in enumerate(a.probs()):
        if prob < threshold:
            break
        pos_last = i
    if a.size - pos_last >= min_keep and pos_last > 0:
        a.take(slice(pos_last, None))


def ref_temp(a, t):
    if t <= 0:
        keep = int(np.argmax(a.logits))
        a.logits = np.where(np.arange(a.size) == keep, a.logits, np.float32(-np.inf))
    else:
        a.logits = a.logits / np.float32(t)


def ref_temp_ext(a, t, delta, exponent):
    if delta <= 0:
        ref_temp(a, t)
        return
    if a.size <= 1:
        return
    lo, hi = max(0.0, t - delta), t + delta
    max_entropy = -math.log(1.0 / a.size)
    a.sort()
    probs = a.probs()
    entropy = -sum(p * math.log(p) for p in probs if p > 0)
    ref_temp(a, lo + (hi - lo) * (entropy / max_entropy) ** exponent)


def ref_truncate(a, o):
    """common/sampling.cpp's default order, up to (not including) the temperature."""
    ref_top_n_sigma(a, o.top_n_sigma)
    ref_top_k(a, o.top_k)
    ref_top_p(a, o.top_p, o.min_keep)
    ref_min_p(a, o.min_p, o.min_keep)
    if o.xtc_probability > 0:
        ref_xtc(a, o.xtc_threshold, o.min_keep)


def ours(opts, logits):
    """RLX's chain for ``opts`` on ``logits``: the candidates after the truncating steps,
    and after the temperature step (the chain's final Dist is not applied)."""
    steps = opts.into_chain().steps
    assert isinstance(steps[-1], Dist)
    cands = Candidates.from_logits(np.asarray(logits, np.float32))
    for step in steps[:-1]:
        if isinstance(step, (Temperature, DynamicTemperature)):
            count = len(cands)
        step.apply(cands)
    if not isinstance(steps[-2], (Temperature, DynamicTemperature)):
        count = len(cands)
    return count, cands


def probs_by_id(cands):
    out = np.zeros(cands.n_vocab)
    out[cands.ids] = cands.softmax()
    return out


def compare_with_reference(opts, logits):
    count, cands = ours(opts, logits)
    ref = RefArray(logits)
    ref_truncate(ref, opts)
    assert count == ref.size                          # every step saw llama.cpp's candidates
    ref_temp_ext(ref, opts.temperature, opts.dynatemp_range, opts.dynatemp_exponent)
    np.testing.assert_allclose(probs_by_id(cands), ref.probs_by_id(len(logits)), rtol=1e-5, atol=1e-9)
    return cands


# --- issue 21's cases -------------------------------------------------------------------------

ISSUE_LOGITS = [3, 2.9, 2.8, -5, -5, -5, -5, -5]


def test_xtc_min_keep_counts_the_tokens_top_n_sigma_masked():
    """llama.cpp ends with token 2 alone: XTC sees 8 candidates, 6 >= min_keep stay."""
    opts = SampleOpts(temperature=1, top_n_sigma=1, xtc_probability=1, xtc_threshold=0.05, min_keep=3)
    cands = compare_with_reference(opts, ISSUE_LOGITS)
    assert np.flatnonzero(probs_by_id(cands)).tolist() == [2]
    assert len(cands) == 6


def test_dynamic_temperature_normalises_by_all_candidates():
    """Entropy over ln 8 (the 5 masked tokens count), not ln 3: T = 0.5 + 1.0 * H / ln 8."""
    opts = SampleOpts(temperature=1, top_n_sigma=1, dynatemp_range=0.5)
    cands = compare_with_reference(opts, ISSUE_LOGITS)
    p = Candidates.from_logits(np.float32(ISSUE_LOGITS[:3])).softmax()
    t = 0.5 + 1.0 * float(-(p * np.log(p)).sum()) / math.log(8)
    expected = np.exp(np.float32(ISSUE_LOGITS[:3]) / np.float32(t))
    np.testing.assert_allclose(probs_by_id(cands)[:3], expected / expected.sum(), rtol=1e-6)


def test_top_n_sigma_keeps_the_cut_tokens_as_minus_inf_candidates():
    cands = Candidates.from_logits(np.float32(ISSUE_LOGITS))
    TopNSigma(1.0).apply(cands)
    assert len(cands) == 8 and np.isneginf(cands.logits[3:]).all() and np.isfinite(cands.logits[:3]).all()


def test_xtc_never_keeps_only_a_masked_token():
    """Threshold 0: llama.cpp keeps only its last (-inf) candidate and selects it; here the
    least likely token of positive probability stays (a documented choice)."""
    cands = Candidates.from_logits(np.float32(ISSUE_LOGITS))
    TopNSigma(1.0).apply(cands)
    XTC(1.0, 0.0).apply(cands)
    assert np.flatnonzero(probs_by_id(cands)).tolist() == [2]


def test_top_p_on_flat_logits_with_a_banned_token():
    """V=2000, token 0 banned: 1800 real tokens reach 0.9 (1799 / 1999 = 0.89995 does not)."""
    logits = np.zeros(2000, np.float32)
    logits[0] = -np.inf
    cands = Candidates.from_logits(logits)
    TopP(0.9).apply(cands)
    ref = RefArray(logits)
    ref_top_p(ref, 0.9, 0)
    assert sorted(cands.ids.tolist()) == sorted(ref.ids.tolist()) == list(range(1, 1801))
    assert probs_by_id(cands)[1:].sum() == pytest.approx(1.0)


# --- properties -------------------------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(vocab=st.integers(300, 3000), banned=st.sets(st.integers(0, 299), max_size=40), p=st.floats(0.01, 0.99),
       min_keep=st.integers(0, 3))
def test_top_p_on_flat_logits_matches_llama_cpp(vocab, banned, p, min_keep):
    """More than 256 candidates: the histogram path of :func:`nucleus`, flat case."""
    logits = np.zeros(vocab, np.float32)
    logits[sorted(banned)] = -np.inf
    cands = Candidates.from_logits(logits)
    TopP(p, min_keep).apply(cands)
    ref = RefArray(logits)
    ref_top_p(ref, p, min_keep)
    assert sorted(cands.ids.tolist()) == sorted(ref.ids.tolist())


finite_logit = st.floats(-10, 10, width=32)
logit_rows = hnp.arrays(np.float32, st.integers(2, 40),
                        elements=st.one_of(finite_logit, finite_logit, finite_logit, st.just(-np.inf)))


@st.composite
def chain_settings(draw):
    """Settings of the default (non-Mirostat) chain without history or typical-p; XTC
    with probability 1 so that no random draw is involved."""
    return SampleOpts(
        temperature=draw(st.floats(0.2, 2.0)),
        top_n_sigma=draw(st.sampled_from([0.0, 0.5, 1.0, 2.0])),
        top_k=draw(st.sampled_from([0, 1, 3, 10, 50])),
        top_p=draw(st.sampled_from([1.0, 0.5, 0.9, 0.99])),
        min_p=draw(st.sampled_from([0.0, 0.05, 0.3])),
        xtc_probability=draw(st.sampled_from([0.0, 1.0])),
        xtc_threshold=draw(st.floats(0.01, 0.5)),
        min_keep=draw(st.integers(0, 6)),
        dynatemp_range=draw(st.sampled_from([0.0, 0.0, 0.5, 1.5])),
        dynatemp_exponent=draw(st.sampled_from([0.5, 1.0, 2.0])),
    )


@settings(max_examples=300, deadline=None)
@given(logits=logit_rows, opts=chain_settings())
def test_chains_match_llama_cpp(logits, opts):
    assume(np.isfinite(logits).any())
    compare_with_reference(opts, logits)


@settings(max_examples=150, deadline=None)
@given(logits=logit_rows, n=st.floats(0.1, 3.0), min_keep=st.integers(0, 8), threshold=st.floats(0.01, 0.5))
def test_top_n_sigma_then_xtc_matches_llama_cpp(logits, n, min_keep, threshold):
    """The interaction of issue 21, case 1, with every parameter free."""
    assume(np.isfinite(logits).any())
    compare_with_reference(SampleOpts(temperature=1.0, top_n_sigma=n, xtc_probability=1.0, xtc_threshold=threshold,
                                      min_keep=min_keep), logits)
