"""Continuous batching over a paged KV cache (vLLM V1's scheduling rule).

There are no prefill and decode phases: every request has ``num_computed`` tokens
whose K/V are in the cache and ``num_tokens`` (prompt + output so far), and each step
gives requests tokens so that the former catches up with the latter, within a token
budget per step and a cap on running requests.

A step (:meth:`Scheduler.schedule`) first serves the running requests, oldest first --
one token each when decoding, the rest of the prompt (or as much as the budget allows:
chunked prefill) otherwise. When the pool cannot supply a request's blocks, the newest
running request is preempted: its blocks are freed and it returns to the front of the
queue, to be recomputed later (prefix caching often recovers its blocks). Only when no
one was preempted are waiting requests admitted, oldest first, starting from their
longest cached prefix. The caller runs the model on the scheduled tokens and reports
the sampled tokens with :meth:`Scheduler.update`: a request whose computation caught
up emits one token and finishes at ``max_new_tokens`` or its ``eos_token``.

Steps alternate strictly: ``schedule()`` again before ``update()`` of a step that
scheduled tokens would reserve the same tokens twice, and ``update()`` of a step other
than the last one scheduled would record tokens twice; both raise
:class:`~rlx_core.llm.validate.LLMStateError` and change nothing.
"""
from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass, field
from typing import Hashable, Mapping, Sequence

import numpy as np

from ..errors import InputError, InputTypeError, KVCacheFullError
from .paged import BlockManager
from .validate import LLMStateError, check_hashable, check_int

__all__ = ["Request", "RequestStatus", "ScheduledChunk", "SchedulerOutput", "Scheduler"]


class RequestStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(eq=False)
class Request:
    """One generation request and its progress."""

    request_id: Hashable
    prompt: Sequence[int]
    max_new_tokens: int
    eos_token: int | None = None
    extra_key: str | bytes | None = None
    output: list[int] = field(default_factory=list)
    num_computed: int = 0
    status: RequestStatus = RequestStatus.WAITING
    num_preemptions: int = 0

    def __post_init__(self):
        check_hashable("request_id", self.request_id)
        self.prompt = [check_int(f"request {self.request_id!r} prompt token", t, 0) for t in self.prompt]
        if not self.prompt:
            raise InputError(f"request {self.request_id!r} has an empty prompt")
        self.max_new_tokens = check_int(f"request {self.request_id!r} max_new_tokens", self.max_new_tokens, 1)

    @property
    def num_tokens(self) -> int:
        return len(self.prompt) + len(self.output)

    @property
    def tokens(self) -> list[int]:
        return self.prompt + self.output


@dataclass
class ScheduledChunk:
    """``num_tokens`` tokens of ``request`` to compute this step, from position ``start``,
    into cache ``slots``; ``emits`` when they reach its end (its logits give a token)."""

    request: Request
    start: int
    num_tokens: int
    slots: np.ndarray

    @property
    def tokens(self) -> list[int]:
        return self.request.tokens[self.start:self.start + self.num_tokens]

    @property
    def emits(self) -> bool:
        return self.start + self.num_tokens == self.request.num_tokens


@dataclass
class SchedulerOutput:
    chunks: list[ScheduledChunk]
    preempted: list[Request]

    @property
    def num_tokens(self) -> int:
        return sum(chunk.num_tokens for chunk in self.chunks)


