"""Several concurrent requests through a tiny decoder: an RLX graph run by
``CompiledGraph``, a paged KV cache, a continuous-batching scheduler and sampler chains.

    python examples/decode_demo.py [--requests 6] [--max-new 32] [--blocks 40] [--seed 0]

The decoder has random weights -- its text is gibberish, the plumbing is real. It is
Llama-shaped: token embedding; per layer RMSNorm, grouped-query attention with RoPE,
residual, RMSNorm, SiLU-gated MLP, residual; a final RMSNorm and an output projection.
Tokens are the 95 printable ASCII characters. One builder makes two graphs, compiled once:

* prefill: one request, a chunk of up to ``chunk`` tokens after its cached past;
* decode: up to ``max_batch`` requests, one new token each.

Both take the past K/V as fixed-size inputs ``[batch, kv_heads, max_context, head_dim]``
gathered from the paged cache, with an additive mask that hides padding and the future.
Each step the scheduler picks chunks; the engine runs them, writes the new K/V into the
slots the scheduler reserved, lets each request whose tokens are all computed sample its
next token with its own sampler chain, and reports the tokens back.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass

import numpy as np

from rlx_core import Graph, Session, evaluate
from rlx_core.ir.ops.nn import rope_tables
from rlx_core.llm import PagedKVCache, Request, SampleOpts, Scheduler, sample_batch


@dataclass(frozen=True)
class DecoderConfig:
    vocab: int = 95             # printable ASCII, " " to "~"
    d_model: int = 64
    layers: int = 2
    q_heads: int = 4
    kv_heads: int = 2
    head_dim: int = 16
    ffn: int = 128
    max_context: int = 96      # past tokens a graph can attend to
    chunk: int = 16            # prefill graph's tokens per call
    max_batch: int = 4         # decode graph's rows (and the scheduler's running cap)


def encode(text: str) -> list[int]:
    return [min(max(ord(c) - 32, 0), 94) for c in text]


def decode(tokens) -> str:
    return "".join(chr(32 + int(t)) for t in tokens)


def init_params(cfg: DecoderConfig, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)

    def dense(fan_in, fan_out):
        return (rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in)).astype(np.float32)

    d, q, kv = cfg.d_model, cfg.q_heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
    params = {"embed": rng.standard_normal((cfg.vocab, d)).astype(np.float32),
              "final_norm": np.ones(d, np.float32), "lm_head": dense(d, cfg.vocab) * 4}
    for i in range(cfg.layers):
        params |= {f"attn_norm{i}": np.ones(d, np.float32), f"wq{i}": dense(d, q), f"wk{i}": dense(d, kv),
                   f"wv{i}": dense(d, kv), f"wo{i}": dense(q, d), f"mlp_norm{i}": np.ones(d, np.float32),
                   f"w_gate{i}": dense(d, cfg.ffn), f"w_up{i}": dense(d, cfg.ffn), f"w_down{i}": dense(cfg.ffn, d)}
    return params


def build_graph(cfg: DecoderConfig, batch: int, chunk: int, past: int) -> Graph:
    """Logits ``[batch, chunk, vocab]`` and each layer's new K, V ``[batch, kv_heads,
    chunk, head_dim]`` for ``chunk`` tokens per row after ``past`` cached ones (0: none).
    Inputs: ``ids``; RoPE ``cos``/``sin`` ``[batch * chunk, head_dim / 2]`` (row-major
    positions); additive mask ``bias [batch, 1, chunk, past + chunk]``; ``past_k{i}``,
    ``past_v{i}``."""
    builder = _DecoderGraph(cfg, batch, chunk, past)
    g, d = builder.g, cfg.d_model
    h = g.gather(g.param("embed", (cfg.vocab, d)), g.input("ids", (batch, chunk), "i64"))
    new_kv = []
    for i in range(cfg.layers):
        h, k, v = builder.layer(h, i)
        new_kv += [k, v]
    logits = g.rms_norm(h, g.param("final_norm", (d,))) @ g.param("lm_head", (d, cfg.vocab))
    g.set_outputs([logits, *new_kv], ["logits", *(f"{kv}{i}" for i in range(cfg.layers) for kv in "kv")])
    return g


class _DecoderGraph:
    """The pieces of :func:`build_graph`: shared inputs, head reshapes, RoPE, one layer."""

    def __init__(self, cfg: DecoderConfig, batch: int, chunk: int, past: int):
        self.cfg, self.batch, self.chunk, self.past = cfg, batch, chunk, past
        self.g = Graph(f"tiny_decoder_b{batch}_c{chunk}_p{past}")
        self.cos, self.sin = (self.g.input(name, (batch * chunk, cfg.head_dim // 2)) for name in ("cos", "sin"))
        self.bias = self.g.input("bias", (batch, 1, chunk, past + chunk))

    def param(self, name: str, layer: int, *dims: int):
        return self.g.param(f"{name}{layer}", dims)

    def heads(self, x, n: int):
        """[B, C, n * head_dim] -> [B, n, C, head_dim]."""
        return self.g.transpose(self.g.reshape(x, (self.batch, self.chunk, n, self.cfg.head_dim)), (0, 2, 1, 3))

    def rotate(self, x, n: int):
        """RoPE with its own position for every (row, token): rows and tokens are merged
        into the op's sequence axis, whose tables are ``cos``/``sin``."""
        g, rows, hd = self.g, self.batch * self.chunk, self.cfg.head_dim
        flat = g.reshape(g.transpose(x, (1, 0, 2, 3)), (1, n, rows, hd))
        return g.transpose(g.reshape(g.rope(flat, self.cos, self.sin), (n, self.batch, self.chunk, hd)), (1, 0, 2, 3))

    def layer(self, h, i: int):
        """One decoder layer: returns the new residual stream and this layer's K, V."""
        g, cfg = self.g, self.cfg
        d, hd, q_width, kv_width = cfg.d_model, cfg.head_dim, cfg.q_heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
        x = g.rms_norm(h, self.param("attn_norm", i, d))
        q = self.rotate(self.heads(x @ self.param("wq", i, d, q_width), cfg.q_heads), cfg.q_heads)
        k = self.rotate(self.heads(x @ self.param("wk", i, d, kv_width), cfg.kv_heads), cfg.kv_heads)
        v = self.heads(x @ self.param("wv", i, d, kv_width), cfg.kv_heads)
        keys, values = k, v
        if self.past:
            past_dims = (self.batch, cfg.kv_heads, self.past, hd)
            keys = g.concat([g.input(f"past_k{i}", past_dims), k], axis=2)
            values = g.concat([g.input(f"past_v{i}", past_dims), v], axis=2)
        attended = g.transpose(g.attention(q, keys, values, self.bias), (0, 2, 1, 3))
        h = h + g.reshape(attended, (self.batch, self.chunk, q_width)) @ self.param("wo", i, q_width, d)
        x = g.rms_norm(h, self.param("mlp_norm", i, d))
        gated = g.silu(x @ self.param("w_gate", i, d, cfg.ffn)) * (x @ self.param("w_up", i, d, cfg.ffn))
        return h + gated @ self.param("w_down", i, cfg.ffn, d), k, v


