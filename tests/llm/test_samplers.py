"""Each sampler against its definition: llama.cpp's own known answers (a port of
tests/test-sampling.cpp), the edge cases (all-equal logits, -inf logits, k beyond the
vocabulary, p = 1, temperature 0), property checks, and library cross-checks."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from rlx_core.errors import InputError
from rlx_core.llm import (DRY, XTC, Candidates, Dist, DynamicTemperature, Greedy, LLMConfigError, LogitBias,
                          MinP, MirostatV1, MirostatV2, RepetitionPenalty, Temperature, TopK, TopNSigma, TopP,
                          TypicalP)
from rlx_core.llm.candidates import top_positions
from rlx_core.llm.penalties import repeat_lengths
from rlx_core.llm.samplers import entropy, nucleus


def apply_all(samplers, logits, history=()):
    cands = Candidates.from_logits(np.asarray(logits, np.float32))
    for sampler in samplers:
        for token in history:
            sampler.accept(token)
        sampler.apply(cands)
    return cands


def probs_by_id(cands):
    """The candidates' softmax spread over the vocabulary (0 for dropped tokens)."""
    out = np.zeros(cands.n_vocab)
    out[cands.ids] = cands.softmax()
    return out


def from_probs(probs):
    return np.log(np.asarray(probs, np.float32))       # llama.cpp's tests: logit = logf(p)


P4 = [0.1, 0.2, 0.3, 0.4]


# --- llama.cpp tests/test-sampling.cpp, expected values copied from there ---------------------

@pytest.mark.parametrize("sampler, expected", [
    (Temperature(1.0), P4),
    (Temperature(0.0), [0, 0, 0, 1]),
    (DynamicTemperature(1.0, 0.0, 1.0), P4),
    (DynamicTemperature(0.0, 0.0, 1.0), [0, 0, 0, 1]),
    (TopK(1), [0, 0, 0, 1]),
    (TopK(3), [0, 0.22222, 0.33333, 0.44444]),
    (TopK(4), P4),
    (TopK(0), P4),
    (TopP(0.0), [0, 0, 0, 1]),
    (TopP(0.7), [0, 0, 0.428571, 0.571429]),
    (TopP(0.8), [0, 0.22222, 0.33333, 0.44444]),
    (TopP(1.0), P4),
    (MinP(0.00), P4),
    (MinP(0.24), P4),
    (MinP(0.26), [0, 0.2 / 0.9, 0.3 / 0.9, 0.4 / 0.9]),
    (MinP(0.49), [0, 0.2 / 0.9, 0.3 / 0.9, 0.4 / 0.9]),
    (MinP(0.51), [0, 0, 0.3 / 0.7, 0.4 / 0.7]),
    (MinP(0.74), [0, 0, 0.3 / 0.7, 0.4 / 0.7]),
    (MinP(0.76), [0, 0, 0, 1]),
    (MinP(1.00), [0, 0, 0, 1]),
    (MinP(1.05), [0, 0, 0, 1]),
    (TopNSigma(1.0), [0, 0, 0.428571, 0.571429]),
    (TopNSigma(0.0), P4),
    (TopNSigma(3.0), P4),
], ids=repr)
def test_llama_cpp_known_answers(sampler, expected):
    np.testing.assert_allclose(probs_by_id(apply_all([sampler], from_probs(P4))), expected, atol=1e-5)


@pytest.mark.parametrize("threshold, kept", [(0.09, {3}), (0.19, {2, 3}), (0.29, {1, 2, 3}), (0.39, {0, 1, 2, 3})])
def test_llama_cpp_xtc(threshold, kept):
    # llama.cpp uses probability 0.99 with its own RNG; 1.0 makes the removal certain here
    cands = apply_all([XTC(1.0, threshold)], from_probs([0.4, 0.3, 0.2, 0.1]))
    assert set(cands.ids.tolist()) == kept


@pytest.mark.parametrize("probs, kept", [([0.97, 0.01, 0.01, 0.01], {0}), ([0.4, 0.2, 0.2, 0.2], {1, 2, 3})])
def test_llama_cpp_typical(probs, kept):
    assert set(apply_all([TypicalP(0.5)], from_probs(probs)).ids.tolist()) == kept


