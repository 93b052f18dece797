"""Continuous-batching simulation: 1,000 requests with random prompt and output lengths
arriving over time, a stand-in model that returns random tokens, and a KV pool too small
to hold every request at once.

    python benchmarks/llm_scheduler.py [--requests 1000] [--seed 0]

Checks that every request completes and that the pool never exceeds its block budget;
reports throughput (tokens per step, and the scheduler's own cost), block utilisation,
token-budget utilisation, prefix-cache savings and preemptions.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
from llm_common import md_table, print_table, save_section

from rlx_core.llm import BlockManager, Request, Scheduler

NUM_BLOCKS, BLOCK_SIZE = 1024, 16              # 16,384 token slots
TOKEN_BUDGET, MAX_SEQS = 2048, 64
VOCAB, EOS = 32_000, 2


def make_requests(n: int, rng: np.random.Generator) -> tuple[list[Request], np.ndarray]:
    """Prompts log-normal in length (8 .. 2048 tokens), 30% behind one of four shared
    system prompts; outputs 1 .. 512 tokens; Poisson arrivals, one per 3 steps on average."""
    systems = [rng.integers(3, VOCAB, int(length)).tolist() for length in (128, 256, 384, 512)]
    requests = []
    for i in range(n):
        length = int(np.clip(rng.lognormal(5.0, 1.0), 8, 2048))
        prompt = rng.integers(3, VOCAB, length).tolist()
        if rng.random() < 0.3:
            prompt = systems[rng.integers(0, 4)] + prompt[:2048 - 512]
        requests.append(Request(i, prompt, int(rng.integers(1, 513)), eos_token=EOS))
    arrivals = np.cumsum(rng.exponential(3.0, n)).astype(int)
    return requests, arrivals


def simulate(n: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    requests, arrivals = make_requests(n, rng)
    manager = BlockManager(NUM_BLOCKS, BLOCK_SIZE, prefix_caching=True)
    scheduler = Scheduler(manager, TOKEN_BUDGET, MAX_SEQS)
    used, scheduled, running = [], [], []
    finished, preemptions, computed_prompt, step, next_arrival = 0, 0, 0, 0, 0
    schedule_s, t_start = 0.0, time.perf_counter()
    while finished < n:
        while next_arrival < n and arrivals[next_arrival] <= step:
            scheduler.add_request(requests[next_arrival])
            next_arrival += 1
        t0 = time.perf_counter()
        out = scheduler.schedule()
        schedule_s += time.perf_counter() - t0
        assert manager.pool.num_used <= NUM_BLOCKS and out.num_tokens <= TOKEN_BUDGET
        used.append(manager.pool.num_used)
        scheduled.append(out.num_tokens)
        running.append(len(scheduler.running))
        preemptions += len(out.preempted)
        computed_prompt += sum(max(0, min(c.start + c.num_tokens, len(c.request.prompt)) - c.start) for c in out.chunks)
        # the stand-in model: a random next token, EOS with probability 1/300
        sampled = {c.request.request_id: EOS if rng.random() < 1 / 300 else int(rng.integers(3, VOCAB))
                   for c in out.chunks if c.emits}
        t0 = time.perf_counter()
        finished += len(scheduler.update(out, sampled))
        schedule_s += time.perf_counter() - t0
        step += 1
        if step % 500 == 0:
            print(f"  step {step:>6}: {finished:>5}/{n} finished, {len(scheduler.running):>3} running, "
                  f"{len(scheduler.waiting):>4} waiting, {manager.pool.num_used:>4}/{NUM_BLOCKS} blocks")
    wall = time.perf_counter() - t_start
    assert all(r.status.value == "finished" for r in requests) and manager.pool.num_used == 0
    generated = sum(len(r.output) for r in requests)
    prompt_tokens = sum(len(r.prompt) for r in requests)
    busy = np.array(running) > 0
    return {
        "requests": n, "completed": sum(r.status.value == "finished" for r in requests), "steps": step,
        "pool_blocks": NUM_BLOCKS, "block_size": BLOCK_SIZE, "token_budget": TOKEN_BUDGET, "max_seqs": MAX_SEQS,
        "max_blocks_used": int(max(used)),
        "mean_block_utilisation": round(float(np.mean(np.array(used)[busy])) / NUM_BLOCKS, 3),
        "mean_budget_utilisation": round(float(np.mean(np.array(scheduled)[busy])) / TOKEN_BUDGET, 3),
        "mean_running": round(float(np.mean(np.array(running)[busy])), 1),
        "generated_tokens": generated, "generated_per_step": round(generated / step, 2),
        "scheduled_per_step": round(float(np.mean(scheduled)), 1),
        "prompt_tokens": prompt_tokens, "prompt_tokens_computed": computed_prompt,
        "preemptions": preemptions, "scheduler_ms_per_step": round(schedule_s / step * 1e3, 3),
        "scheduled_tokens_per_s_of_scheduler": round(sum(scheduled) / schedule_s), "wall_s": round(wall, 2),
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(f"simulating {args.requests} requests: pool {NUM_BLOCKS} blocks x {BLOCK_SIZE} tokens, "
          f"budget {TOKEN_BUDGET} tokens/step, at most {MAX_SEQS} running")
    result = simulate(args.requests, args.seed)
    print()
    print_table(["metric", "value"], list(result.items()))
    ok = result["completed"] == result["requests"] and result["max_blocks_used"] <= NUM_BLOCKS
    print(f"\nall requests completed within the block budget: {'PASS' if ok else 'FAIL'}")
    rows = [["requests completed", f"{result['completed']} / {result['requests']}"],
            ["steps", result["steps"]],
            ["peak blocks used (budget)", f"{result['max_blocks_used']} ({NUM_BLOCKS})"],
            ["mean block utilisation (busy steps)", f"{result['mean_block_utilisation']:.1%}"],
            ["mean token-budget utilisation", f"{result['mean_budget_utilisation']:.1%}"],
            ["generated tokens / step", result["generated_per_step"]],
            ["scheduled tokens / step", result["scheduled_per_step"]],
            ["prompt tokens computed, recomputes included / total (prefix cache)",
             f"{result['prompt_tokens_computed']} / {result['prompt_tokens']}"],
            ["preemptions (recompute)", result["preemptions"]],
            ["scheduler cost per step", f"{result['scheduler_ms_per_step']} ms"],
            ["scheduled tokens per second of scheduler time", result["scheduled_tokens_per_s_of_scheduler"]]]
    markdown = (f"{result['requests']} requests, pool {NUM_BLOCKS} x {BLOCK_SIZE} tokens, budget {TOKEN_BUDGET} "
                f"tokens/step, <= {MAX_SEQS} running: **{'PASS' if ok else 'FAIL'}**.\n\n"
                + md_table(["metric", "value"], rows))
    save_section("scheduler", {"result": result, "verdict": "PASS" if ok else "FAIL"}, markdown)


if __name__ == "__main__":
    main()
