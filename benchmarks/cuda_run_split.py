"""Where a full ``run()`` of the decode step goes on rlx-cuda, each part timed alone.

    python benchmarks/cuda_run_split.py          # on a machine with CuPy, torch and a GPU

The decode graph of ``cuda_bench.py`` (batch 1, one token, d_model 1024, 4 layers, 128
cached keys, bf16; 9 inputs), run two ways: with torch CUDA inputs and torch outputs, and
with numpy inputs and numpy outputs (2 MiB of inputs per run). Each part is called with a
device sync after it, median over 300 calls: the session's input checks, with numpy inputs
the host copies into the pinned mirror and the CUDA graphs that upload them, the
input staging apart (``rlx_cuda.staging``), the plain CUDA graph replay, the output read,
and the empty sync itself.
Last, the floor of the numpy path: the inputs' host copy into pinned memory and their
upload, each alone, and the host copy by the copy threads (``staging.copy_to_mirror``).
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
    """Each part of ``c.run(feeds)`` timed alone (ms). With numpy inputs a run fills the
    pinned mirror segment by segment and launches each segment's graph, which uploads
    its inputs itself (``CudaExecutable._run_uploading``); the parts are timed whole (all
    host copies, all launches), and so is the other path: the staging's own upload, then
    the plain graph."""
    import cupy as cp
    exe = c.executable
    for _ in range(20):
        c.run(feeds)
    staging = exe._staging
    parts = {"full run()": lambda: c.run(feeds), "session input checks": lambda: c._feeds(feeds, None)}
    if exe._upload_graphs:
        def launch_all():
            for _, graph in exe._upload_graphs:
                graph.launch(cp.cuda.get_current_stream())
        parts["host copies into the pinned mirror"] = lambda: staging.fill_mirror(feeds)
        parts[f"{len(exe._upload_graphs)} graphs with the uploads"] = launch_all
    parts.update({
        "input staging apart": lambda: staging.write_inputs(feeds),
        "CUDA graph replay": exe._execute,
        "output read": lambda: exe._read_outputs(None),
        "empty sync": lambda: None,
    })
    return {name: timed(fn, sync) for name, fn in parts.items()}


def upload_floor(host_feeds: dict, sync) -> dict[str, float]:
    """ms to copy ``host_feeds`` into one pinned buffer, to upload it (one copy), and
    both: what a run with these numpy inputs pays before the device can start when
    nothing overlaps."""
    import cupy as cp
    import numpy as np
    from rlx_cuda.staging import copy_to_mirror
    total = sum(v.nbytes for v in host_feeds.values())
    mem = cp.cuda.alloc_pinned_memory(total)
    pinned, dev = np.frombuffer(mem, np.uint8, total), cp.empty(total, cp.uint8)
    views, offset = [], 0
    for v in host_feeds.values():
        views.append((pinned[offset:offset + v.nbytes], v.reshape(-1).view(np.uint8)))
        offset += v.nbytes

    def copy():
        for dst, src in views:
            np.copyto(dst, src)

    def upload():
        cp.cuda.runtime.memcpyAsync(dev.data.ptr, mem.ptr, total, 1, cp.cuda.get_current_stream().ptr)
    return {"host copy": timed(copy, sync), "host copy, copy threads": timed(lambda: copy_to_mirror(views), sync),
            "upload": timed(upload, sync),
            "both": timed(lambda: (copy(), upload()), sync)}


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
            print(f"{name:>36}: {ms:.4f} ms")
        print(f"{'run / replay':>36}: {times['full run()'] / times['CUDA graph replay']:.2f}x")
    floor = upload_floor(host_feeds, sync)
    replay = times["CUDA graph replay"]
    print("numpy inputs with nothing overlapped: " + ", ".join(f"{k} {v:.4f} ms" for k, v in floor.items())
          + f"; run / replay >= {(floor['both'] + replay) / replay:.2f}x that way")
    return 0


if __name__ == "__main__":
    sys.exit(main())
