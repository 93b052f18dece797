"""Compile generated CUDA C with nvcc (PTX for sm_90), many kernels per nvcc run.

Every source starts with the shared preamble; it is kept once and each kernel's own
part goes into a namespace of its own with the entry point renamed, so one
translation unit holds them all. Returns nvcc's diagnostics (empty when clean).
"""
from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from rlx_cuda.kernels.preamble import KERNEL_NAME, PREAMBLE

NVCC = shutil.which("nvcc")


def compile_sources(sources: list[str]) -> str:
    parts = [PREAMBLE]
    for i, src in enumerate(sources):
        assert src.startswith(PREAMBLE), "every generated kernel starts with the preamble"
        body = src[len(PREAMBLE):].replace(KERNEL_NAME, f"{KERNEL_NAME}_{i}")
        parts.append(f"namespace k{i} {{\n{body}\n}}\n#undef RLX_ACC\n")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernels.cu"
        path.write_text("".join(parts))
        res = subprocess.run([NVCC, "-ptx", "-arch=sm_90", "-std=c++17", "-Werror", "all-warnings",
                              "-diag-suppress", "177,186,550", "-o", str(path.with_suffix(".ptx")), str(path)],
                             capture_output=True, text=True)
    return "" if res.returncode == 0 else res.stderr[-6000:]
