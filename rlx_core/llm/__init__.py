"""LLM decoding primitives on the host (numpy): samplers, paged and quantized KV caches,
and a continuous-batching scheduler.

* Samplers -- llama.cpp's definitions and interface (``apply``/``accept``/``reset``/
  ``clone``): :class:`SamplerChain` (``SamplerChain.builder()``), :class:`SampleOpts`
  (flat settings, ``into_chain()`` in llama.cpp's order), :func:`sample_batch`.
* Paged KV cache -- vLLM's design: a reference-counted block pool with an LRU free
  list (uncached blocks reused first) and chained-hash prefix caching
  (:class:`BlockPool`), block tables with copy-on-write forks (:class:`BlockManager`),
  and the tensors (:class:`PagedKVCache`);
  :class:`Scheduler` does continuous batching over it (token budget, chunked prefill,
  preemption by recompute).
* Quantized KV rows -- GGML's q8_0 / q4_0 / q5_0 / f16 block layouts, bit-exact with
  its reference quantizers: :func:`quantize`, :func:`dequantize`; a per-layer quantized
  KV cache with an opt-in memory-mapped file mode (:class:`QuantizedKVCache`).
"""
from .blocks import BlockPool, KVBlock
from .candidates import Candidates
from .chain import ChainBuilder, SampleOpts, SamplerChain, sample_batch
from .kvquant import F16, KV_FORMATS, Q4_0, Q5_0, Q8_0, KVFormat, dequantize, kv_format, quantize
from .paged import BlockManager, PagedKVCache
from .penalties import DRY, RepetitionPenalty
from .quantized_cache import QuantizedKVCache, QuantizedKVLayer
from .samplers import XTC, DynamicTemperature, LogitBias, MinP, Sampler, Temperature, TopK, TopNSigma, TopP, TypicalP
from .scheduler import Request, RequestStatus, ScheduledChunk, Scheduler, SchedulerOutput
from .selectors import Dist, Greedy, MirostatV1, MirostatV2
from .validate import KVCacheMemoryError, KVSlotError, LLMConfigError, LLMStateError

__all__ = [
    "Candidates", "Sampler", "SamplerChain", "ChainBuilder", "SampleOpts", "sample_batch",
    "Temperature", "DynamicTemperature", "TopK", "TopP", "MinP", "TopNSigma", "TypicalP", "XTC",
    "LogitBias", "RepetitionPenalty", "DRY", "Greedy", "Dist", "MirostatV1", "MirostatV2",
    "KVFormat", "KV_FORMATS", "F16", "Q8_0", "Q4_0", "Q5_0", "kv_format", "quantize", "dequantize",
    "BlockPool", "KVBlock", "BlockManager", "PagedKVCache", "Request", "RequestStatus", "ScheduledChunk",
    "Scheduler", "SchedulerOutput", "QuantizedKVLayer", "QuantizedKVCache", "LLMConfigError", "LLMStateError",
    "KVSlotError", "KVCacheMemoryError",
]