@pytest.mark.parametrize("history, expected, repeat, frequency, presence", [
    ([0], [0, 0.25, 0.25, 0.25, 0.25], 50.0, 0.0, 0.0),
    ([0, 1, 2], [0, 0, 0, 0.5, 0.5], 50.0, 0.0, 0.0),
    ([0, 1, 2, 0, 0], [0, 0, 0, 0.5, 0.5], 50.0, 0.0, 0.0),
    ([0], [0.000011, 0.249997, 0.249997, 0.249997, 0.249997], 1.0, 5.0, 5.0),
    ([0, 1, 2], [0.000023, 0.000023, 0.000023, 0.499966, 0.499966], 1.0, 5.0, 5.0),
    ([0, 1, 2, 0, 0], [0.000000, 0.000023, 0.000023, 0.499977, 0.499977], 1.0, 5.0, 5.0),
])
def test_llama_cpp_penalties(history, expected, repeat, frequency, presence):
    sampler = RepetitionPenalty(len(history), repeat, frequency, presence)
    got = probs_by_id(apply_all([sampler], from_probs([0.2] * 5), history))
    np.testing.assert_allclose(got, expected, atol=1e-5)


@pytest.mark.parametrize("probs, history, expected, multiplier, base, allowed, last_n, breakers", [
    ([0.25] * 4, [0, 1], [0.25] * 4, 1.0, 1.1, 2, 4, []),
    ([0.25] * 4, [0, 1, 2, 0, 1], [0.296923, 0.296923, 0.109232, 0.296923], 1.0, 1.1, 2, 5, []),
    ([0.2] * 5, [0, 1, 3, 4, 0, 1], [0.2] * 5, 1.0, 1.1, 2, 6, [[3]]),
    ([0.2] * 5, [0, 1, 2, 0, 1], [0.241818, 0.241818, 0.032727, 0.241818, 0.241818], 2.0, 1.1, 2, 5, []),
    ([0.2] * 5, [0, 1, 2, 3, 4, 0, 1], [0.2] * 5, 1.0, 1.1, 4, 7, []),
])
def test_llama_cpp_dry(probs, history, expected, multiplier, base, allowed, last_n, breakers):
    sampler = DRY(multiplier, base, allowed, last_n, breakers)
    np.testing.assert_allclose(probs_by_id(apply_all([sampler], from_probs(probs), history)), expected, atol=1e-5)


QUEUES = [("k", 10000, 1.0, 1.0), ("k", 1, 1.0, 1.0), ("p", 10000, 1.0, 1.0), ("p", 10000, 0.0, 1.0),
          ("m", 10000, 1.0, 1.0), ("m", 10000, 1.0, 1e-12), ("k", 100, 1.0, 1.0), ("p", 10000, 0.0003, 1.0),
          ("p", 10000, 0.8, 1.0), ("m", 10000, 1.0, 9997.9 / 9999.0), ("m", 10000, 1.0, 0.1),
          ("kp", 100, 0.8, 0.1), ("km", 100, 0.8, 0.1), ("pk", 100, 0.8, 0.1), ("pm", 100, 0.8, 0.1),
          ("mk", 100, 0.8, 0.1), ("mp", 100, 0.8, 9997.9 / 9999.0), ("mp", 100, 0.8, 0.1),
          ("kpm", 100, 0.8, 0.1), ("kmp", 100, 0.8, 0.1), ("pkm", 100, 0.8, 0.1), ("pmk", 100, 0.8, 0.1),
          ("mkp", 100, 0.8, 0.1), ("mpk", 100, 0.8, 0.1)]