def mask(past_lengths, chunk: int, past: int) -> np.ndarray:
    """``[rows, 1, chunk, past + chunk]``: query i of a row sees that row's first
    ``past_length`` cached keys and the new keys 0..i; -inf hides the rest."""
    lengths = np.asarray(past_lengths)[:, None, None, None]
    cols = np.arange(past + chunk)
    rows = np.arange(chunk)[:, None]
    visible = np.where(cols < past, cols < lengths, cols - past <= rows)
    return np.where(visible, 0.0, -np.inf).astype(np.float32)


def rope_rows(positions, cfg: DecoderConfig) -> tuple[np.ndarray, np.ndarray]:
    """cos, sin ``[len(positions), head_dim / 2]`` for arbitrary token positions."""
    tables = [rope_tables(1, cfg.head_dim, offset=int(p)) for p in positions]
    return np.concatenate([t[0] for t in tables]), np.concatenate([t[1] for t in tables])


def reference_logits(cfg: DecoderConfig, params, tokens) -> np.ndarray:
    """Logits of the next token after ``tokens``, recomputing the whole sequence with the
    reference interpreter and no cache (what the cached, batched path must reproduce)."""
    n = len(tokens)
    cos, sin = rope_tables(n, cfg.head_dim)
    feeds = {"ids": np.array([tokens], np.int64), "cos": cos, "sin": sin, "bias": mask([0], n, 0)}
    return evaluate(build_graph(cfg, 1, n, 0), feeds, params)[0][0, -1]


