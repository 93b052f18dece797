"""Sampler chains: llama.cpp's order from SampleOpts, the builder, seeded reproducible
draws, clone/reset/accept, batched logits, and the classic (greedy) fast path."""
import numpy as np
import pytest

from rlx_core.errors import InputError
from rlx_core.llm import (DRY, XTC, Dist, DynamicTemperature, Greedy, LLMConfigError, LogitBias, MinP, MirostatV1,
                          MirostatV2, RepetitionPenalty, SampleOpts, SamplerChain, Temperature, TopK, TopNSigma,
                          TopP, TypicalP, sample_batch)

VOCAB = 1000


def logits_stream(seed, n, vocab=VOCAB):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, vocab)) * 3).astype(np.float32)


def everything_on(seed=7):
    return SampleOpts(temperature=0.7, top_k=50, top_p=0.9, min_p=0.02, typical_p=0.97, top_n_sigma=3.0,
                      repetition_penalty=1.1, frequency_penalty=0.1, presence_penalty=0.2, dry_multiplier=0.8,
                      xtc_probability=0.5, xtc_threshold=0.1, logit_bias={3: -1.0}, seed=seed)


def test_into_chain_uses_llama_cpp_order():
    chain = everything_on().into_chain()
    assert [type(s) for s in chain.steps] == [LogitBias, RepetitionPenalty, DRY, TopNSigma, TopK, TypicalP, TopP,
                                              MinP, XTC, Temperature, Dist]
    dyn = SampleOpts(temperature=0.8, dynatemp_range=0.3, top_k=10).into_chain()
    assert [type(s) for s in dyn.steps] == [TopK, DynamicTemperature, Dist]


def test_mirostat_replaces_the_chain():
    for version, kind in ((1, MirostatV1), (2, MirostatV2)):
        chain = SampleOpts(temperature=0.9, top_k=40, repetition_penalty=1.2, mirostat=version,
                           logit_bias={1: 2.0}).into_chain()
        assert [type(s) for s in chain.steps] == [LogitBias, Temperature, kind]


def test_defaults():
    assert SampleOpts().is_greedy() and SampleOpts().is_classic()
    assert [type(s) for s in SampleOpts().into_chain().steps] == [Temperature, Dist]
    llama = SampleOpts.llama_defaults()
    assert (llama.temperature, llama.top_k, llama.top_p, llama.min_p) == (0.8, 40, 0.95, 0.05)
    assert [type(s) for s in llama.into_chain().steps] == [TopK, TopP, MinP, Temperature, Dist]
    assert SampleOpts.nucleus(0.7, 0.9).into_chain().steps[0] == TopP(0.9)
    assert [type(s) for s in SampleOpts(temperature=1.0).into_chain().steps] == [Dist]


@pytest.mark.parametrize("field, value", [
    ("dynatemp_range", 0.5), ("typical_p", 0.9), ("top_n_sigma", 1.0), ("min_p", 0.1), ("xtc_probability", 0.5),
    ("dry_multiplier", 0.8), ("mirostat", 2), ("frequency_penalty", 0.1), ("presence_penalty", 0.1),
    ("repetition_penalty", 1.2), ("logit_bias", {0: 1.0})])
def test_is_classic(field, value):
    base = SampleOpts(temperature=0.8, top_k=40, top_p=0.9)
    assert base.is_classic()
    assert not SampleOpts(**{**base.__dict__, field: value}).is_classic()


@pytest.mark.parametrize("opts", [SampleOpts(), SampleOpts(top_k=5, top_p=0.5), SampleOpts(temperature=-1.0, top_k=1)])
def test_greedy_fast_path_matches_the_full_chain(opts):
    assert opts.into_sampler().is_greedy
    fast, full = opts.into_sampler(), opts.into_chain()
    rows = logits_stream(1, 50)
    rows[:, 5] = rows.max(axis=1)                      # ties with the max: both pick the lowest id
    for row in rows:
        assert fast.sample(row) == full.sample(row) == int(np.argmax(row))


def test_same_seed_same_tokens_and_clone_continues_identically():
    rows = logits_stream(2, 40)
    a, b = everything_on(seed=5).into_chain(), everything_on(seed=5).into_chain()
    first = [a.sample(r) for r in rows[:20]]
    assert first == [b.sample(r) for r in rows[:20]]
    fork = a.clone()
    assert [a.sample(r) for r in rows[20:]] == [fork.sample(r) for r in rows[20:]]
    other = everything_on(seed=6).into_chain()
    assert first != [other.sample(r) for r in rows[:20]]


def test_reset_restarts_streams_and_history():
    rows = logits_stream(3, 30)
    chain = everything_on().into_chain()
    first = [chain.sample(r) for r in rows]
    chain.reset()
    assert [chain.sample(r) for r in rows] == first