@pytest.mark.parametrize("sequence, top_k, top_p, min_p", QUEUES)
def test_llama_cpp_sampler_queue(sequence, top_k, top_p, min_p):
    """test_sampler_queue: logits log(id) for 10000 tokens (id 0 is -inf); after each step
    the kept tokens are exactly the ids [min_token_id, n_vocab) llama.cpp's formulas give."""
    n_vocab, f32 = 10000, np.float32
    with np.errstate(divide="ignore"):
        cands = Candidates.from_logits(np.log(np.arange(n_vocab, dtype=f32)))
    min_token_id = 0
    for step in sequence:
        {"k": TopK(top_k), "p": TopP(float(f32(top_p)), 1), "m": MinP(float(f32(min_p)), 1)}[step].apply(cands)
        size = len(cands)
        if step == "k":
            expected_size = min(size, top_k)
            min_token_id = max(min_token_id, n_vocab - top_k)
        elif step == "p":
            divisor = n_vocab * (n_vocab - 1) // 2 - min_token_id * (min_token_id - 1) // 2
            target = math.ceil(f32(top_p) * f32(divisor))
            min_token_id, expected_size, cumsum = n_vocab, 0, 0
            while True:
                min_token_id -= 1
                expected_size += 1
                cumsum += min_token_id
                if cumsum >= target:
                    break
            if min_token_id == 1:
                min_token_id, expected_size = 0, expected_size + 1
        else:
            expected_size = min(max(int(math.ceil((f32(1) - f32(min_p)) * f32(n_vocab))), 1), size)
            min_token_id = int(math.floor(f32(min_p) * f32(n_vocab)))
            min_token_id = min(max(min_token_id, 1, n_vocab - size), n_vocab - 1)
        assert size == expected_size
        assert sorted(cands.ids.tolist()) == list(range(min_token_id, n_vocab))


# --- edge cases -------------------------------------------------------------------------------

EQUAL = np.zeros(8, np.float32)


@pytest.mark.parametrize("sampler, kept", [
    (TopK(3), [0, 1, 2]),                        # ties: the first ones
    (TopP(0.5), [0, 1, 2, 3]),                   # 4 * 1/8 reaches 0.5
    (MinP(0.5), list(range(8))),
    (MinP(1.0), list(range(8))),                 # every p equals p_max
    (TopNSigma(1.0), list(range(8))),            # sigma = 0
    (TypicalP(0.5), [0, 1, 2, 3, 4]),            # every score is 0: cumulative must exceed 0.5
    (XTC(1.0, 0.1), [7]),                        # all are above 0.1: only the last of equals stays
    (Temperature(0.0), [0]),
    (DynamicTemperature(1.0, 0.5), list(range(8))),
    (TopK(100), list(range(8))),
], ids=repr)
def test_all_equal_logits(sampler, kept):
    cands = apply_all([sampler], EQUAL)
    assert sorted(cands.ids.tolist()) == kept
    np.testing.assert_allclose(cands.softmax(), 1 / len(kept))


def test_all_equal_logits_selectors():
    assert apply_all([Greedy()], EQUAL).token == 0
    for mirostat in (MirostatV1(), MirostatV2()):
        cands = apply_all([mirostat], EQUAL)
        assert len(cands) == 8 and 0 <= cands.token < 8
    counts = np.bincount([apply_all([Dist(s)], EQUAL).token for s in range(800)], minlength=8)
    assert counts.min() > 60                    # ~100 each


NEG = np.array([-np.inf, 1.0, -np.inf, 2.0, -np.inf], np.float32)


@pytest.mark.parametrize("sampler, kept", [
    (TopK(4), [3, 1, 0, 2]),                     # -inf ties: the first positions
    (TopP(0.9), [3, 1]),
    (MinP(0.1), [1, 3]),
    (TopNSigma(1.0), [0, 1, 2, 3, 4]),           # sigma over the finite logits only; 1 is masked
    (TypicalP(0.99), [1, 3]),
    (XTC(1.0, 0.2), [0, 1, 2, 4]),               # drops token 3 only
    (Temperature(0.5), [0, 1, 2, 3, 4]),
    (Temperature(0.0), [3]),
], ids=repr)
def test_minus_inf_logits(sampler, kept):
    cands = apply_all([sampler], NEG)
    assert cands.ids.tolist() == kept if cands.is_sorted else sorted(cands.ids.tolist()) == sorted(kept)
    assert np.isneginf(cands.logits[np.isin(cands.ids, [0, 2, 4])]).all()
    positive = [3] if isinstance(sampler, TopNSigma) else sorted(set(kept) & {1, 3})
    assert np.flatnonzero(probs_by_id(cands)).tolist() == positive


@pytest.mark.parametrize("selector", [Dist, MirostatV1, MirostatV2, lambda seed: Greedy()])
def test_selectors_never_pick_banned_tokens(selector):
    for seed in range(200):
        assert apply_all([XTC(1.0, 0.2), selector(seed)], NEG).token == 1
        assert apply_all([selector(seed)], NEG).token in (1, 3)


