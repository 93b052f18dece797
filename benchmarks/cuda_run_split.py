"""Where a full ``run()`` of the decode step goes on rlx-cuda, each part timed alone.

    python benchmarks/cuda_run_split.py          # on a machine with CuPy, torch and a GPU

The decode graph of ``cuda_bench.py`` (batch 1, one token, d_model 1024, 4 layers, 128
cached keys, bf16; 9 inputs), run two ways: with torch CUDA inputs and torch outputs, and
with numpy inputs and numpy outputs (2 MiB of inputs per run). Each part is called with a
device sync after it, median over 300 calls: the session's input checks, the input staging
(``rlx_cuda.staging``), the CUDA graph replay, the output read, and the empty sync itself.
Last, the floor of the numpy path: the inputs' host copy into pinned memory and their upload.
"""
from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parent))


def timed(fn, sync, n: int = 300) -> float:
    for _ in range(10):
        fn()
    sync()
    laps = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        sync()
        laps.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(laps)


def split(c, feeds, sync) -> dict[str, float]:
    """Each part of ``c.run(feeds)`` timed alone (ms)."""
    exe = c.executable
    for _ in range(20):
        c.run(feeds)
    staging = exe._staging
    parts = {
        "full run()": lambda: c.run(feeds),
        "session input checks": lambda: c._feeds(feeds, None),
        "input staging": lambda: staging.write_inputs(feeds),
        "CUDA graph replay": exe._execute,
        "output read": lambda: exe._read_outputs(None),
        "empty sync": lambda: None,
    }
    return {name: timed(fn, sync) for name, fn in parts.items()}


def upload_floor(host_feeds: dict, sync) -> dict[str, float]:
    """ms to copy ``host_feeds`` into one pinned buffer, to upload that buffer (one copy),
    and both: what a run with these numpy inputs pays before the device can start; and,
    for comparison, to upload each input from its own memory pinned in place for the
    copy (``cudaHostRegister`` / ``cudaHostUnregister``) or straight from pageable memory
    (the driver stages it), neither of which needs a host copy of ours."""
    import cupy as cp
    import numpy as np
    total = sum(v.nbytes for v in host_feeds.values())
    mem = cp.cuda.alloc_pinned_memory(total)
    pinned, dev = np.frombuffer(mem, np.uint8, total), cp.empty(total, cp.uint8)
    views, offset = [], 0
    for v in host_feeds.values():
        views.append((pinned[offset:offset + v.nbytes], v.reshape(-1).view(np.uint8)))
        offset += v.nbytes
    stream = cp.cuda.get_current_stream().ptr
    rt = cp.cuda.runtime

    def copy():
        for dst, src in views:
            np.copyto(dst, src)

    def upload():
        rt.memcpyAsync(dev.data.ptr, mem.ptr, total, 1, stream)

    def pinned_in_place():
        at = 0
        for _, src in views:
            rt.hostRegister(src.ctypes.data, src.nbytes, 0)
            rt.memcpyAsync(dev.data.ptr + at, src.ctypes.data, src.nbytes, 1, stream)
            at += src.nbytes
        rt.streamSynchronize(stream)
        for _, src in views:
            rt.hostUnregister(src.ctypes.data)
    def pageable():
        at = 0
        for _, src in views:
            rt.memcpyAsync(dev.data.ptr + at, src.ctypes.data, src.nbytes, 1, stream)
            at += src.nbytes
    times = {"host copy": timed(copy, sync), "upload": timed(upload, sync), "pageable uploads": timed(pageable, sync),
             "both": timed(lambda: (copy(), upload()), sync)}
    try:
        times["pinned in place, upload"] = timed(pinned_in_place, sync)
    except Exception as e:  # e.g. two inputs on one page
        print(f"pinning in place failed: {type(e).__name__}: {e}")
    return times


def main() -> int:
    import ml_dtypes
    import torch
    import cuda_bench
    from rlx_core import CompileOptions, Session
    g, params, feeds, _, _ = cuda_bench.build_model(torch, "decode", 1, 1, 1024, 16, 4, 128)
    host_feeds = {k: v.float().cpu().numpy().astype(ml_dtypes.bfloat16) for k, v in feeds.items()}
    sync = torch.cuda.synchronize
    for mode, mode_feeds in (("torch", feeds), ("numpy", host_feeds)):
        backend = {"outputs": "torch"} if mode == "torch" else {}
        c = Session("cuda", options=CompileOptions(backend=backend)).compile(g)
        c.set_params(params)
        print(f"{mode} inputs and outputs ({sum(v.nbytes for v in host_feeds.values()) / 2**20:.1f} MiB of inputs):")
        times = split(c, mode_feeds, sync)
        for name, ms in times.items():
            print(f"{name:>22}: {ms:.4f} ms")
        print(f"{'run / replay':>22}: {times['full run()'] / times['CUDA graph replay']:.2f}x")
    floor = upload_floor(host_feeds, sync)
    replay = times["CUDA graph replay"]
    print("numpy inputs, each part alone: " + ", ".join(f"{k} {v:.4f} ms" for k, v in floor.items()))
    print(f"floor for numpy inputs: host copy into pinned memory + one upload, so run / replay >= "
          f"{(floor['both'] + replay) / replay:.2f}x; with the upload hidden behind the work "
          f"{(floor['host copy'] + replay) / replay:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
