"""Sampler chain cost per token: how it grows with the vocabulary and the batch, against
a torch implementation of the same default chain (top-k -> top-p -> min-p -> temperature
-> draw, vectorised over the batch the way HF-style samplers are; one thread, like the
numpy chains).

    python benchmarks/llm_samplers.py [--quick]

Target: the default chain on 128k-vocabulary logits, batch 1, <= 2 ms per token.
"""
from __future__ import annotations

import argparse

import numpy as np
from llm_common import md_table, median_seconds, print_table, save_section

from rlx_core.llm import SampleOpts, sample_batch

TARGET_MS = 2.0
DEFAULT = SampleOpts.llama_defaults(seed=1)
CHAINS = {
    "default (top-k 40, top-p .95, min-p .05, temp .8)": DEFAULT,
    "all samplers on": SampleOpts(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, typical_p=0.95, top_n_sigma=2.0,
                                  repetition_penalty=1.1, frequency_penalty=0.1, presence_penalty=0.1,
                                  dry_multiplier=0.8, dry_window=512, xtc_probability=0.5, xtc_threshold=0.1, seed=1),
    "temperature 0.8 only (full vocabulary)": SampleOpts(temperature=0.8, seed=1),
    "top-p .95 + temp .8 (no top-k)": SampleOpts.nucleus(0.8, 0.95, seed=1),
    "greedy": SampleOpts(),
}


def llm_like_logits(rows: int, vocab: int, seed: int = 0) -> np.ndarray:
    """Normal noise with a handful of strongly preferred tokens per row, like a model's."""
    rng = np.random.default_rng(seed)
    logits = (rng.standard_normal((rows, vocab)) * 2).astype(np.float32)
    for row in logits:
        row[rng.integers(0, vocab, 20)] += rng.uniform(4, 10, 20).astype(np.float32)
    return logits


def chain_ms(opts: SampleOpts, logits: np.ndarray) -> float:
    """Median milliseconds per token (per row) of ``sample_batch`` with one chain per row."""
    chains = [opts.into_sampler() for _ in range(logits.shape[0])]
    history = np.random.default_rng(2).integers(0, logits.shape[1], 512)
    for chain in chains:
        chain.accept_all(history)
    repeat = max(5, 200 // logits.shape[0])
    return 1e3 * median_seconds(lambda: sample_batch(chains, logits), repeat=repeat) / logits.shape[0]


def torch_default_ms(logits: np.ndarray) -> float | None:
    """The default chain in torch, batched: topk, softmax, cumsum cut, min-p, multinomial."""
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(1)                # like the numpy chains: one core per row loop
    x = torch.from_numpy(logits)
    gen = torch.Generator().manual_seed(1)

    def sample():
        values, indices = torch.topk(x, 40, dim=-1)
        probs = torch.softmax(values, dim=-1)
        cut = (torch.cumsum(probs, dim=-1) - probs) >= 0.95                      # after reaching top-p
        cut |= probs < 0.05 * probs[:, :1]                                       # min-p
        scaled = (values / 0.8).masked_fill(cut, float("-inf"))
        choice = torch.multinomial(torch.softmax(scaled, dim=-1), 1, generator=gen)
        return indices.gather(-1, choice)

    repeat = max(5, 200 // logits.shape[0])
    return 1e3 * median_seconds(sample, repeat=repeat) / logits.shape[0]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer sizes (a smoke run)")
    args = parser.parse_args(argv)
    vocabs = [32_000, 128_256] if args.quick else [32_000, 128_256, 256_000]
    batches = [1, 8] if args.quick else [1, 8, 32, 64]

    print("per-token cost by vocabulary (batch 1), ms")
    by_vocab = []
    for vocab in vocabs:
        logits = llm_like_logits(1, vocab)
        row = {"vocab": vocab, **{name: round(chain_ms(opts, logits), 3) for name, opts in CHAINS.items()}}
        row["torch default chain"] = _round(torch_default_ms(logits))
        by_vocab.append(row)
        print(f"  vocab {vocab}: " + ", ".join(f"{k}: {v}" for k, v in row.items() if k != "vocab"))

    print("per-token cost by batch (vocab 128256), ms per row")
    by_batch = []
    for batch in batches:
        logits = llm_like_logits(batch, 128_256, seed=batch)
        row = {"batch": batch, "default": round(chain_ms(DEFAULT, logits), 3),
               "greedy": round(chain_ms(SampleOpts(), logits), 3), "torch default": _round(torch_default_ms(logits))}
        by_batch.append(row)
        print(f"  batch {batch}: {row}")

    default_128k = next(r for r in by_vocab if r["vocab"] == 128_256)[next(iter(CHAINS))]
    verdict = "PASS" if default_128k <= TARGET_MS else "FAIL"
    print(f"\ntarget: default chain, vocab 128256, batch 1: {default_128k} ms <= {TARGET_MS} ms: {verdict}")

    names = list(CHAINS) + ["torch default chain"]
    vocab_md = md_table(["chain (ms / token, batch 1)"] + [f"V={r['vocab']}" for r in by_vocab],
                        [[n] + [r[n] for r in by_vocab] for n in names])
    batch_md = md_table(["batch (V=128256)", "default chain, ms / row", "greedy, ms / row", "torch default, ms / row"],
                        [[r["batch"], r["default"], r["greedy"], r["torch default"]] for r in by_batch])
    print()
    print_table(["chain"] + [f"V={r['vocab']}" for r in by_vocab], [[n] + [r[n] for r in by_vocab] for n in names])
    markdown = (f"Target: default chain at V=128256, batch 1 <= {TARGET_MS} ms/token: "
                f"**{default_128k} ms ({verdict})**.\n\n{vocab_md}\n\n{batch_md}")
    save_section("samplers", {"target_ms": TARGET_MS, "default_128k_ms": default_128k, "verdict": verdict,
                              "by_vocab": by_vocab, "by_batch": by_batch}, markdown)


def _round(x):
    return None if x is None else round(x, 3)


if __name__ == "__main__":
    main()