@pytest.mark.parametrize("sampler", [RepetitionPenalty(8, 2.0, 0.5, 0.5), DRY(1.0, 2.0, 2), LogitBias({0: 1.0, 1: 2.0})],
                         ids=repr)
def test_history_samplers_on_equal_and_minus_inf_logits(sampler):
    """History [0, 1, 0, 1]: penalties hit 0 and 1, DRY hits 0 (it would extend '0 1 0 1'),
    the bias hits 0 and 1. Equal logits stay equal elsewhere; -inf stays -inf."""
    history = [0, 1, 0, 1]
    equal = apply_all([sampler.clone()], np.zeros(5, np.float32), history).logits
    assert (equal[2:] == 0).all() and (equal[:2] != 0).any()
    banned = apply_all([sampler.clone()], np.array([-np.inf, -np.inf, 0, 0, 0], np.float32), history).logits
    assert np.isneginf(banned[:2]).all() and (banned[2:] == 0).all()


def test_k_beyond_vocab_and_p_one_are_no_ops():
    logits = np.random.default_rng(0).standard_normal(50).astype(np.float32)
    for sampler in (TopK(50), TopK(10 ** 9), TopK(-3), TopP(1.0), TypicalP(1.0), MinP(0.0), TopNSigma(-1.0)):
        cands = apply_all([sampler], logits)
        assert sorted(cands.ids.tolist()) == list(range(50)), sampler
        np.testing.assert_array_equal(cands.logits[np.argsort(cands.ids)], logits)


def test_temperature_zero_is_greedy():
    logits = np.array([0.5, 3.0, 3.0, -1.0], np.float32)
    for sampler in (Temperature(0.0), Temperature(-1.0), DynamicTemperature(0.0, 0.0)):
        cands = apply_all([sampler, Dist(5)], logits)
        assert cands.ids.tolist() == [1] and cands.token == 1


def test_temperature_scales_logits():
    logits = np.array([1.0, 2.0, -3.0], np.float32)
    np.testing.assert_allclose(apply_all([Temperature(0.5)], logits).logits, logits / 0.5)


def test_dynamic_temperature_follows_entropy():
    """T = lo + (hi - lo) * (H / ln n) ** exponent, then logits / T."""
    logits = np.array([2.0, 1.0, 0.5, -1.0], np.float32)
    p = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    t = 0.2 + (1.8 - 0.2) * (-(p * np.log(p)).sum() / np.log(4)) ** 2.0
    np.testing.assert_allclose(apply_all([DynamicTemperature(1.0, 0.8, 2.0)], logits).logits, logits / t, rtol=1e-5)


def test_min_p_min_keep_readmits_the_most_likely():
    cands = apply_all([MinP(0.9, min_keep=3)], from_probs([0.5, 0.05, 0.3, 0.15]))
    assert cands.ids.tolist() == [0, 2, 3]


def test_top_p_min_keep():
    cands = apply_all([TopP(0.1, min_keep=3)], from_probs([0.5, 0.05, 0.3, 0.15]))
    assert cands.ids.tolist() == [0, 2, 3]


def test_xtc_respects_min_keep_and_its_chance():
    probs = from_probs([0.4, 0.3, 0.2, 0.1])
    assert len(apply_all([XTC(1.0, 0.09, min_keep=2)], probs)) == 4          # would leave only 1
    assert len(apply_all([XTC(1.0, 0.6)], probs)) == 4                        # threshold > 0.5: off
    assert len(apply_all([XTC(0.0, 0.1)], probs)) == 4
    removed = sum(len(apply_all([XTC(0.3, 0.19, seed=s)], probs)) == 2 for s in range(1000))
    assert 240 < removed < 360                                               # chance 0.3


def test_logit_bias_adds_and_bans():
    cands = apply_all([LogitBias({0: 1.5, 3: -math.inf})], np.zeros(5, np.float32))
    np.testing.assert_array_equal(cands.logits, [1.5, 0, 0, -np.inf, 0])
    assert apply_all([LogitBias({0: -math.inf, 1: -math.inf}), Greedy()], np.array([5, 4, 1], np.float32)).token == 2