class Engine:
    """Compiled graphs + paged cache + scheduler + one sampler chain per request."""

    def __init__(self, cfg: DecoderConfig, params, num_blocks: int = 40, block_size: int = 8,
                 max_num_batched_tokens: int = 24, device: str = "cpu"):
        self.cfg = cfg
        session = Session(device)
        self.prefill = session.compile(build_graph(cfg, 1, cfg.chunk, cfg.max_context))
        self.decode = session.compile(build_graph(cfg, cfg.max_batch, 1, cfg.max_context))
        for compiled in (self.prefill, self.decode):
            compiled.set_params(params)
        self.cache = PagedKVCache(cfg.layers, cfg.kv_heads, cfg.head_dim, num_blocks, block_size)
        self.scheduler = Scheduler(self.cache.manager, max_num_batched_tokens, max_num_seqs=cfg.max_batch)
        self.chains = {}
        self.logits_used: dict = {}          # request id -> the logits each of its tokens was sampled from
        self.steps = self.preemptions = 0

    def submit(self, request_id, prompt: list[int], max_new_tokens: int, opts: SampleOpts) -> None:
        if len(prompt) + max_new_tokens > self.cfg.max_context:
            raise ValueError(f"request {request_id!r}: {len(prompt)} + {max_new_tokens} tokens exceed the "
                             f"graphs' context of {self.cfg.max_context}")
        chain = opts.into_sampler()
        chain.accept_all(prompt)                      # the prompt counts for repetition penalties
        self.chains[request_id] = chain
        self.logits_used[request_id] = []
        self.scheduler.add_request(Request(request_id, prompt, max_new_tokens))

    def run(self) -> list[Request]:
        finished = []
        while self.scheduler.has_unfinished:
            finished += self.step()
        return finished

    def step(self) -> list[Request]:
        out = self.scheduler.schedule()
        self.steps += 1
        self.preemptions += len(out.preempted)
        logits = {}
        for chunk in out.chunks:
            if chunk.num_tokens > 1:
                logits.update(self._run_prefill(chunk))
        decodes = [c for c in out.chunks if c.num_tokens == 1]
        if decodes:
            logits.update(self._run_decode(decodes))
        emitting = [c.request for c in out.chunks if c.emits]
        rows = np.stack([logits[r.request_id] for r in emitting]) if emitting else np.zeros((0, self.cfg.vocab))
        tokens = sample_batch([self.chains[r.request_id] for r in emitting], rows)
        for request, row in zip(emitting, rows):
            self.logits_used[request.request_id].append(row)
        return self.scheduler.update(out, {r.request_id: int(t) for r, t in zip(emitting, tokens)})

    def _past(self, seq_ids, lengths, rows: int) -> dict[str, np.ndarray]:
        """Each layer's cached K/V for the first ``lengths`` tokens, padded to the graph."""
        feeds = {}
        for i in range(self.cfg.layers):
            k, v, _ = self.cache.gather_batch(seq_ids, i, lengths, width=self.cfg.max_context)
            pad = ((0, rows - len(seq_ids)), (0, 0), (0, 0), (0, 0))
            feeds[f"past_k{i}"], feeds[f"past_v{i}"] = np.pad(k, pad), np.pad(v, pad)
        return feeds

    def _store(self, outputs, row: int, first: int, slots) -> None:
        """Write ``len(slots)`` new tokens of one graph row, from token ``first``, to the cache."""
        n = len(slots)
        for i in range(self.cfg.layers):
            k, v = outputs[f"k{i}"][row, :, first:first + n], outputs[f"v{i}"][row, :, first:first + n]
            self.cache.write(i, slots, k.transpose(1, 0, 2), v.transpose(1, 0, 2))

    def _run_prefill(self, chunk) -> dict:
        """Run a chunk ``chunk.num_tokens`` long through the prefill graph, ``cfg.chunk`` at a time."""
        size, seq = self.cfg.chunk, chunk.request.request_id
        tokens = chunk.tokens
        for offset in range(0, len(tokens), size):
            piece = tokens[offset:offset + size]
            past = chunk.start + offset
            ids = np.zeros((1, size), np.int64)
            ids[0, :len(piece)] = piece
            cos, sin = rope_tables(size, self.cfg.head_dim, offset=past)
            feeds = {"ids": ids, "cos": cos, "sin": sin, "bias": mask([past], size, self.cfg.max_context),
                     **self._past([seq], [past], 1)}
            outputs = self.prefill.run(feeds)
            self._store(outputs, 0, 0, chunk.slots[offset:offset + len(piece)])
        return {seq: outputs["logits"][0, len(piece) - 1]} if chunk.emits else {}

    def _run_decode(self, chunks) -> dict:
        """One new token for each of ``chunks`` (at most ``max_batch``), batched."""
        rows = self.cfg.max_batch
        seqs = [c.request.request_id for c in chunks]
        positions = [c.start for c in chunks] + [0] * (rows - len(chunks))
        ids = np.zeros((rows, 1), np.int64)
        ids[:len(chunks), 0] = [c.tokens[0] for c in chunks]
        cos, sin = rope_rows(positions, self.cfg)
        feeds = {"ids": ids, "cos": cos, "sin": sin, "bias": mask(positions, 1, self.cfg.max_context),
                 **self._past(seqs, positions[:len(chunks)], rows)}
        outputs = self.decode.run(feeds)
        for row, chunk in enumerate(chunks):
            self._store(outputs, row, 0, chunk.slots)
        return {c.request.request_id: outputs["logits"][row, 0] for row, c in enumerate(chunks) if c.emits}