class Scheduler:
    """Continuous-batching scheduler; see the module docstring for the rule."""

    def __init__(self, manager: BlockManager, max_num_batched_tokens: int = 2048, max_num_seqs: int = 256):
        self.manager = manager
        self.max_num_batched_tokens = check_int("max_num_batched_tokens", max_num_batched_tokens, 1)
        self.max_num_seqs = check_int("max_num_seqs", max_num_seqs, 1)
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self._ids: set = set()
        self._pending: SchedulerOutput | None = None       # the step awaiting update()

    def add_request(self, request: Request) -> None:
        """Queue a request; one that could not fit the whole pool even alone is refused."""
        if request.request_id in self._ids:
            raise InputError(f"request {request.request_id!r} was already added")
        size = self.manager.block_size
        blocks = -(-(len(request.prompt) + request.max_new_tokens) // size)
        if blocks > self.manager.pool.num_blocks:
            raise KVCacheFullError(
                f"request {request.request_id!r} needs up to {blocks} blocks ({len(request.prompt)} prompt + "
                f"{request.max_new_tokens} new tokens, {size} per block) but the pool has only "
                f"{self.manager.pool.num_blocks}: it could never finish")
        self._ids.add(request.request_id)
        self.waiting.append(request)

    @property
    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> SchedulerOutput:
        if self._pending is not None:
            raise LLMStateError(
                f"schedule() called again before update() recorded the previous step ({len(self._pending.chunks)} "
                f"chunk(s), {self._pending.num_tokens} tokens already reserved); nothing was changed")
        budget = self.max_num_batched_tokens
        chunks: list[ScheduledChunk] = []
        preempted: list[Request] = []
        index = 0
        while index < len(self.running) and budget > 0:
            request = self.running[index]
            n = min(request.num_tokens - request.num_computed, budget)
            while self.manager.blocks_needed(request.request_id, n) > self.manager.pool.num_free:
                victim = self.running.pop()
                self._preempt(victim)
                preempted.append(victim)
                if victim is request:
                    break
            if request.status is not RequestStatus.RUNNING:
                break
            chunks.append(self._reserve(request, n))
            budget -= n
            index += 1
        while not preempted and self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            chunk = self._admit(self.waiting[0], budget)
            if chunk is None:
                break
            self.running.append(self.waiting.popleft())
            chunks.append(chunk)
            budget -= chunk.num_tokens
        output = SchedulerOutput(chunks, preempted)
        if chunks:
            self._pending = output
        return output

    def update(self, output: SchedulerOutput, sampled: Mapping[Hashable, int]) -> list[Request]:
        """Record a step: ``sampled`` maps each request whose chunk ``emits`` to its new
        token. Returns the requests that finished (their blocks are freed). Everything is
        checked before anything is recorded."""
        if not isinstance(sampled, Mapping):
            raise InputTypeError(f"sampled must map request ids to tokens, got {type(sampled).__name__}")
        if not output.chunks:
            return []
        if output is not self._pending:
            raise LLMStateError("update() got a step that is not the one awaiting its update (it was already "
                                "recorded, or a later step was scheduled); nothing was changed")
        tokens = {}
        for chunk in output.chunks:
            if chunk.emits:
                request_id = chunk.request.request_id
                if request_id not in sampled:
                    raise InputError(f"request {request_id!r} reached the end of its tokens this step, "
                                     f"so it needs a sampled token (nothing was changed)")
                tokens[request_id] = check_int(f"sampled token of request {request_id!r}", sampled[request_id], 0)
        self._pending = None
        finished = []
        for chunk in output.chunks:
            request = chunk.request
            request.num_computed = chunk.start + chunk.num_tokens
            if not chunk.emits:
                continue
            token = tokens[request.request_id]
            request.output.append(token)
            if len(request.output) >= request.max_new_tokens or token == request.eos_token:
                request.status = RequestStatus.FINISHED
                self.running.remove(request)
                self.manager.free(request.request_id)
                finished.append(request)
        return finished

    def _reserve(self, request: Request, n: int) -> ScheduledChunk:
        start = request.num_computed
        slots, _ = self.manager.reserve(request.request_id, request.tokens[start:start + n])
        return ScheduledChunk(request, start, n, slots)

    def _admit(self, request: Request, budget: int) -> ScheduledChunk | None:
        """Start a waiting request on its cached prefix, if the pool has room for its
        first chunk; otherwise leave it waiting."""
        self.manager.add_sequence(request.request_id, request.extra_key)
        request.num_computed = self.manager.match_prefix(request.request_id, request.tokens)
        n = min(request.num_tokens - request.num_computed, budget)
        if self.manager.blocks_needed(request.request_id, n) > self.manager.pool.num_free:
            self.manager.free(request.request_id)
            request.num_computed = 0
            return None
        request.status = RequestStatus.RUNNING
        return self._reserve(request, n)

    def _preempt(self, request: Request) -> None:
        self.manager.free(request.request_id)
        request.num_computed = 0
        request.num_preemptions += 1
        request.status = RequestStatus.WAITING
        self.waiting.appendleft(request)