def test_logit_bias_on_narrowed_candidates():
    cands = apply_all([TopK(2), LogitBias({4: 10.0, 0: 5.0})], np.array([0, 1, 2, 3, 4], np.float32))
    assert dict(zip(cands.ids.tolist(), cands.logits.tolist())) == {4: 14.0, 3: 3.0}


def test_repetition_penalty_window_and_order():
    """llama.cpp order: divide/multiply by repeat first, then subtract c*freq + presence."""
    sampler = RepetitionPenalty(last_n=3, repeat=2.0, frequency=0.5, presence=0.25)
    cands = apply_all([sampler], np.array([4.0, -2.0, 1.0, 1.0], np.float32), history=[3, 0, 1, 0])
    # window holds 0, 1, 0 (token 3 fell out): 0 seen twice, 1 once
    np.testing.assert_allclose(cands.logits, [4 / 2 - 2 * 0.5 - 0.25, -2 * 2 - 0.5 - 0.25, 1.0, 1.0])
    sampler.reset()
    np.testing.assert_array_equal(apply_all([sampler], np.ones(4, np.float32)).logits, np.ones(4))


def test_dry_example_from_llama_cpp_comment():
    """'a b c c b c y a b c': repeat counts 0 0 3 1 0 2 0 0 0 (the last token has none)."""
    a, b, c, y = 0, 1, 2, 3
    np.testing.assert_array_equal(repeat_lengths(np.array([a, b, c, c, b, c, y, a, b, c]), 100),
                                  [0, 0, 3, 1, 0, 2, 0, 0, 0])


def _brute_repeat_lengths(window, limit):
    out = []
    for e in range(len(window) - 1):
        n = 0
        while n <= e and window[e - n] == window[-1 - n]:
            n += 1
        out.append(min(n, limit))
    return out


@settings(max_examples=200, deadline=None)
@given(window=st.lists(st.integers(0, 3), min_size=2, max_size=60), limit=st.integers(0, 70))
def test_repeat_lengths_match_brute_force(window, limit):
    np.testing.assert_array_equal(repeat_lengths(np.array(window), limit), _brute_repeat_lengths(window, limit))


def test_dry_multi_token_breaker_limits_repeats():
    """'5 6 0 1' repeats (length 4, followed by 2 the first time); with the breaker (5, 6)
    a repeat may only reach back to just after its newest occurrence: length 2 < 3."""
    history = [5, 6, 0, 1, 2, 5, 6, 0, 1]
    no_breaker = apply_all([DRY(1.0, 2.0, 3)], np.zeros(8, np.float32), history)
    assert no_breaker.logits.tolist() == [0, 0, -2.0, 0, 0, 0, 0, 0]          # 1 * 2 ** (4 - 3)
    with_breaker = apply_all([DRY(1.0, 2.0, 3, -1, [[5, 6]])], np.zeros(8, np.float32), history)
    np.testing.assert_array_equal(with_breaker.logits, np.zeros(8))


def test_dry_exponent_is_capped():
    history = [7] * 300
    cands = apply_all([DRY(1.0, 10.0, 2)], np.zeros(8, np.float32), history)
    assert np.isfinite(cands.logits).all() and cands.logits[7] < -1e37


# --- properties -------------------------------------------------------------------------------

logit_rows = hnp.arrays(np.float32, st.integers(1, 300), elements=st.floats(-30, 30, width=32))


@settings(max_examples=150, deadline=None)
@given(logits=logit_rows, k=st.integers(1, 320))
def test_top_positions_are_the_k_largest_first_on_ties(logits, k):
    got = top_positions(logits, k)
    expected = sorted(range(logits.size), key=lambda i: (-logits[i], i))[:k]
    assert got.tolist() == expected


@settings(max_examples=60, deadline=None)
@given(vocab=st.integers(4097, 20_000), finite=st.lists(st.tuples(st.integers(0, 20_000), st.floats(-5, 5, width=32)),
                                                        max_size=300), k=st.integers(1, 400))