def test_clone_is_independent():
    chain = SampleOpts(repetition_penalty=2.0, temperature=1.0, seed=1).into_chain()
    chain.accept_all([1, 2, 3])
    fork = chain.clone()
    fork.accept(4)
    penalties, fork_penalties = chain.steps[0], fork.steps[0]
    assert list(penalties._window) == [1, 2, 3] and list(fork_penalties._window) == [1, 2, 3, 4]


def test_sample_accepts_the_chosen_token():
    chain = SampleOpts(repetition_penalty=1000.0, temperature=0.0).into_chain()
    row = np.array([3.0, 2.9, 2.8, 1.0], np.float32)
    assert [chain.sample(row) for _ in range(3)] == [0, 1, 2]     # each pick is penalised next time


def test_mirostat_chain_samples_and_adapts():
    chain = SampleOpts(temperature=1.0, mirostat=2, mirostat_tau=3.0, seed=4).into_chain()
    for row in logits_stream(4, 20):
        assert 0 <= chain.sample(row) < VOCAB
    assert chain.steps[-1].mu != 6.0


def test_builder():
    chain = (SamplerChain.builder(seed=9).penalties(32, 1.1).dry(0.5).top_n_sigma(2).top_k(30).typical_p(0.95)
             .top_p(0.9).min_p(0.05).xtc(0.5, 0.1).dynamic_temperature(0.8, 0.2).build())
    assert [type(s) for s in chain.steps] == [RepetitionPenalty, DRY, TopNSigma, TopK, TypicalP, TopP, MinP, XTC,
                                              DynamicTemperature, Dist]
    assert chain.steps[-1].seed == 9 and chain.steps[7].seed != 9       # XTC has its own stream
    assert isinstance(SamplerChain.builder().greedy().build().steps[-1], Greedy)
    assert isinstance(SamplerChain.builder().temperature(1).mirostat_v1().build().steps[-1], MirostatV1)
    assert isinstance(SamplerChain.builder().push(TopK(3)).build().steps[-1], Dist)


def test_chain_errors():
    with pytest.raises(LLMConfigError, match=r"step 0 \(Greedy\) selects the token, so it must be the last step"):
        SamplerChain([Greedy(), TopK(3)])
    with pytest.raises(LLMConfigError, match="step 1 must be a Sampler, got str"):
        SamplerChain([TopK(3), "top_p"])
    with pytest.raises(LLMConfigError, match="SampleOpts.mirostat must be in"):
        SampleOpts(mirostat=3)
    with pytest.raises(LLMConfigError, match="SampleOpts.top_p must be a finite number"):
        SampleOpts(top_p="high")
    with pytest.raises(LLMConfigError, match="SampleOpts.top_k must be an integer"):
        SampleOpts(top_k=4.5)
    with pytest.raises(LLMConfigError, match="TopP p must be in"):
        SampleOpts(top_p=-0.5)
    with pytest.raises(InputError, match="logits must be a non-empty 1-D array"):
        SampleOpts().into_chain().sample(np.zeros((2, 3)))


def test_sample_batch_matches_row_by_row():
    logits = logits_stream(5, 6)
    logits[4] = logits[0]
    opts = [SampleOpts(), everything_on(1), SampleOpts.llama_defaults(seed=2), SampleOpts(mirostat=1, temperature=1.0),
            SampleOpts(), SampleOpts(temperature=1.3, seed=3)]
    batch_chains = [o.into_sampler() for o in opts]
    row_chains = [c.clone() for c in batch_chains]
    for step in range(5):
        tokens = sample_batch(batch_chains, logits)
        assert tokens.tolist() == [c.sample(r) for c, r in zip(row_chains, logits)]
        assert tokens[0] == tokens[4] == int(np.argmax(logits[0]))
        logits = np.roll(logits, step + 1, axis=1)


def test_sample_batch_errors_name_the_row():
    logits = logits_stream(6, 3)
    logits[2, 7] = np.nan
    chains = [SampleOpts().into_sampler() for _ in range(3)]
    with pytest.raises(InputError, match="logits row 2 must hold finite values"):
        sample_batch(chains, logits)
    with pytest.raises(InputError, match="got 2 chains for 3 rows"):
        sample_batch(chains[:2], logits_stream(6, 3))
    with pytest.raises(InputError, match=r"\[batch, vocab\]"):
        sample_batch(chains, np.zeros(5))


def test_bf16_and_f16_logits():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    row = logits_stream(7, 1)[0]
    for dtype in (np.float16, ml_dtypes.bfloat16):
        narrow = row.astype(dtype)
        assert SampleOpts().into_chain().sample(narrow) == int(np.argmax(narrow.astype(np.float32)))
