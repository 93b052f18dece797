"""Compile generated CUDA C with nvcc (PTX for sm_90), many kernels per nvcc run.

Every source starts with the shared preamble; it is kept once and each kernel's own
part goes into a namespace of its own with the entry point renamed, so one
translation unit holds them all.
"""
from __future__ import annotations

import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from rlx_cuda.kernels.preamble import KERNEL_NAME, PREAMBLE

NVCC = shutil.which("nvcc")


def _translation_unit(sources: list[str]) -> str:
    parts = [PREAMBLE]
    for i, src in enumerate(sources):
        assert src.startswith(PREAMBLE), "every generated kernel starts with the preamble"
        body = src[len(PREAMBLE):].replace(KERNEL_NAME, f"{KERNEL_NAME}_{i}")
        parts.append(f"namespace k{i} {{\n{body}\n}}\n#undef RLX_ACC\n")
    return "".join(parts)


def _nvcc(sources: list[str], *flags: str) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernels.cu"
        path.write_text(_translation_unit(sources))
        return subprocess.run([NVCC, *flags, "-arch=sm_90", "-std=c++17", "-Werror", "all-warnings",
                               "-diag-suppress", "177,186,550", "-o", str(path.with_suffix(".out")), str(path)],
                              capture_output=True, text=True)


def compile_sources(sources: list[str]) -> str:
    res = _nvcc(sources, "-ptx")
    return "" if res.returncode == 0 else res.stderr[-6000:]


@dataclass
class CubinReport:
    errors: str            # nvcc / ptxas diagnostics when the build failed, else ""
    resources: list[str]   # ptxas "-v" lines: registers, shared memory, stack and spills


def compile_cubins(sources: list[str]) -> CubinReport:
    """Build sm_90 machine code (ptxas validates inline PTX such as mma.sync, which
    ``-ptx`` passes through unchecked) and report each kernel's resources."""
    res = _nvcc(sources, "-cubin", "-Xptxas", "-v")
    lines = [line.split(":", 1)[-1].strip() for line in res.stderr.splitlines() if "ptxas" in line or "spill" in line]
    return CubinReport("" if res.returncode == 0 else res.stderr[-6000:], lines)