def test_top_positions_of_a_mostly_masked_vocabulary(vocab, finite, k):
    """Large vocabularies that top-n-sigma left mostly -inf: the k largest, ties (the
    masked tokens among them) by position."""
    logits = np.full(vocab, -np.inf, np.float32)
    for position, value in finite:
        logits[position % vocab] = value
    order = np.lexsort((np.arange(vocab), -logits.astype(np.float64)))
    assert top_positions(logits, k).tolist() == order[:k].tolist()


def test_top_positions_large_vocab_matches_torch_topk():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    for layout in ("normal", "sorted", "reversed", "spiky"):
        x = rng.standard_normal(128_256).astype(np.float32)
        x = {"normal": x, "sorted": np.sort(x), "reversed": np.sort(x)[::-1].copy(),
             "spiky": np.where(np.arange(x.size) % 997 == 0, 50, x).astype(np.float32)}[layout]
        for k in (1, 40, 1000):
            ours = top_positions(x, k)
            values, _ = torch.topk(torch.from_numpy(x), k)
            np.testing.assert_array_equal(x[ours], values.numpy())


@settings(max_examples=150, deadline=None)
@given(logits=hnp.arrays(np.float32, st.integers(2, 5000), elements=st.floats(-20, 20, width=32)),
       p=st.floats(0.01, 0.999))
def test_nucleus_is_the_shortest_top_set_reaching_p(logits, p):
    probs = Candidates.from_logits(logits).softmax()
    kept = nucleus(logits, probs, p)
    dropped = np.setdiff1d(np.arange(logits.size), kept)
    assert len(np.unique(kept)) == kept.size
    assert probs[kept].sum() >= p - 1e-12
    if dropped.size:
        assert logits[kept].min() >= logits[dropped].max()
    least = kept[np.argmin(logits[kept])]
    assert probs[kept].sum() - probs[least] < p + 1e-12


def test_top_p_large_flat_vocab_uses_nucleus():
    logits = (np.random.default_rng(2).standard_normal(128_256) * 3).astype(np.float32)
    cands = apply_all([TopP(0.9)], logits)
    probs = Candidates.from_logits(logits).softmax()
    order = np.argsort(-logits, kind="stable")
    exact = order[:int(np.argmax(np.cumsum(probs[order]) >= 0.9)) + 1]
    assert abs(len(cands) - exact.size) <= 1 and len(np.intersect1d(cands.ids, exact)) >= exact.size - 1


def test_softmax_and_entropy_match_scipy():
    special = pytest.importorskip("scipy.special")
    stats = pytest.importorskip("scipy.stats")
    logits = np.random.default_rng(5).standard_normal(1000).astype(np.float32) * 4
    probs = Candidates.from_logits(logits).softmax()
    np.testing.assert_allclose(probs, special.softmax(logits.astype(np.float64)), rtol=1e-12)
    assert entropy(probs) == pytest.approx(stats.entropy(probs), rel=1e-12)


def test_dist_follows_the_softmax():
    stats = pytest.importorskip("scipy.stats")
    logits = np.array([2.0, 1.0, 0.0, -1.0, 0.5], np.float32)
    dist = Dist(seed=11)
    counts = np.bincount([apply_all([dist], logits).token for _ in range(8000)], minlength=5)
    expected = Candidates.from_logits(logits).softmax() * counts.sum()
    assert stats.chisquare(counts, expected).pvalue > 1e-3


def test_dist_over_a_large_vocabulary_follows_the_softmax():
    """The blocked search (block sums, then one block) against the distribution."""
    stats = pytest.importorskip("scipy.stats")
    logits = np.full(50_000, -30.0, np.float32)
    logits[[7, 1500, 20_000, 49_999]] = [2.0, 1.0, 0.0, 1.5]
    dist = Dist(seed=3)
    picks = np.array([apply_all([dist], logits).token for _ in range(4000)])
    assert set(np.unique(picks)) <= {7, 1500, 20_000, 49_999}
    p = Candidates.from_logits(logits).softmax()[[7, 1500, 20_000, 49_999]]
    counts = np.array([(picks == t).sum() for t in (7, 1500, 20_000, 49_999)])
    assert stats.chisquare(counts, p / p.sum() * counts.sum()).pvalue > 1e-3