DEMO_REQUESTS = [
    ("greedy", "Once upon a time, ", SampleOpts()),
    ("llama defaults", "Once upon a time, there", SampleOpts.llama_defaults(seed=1)),
    ("nucleus", "The quick brown fox", SampleOpts.nucleus(0.9, 0.9, seed=2)),
    ("mirostat v2", "Paged attention ", SampleOpts(temperature=1.0, mirostat=2, mirostat_tau=4.0, seed=3)),
    ("penalties+dry", "Repeat after me: ", SampleOpts(temperature=0.8, top_k=20, repetition_penalty=1.3,
                                                      dry_multiplier=0.8, seed=4)),
    ("greedy, shared prefix", "Once upon a time, there", SampleOpts()),
]


def run_demo(num_requests: int = 6, max_new_tokens: int = 32, num_blocks: int = 40, seed: int = 0):
    cfg = DecoderConfig()
    params = init_params(cfg, seed)
    engine = Engine(cfg, params, num_blocks=num_blocks)
    for i in range(num_requests):
        label, prompt, opts = DEMO_REQUESTS[i % len(DEMO_REQUESTS)]
        engine.submit(f"{i}:{label}", encode(prompt), max_new_tokens, opts)
    return engine, engine.run(), params


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=6)
    parser.add_argument("--max-new", type=int, default=32)
    parser.add_argument("--blocks", type=int, default=40, help="KV blocks of 8 tokens (small: forces preemption)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    engine, finished, _ = run_demo(args.requests, args.max_new, args.blocks, args.seed)
    print(f"{'request':<26} {'prompt':<26} generated")
    for request in sorted(finished, key=lambda r: r.request_id):
        print(f"{request.request_id:<26} {decode(request.prompt)!r:<26} {decode(request.output)!r}")
    print(f"\n{engine.steps} steps, {sum(len(r.output) for r in finished)} tokens generated, "
          f"{engine.preemptions} preemption(s), KV pool of {engine.cache.manager.pool.num_blocks} blocks "
          f"x {engine.cache.block_size} tokens")


if __name__ == "__main__":
    main()
