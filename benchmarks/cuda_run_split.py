"""Where a full ``run()`` of the decode step goes on rlx-cuda, each part timed alone.

    python benchmarks/cuda_run_split.py          # on a machine with CuPy, torch and a GPU

The decode graph of ``cuda_bench.py`` (batch 1, one token, d_model 1024, 4 layers, 128
cached keys, bf16; 9 torch CUDA inputs, torch outputs). Each part is called with a device
sync after it, median over 300 calls: the session's input checks, the input staging
(``rlx_cuda.staging``), the CUDA graph replay, the output read, and the empty sync itself.
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


def main() -> int:
    import torch
    import cuda_bench
    from rlx_core import CompileOptions, Session
    g, params, feeds, _, _ = cuda_bench.build_model(torch, "decode", 1, 1, 1024, 16, 4, 128)
    c = Session("cuda", options=CompileOptions(backend={"outputs": "torch"})).compile(g)
    c.set_params(params)
    exe = c.executable
    for _ in range(20):
        c.run(feeds)
    staging, sync = exe._staging, torch.cuda.synchronize
    parts = {
        "full run()": lambda: c.run(feeds),
        "session input checks": lambda: c._feeds(feeds, None),
        "input staging": lambda: staging.write_inputs(feeds),
        "CUDA graph replay": exe._execute,
        "output read": lambda: exe._read_outputs(None),
        "empty sync": lambda: None,
    }
    for name, fn in parts.items():
        print(f"{name:>22}: {timed(fn, sync):.4f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