@pytest.mark.parametrize("mirostat", [MirostatV1, MirostatV2])
def test_mirostat_steers_surprise_to_tau(mirostat):
    """Zipf-like logits; mu adapts so that the average surprise of the picks (under the
    truncated distribution they are drawn from) approaches tau."""
    logits = (-1.1 * np.log(np.arange(1, 2001))).astype(np.float32)
    sampler = mirostat(tau=4.0, eta=0.1, seed=1)
    surprises = []
    for _ in range(800):
        cands = apply_all([sampler], logits)
        surprises.append(-math.log2(cands.softmax()[cands.selected]))
    assert abs(np.mean(surprises[200:]) - 4.0) < 0.3
    sampler.reset()
    assert sampler.mu == 8.0


def test_mirostat_v2_truncates_by_surprise():
    sampler = MirostatV2(tau=1.0, eta=0.0)
    sampler.mu = 2.0                                    # keep tokens with -log2 p <= 2, i.e. p >= 0.25
    cands = apply_all([sampler], from_probs([0.5, 0.3, 0.15, 0.05]))
    assert sorted(cands.ids.tolist()) == [0, 1]


def test_mirostat_v1_k_formula():
    """k = ((eps 2^mu) / (1 - V^-eps))^(1/s) against a direct evaluation."""
    probs = np.array([0.5, 0.25, 0.125, 0.0625, 0.0625])
    sampler = MirostatV1(tau=2.0, m=4)
    i = np.arange(3)
    t = np.log((i + 2) / (i + 1))
    s = (t * np.log(probs[i] / probs[i + 1])).sum() / (t * t).sum()
    k = ((s - 1) * 2 ** 4.0 / (1 - 1000 ** (1 - s))) ** (1 / s)
    assert sampler._k(probs, 1000) == min(int(k), 5)


def test_candidates_reject_bad_logits():
    for bad, why in [([np.nan, 1.0], "nan"), ([np.inf, 1.0], r"\+inf"), ([-np.inf, -np.inf], "only -inf"),
                     (np.zeros((2, 2)), "1-D"), ([], "non-empty"), (["a"], "real numbers")]:
        with pytest.raises(InputError, match=why):
            Candidates.from_logits(np.asarray(bad))


def test_positions_of_after_narrowing():
    cands = apply_all([TopK(3)], np.array([0, 5, 1, 4, 3], np.float32))
    positions, found = cands.positions_of(np.array([3, 2, 4]))
    assert found.tolist() == [True, False, True]
    assert cands.ids[positions].tolist() == [3, 4]
    with pytest.raises(InputError, match="outside the vocabulary of 5"):
        cands.positions_of(np.array([5]))


@pytest.mark.parametrize("make, message", [
    (lambda: TopP(1.5), r"TopP p must be in \[0.0, 1.0\], got 1.5"),
    (lambda: TopK("3"), "TopK k must be an integer, got '3'"),
    (lambda: Temperature(float("nan")), "Temperature t must be a finite number"),
    (lambda: MinP(-0.1), "MinP p must be in"),
    (lambda: XTC(2.0, 0.1), "XTC probability"),
    (lambda: RepetitionPenalty(repeat=0.0), "repeat must be > 0"),
    (lambda: RepetitionPenalty(last_n=-2), "last_n must be in"),
    (lambda: DRY(1.0, sequence_breakers=[[]]), "non-empty token sequences"),
    (lambda: DRY(1.0, base=0.5), "DRY base must be in"),
    (lambda: MirostatV1(m=1), "MirostatV1 m"),
    (lambda: LogitBias({-1: 1.0}), "LogitBias token id"),
    (lambda: LogitBias({1: float("nan")}), "bias of token 1"),
    (lambda: LogitBias([(1, 2.0)]), "mapping"),
])
def test_bad_settings_raise_clear_errors(make, message):
    with pytest.raises(LLMConfigError, match=message):
        make()


def test_logit_bias_beyond_vocab_is_an_error():
    with pytest.raises(InputError, match="token id 10 is outside the vocabulary of 4"):
        apply_all([LogitBias({10: 1.0})], np.zeros(4, np.float32))


def test_bias_banning_everything_is_an_error():
    with pytest.raises(InputError, match="every remaining candidate has logit -inf"):
        apply_all([LogitBias({0: -math.inf, 1: -math.inf}), Dist()], np.zeros(2, np.float32))
