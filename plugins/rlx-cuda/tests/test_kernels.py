"""The generated CUDA C, checked without a GPU: every kernel the conformance cases
lower to compiles (nvcc, sm_90, warnings as errors), and the device Philox and
bfloat16 code gives the host's bits (compiled for the host with g++)."""
import shutil
import subprocess

import ml_dtypes
import numpy as np
import pytest
from rlx_core.rng import philox_u32, philox_uniform
from rlx_core.testing.cases import all_cases, build_case

from rlx_cuda.kernels.elementwise import Access, FusedKernel, FusedOp, broadcast_access, coalesce
from rlx_cuda.kernels.philox import PHILOX_DEVICE
from rlx_cuda.kernels.preamble import PREAMBLE
from rlx_cuda.lower import LowerContext, lower_graph

from nvcc_check import NVCC, compile_sources

GXX = shutil.which("g++")


def _conformance_sources(**ctx) -> list[str]:
    seen = {}
    for case in all_cases():
        for step in lower_graph(LowerContext(build_case(case), **ctx)):
            for src in step.sources():
                seen.setdefault(src, case.id)
    return list(seen)


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
def test_every_conformance_kernel_compiles():
    sources = _conformance_sources()
    assert len(sources) > 500
    errors = compile_sources(sources)
    assert not errors, errors


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
def test_chunked_attention_and_unfused_kernels_compile():
    sources = _conformance_sources(fuse=False, attention_scores_bytes=64)
    errors = compile_sources(sources)
    assert not errors, errors


def _host_program(tmp_path, body: str) -> str:
    src = tmp_path / "host.cpp"
    src.write_text("#include <cstdio>\n#include <cstring>\n#include <cmath>\n#define RLX_D static inline\n"
                   "static float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }\n"
                   "static unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }\n"
                   "static float __fadd_rn(float a, float b) { return a + b; }\n"
                   "static float __fsub_rn(float a, float b) { return a - b; }\n"
                   "static float __fmul_rn(float a, float b) { return a * b; }\n" + body)
    exe = tmp_path / "host"
    subprocess.run([GXX, "-O1", "-ffp-contract=off", "-o", str(exe), str(src)], check=True, capture_output=True)
    return subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout


@pytest.mark.skipif(GXX is None, reason="g++ is not installed")
@pytest.mark.parametrize("seed", [0, 42, 2**64 - 1, 0x9E3779B97F4A7C15])
def test_device_philox_matches_the_cpu_stream(tmp_path, seed):
    from rlx_cuda.kernels.philox import PhiloxKernel
    uniform = PhiloxKernel("uniform", None, 1, 0.0, 1.0)
    main = (PHILOX_DEVICE + "int main() {\n"
            f"  for (unsigned long long t = 0; t < 8; ++t) {{ rlx_u32x4 q = rlx_philox(t, {seed}ull);\n"
            "    printf(\"%u %u %u %u\\n\", q.x, q.y, q.z, q.w); }\n"
            f"  for (unsigned long long t = 0; t < 8; ++t) {{ rlx_u32x4 q = rlx_philox(t, {seed}ull);\n"
            "    unsigned w[4] = {q.x, q.y, q.z, q.w};\n"
            "    for (int k = 0; k < 4; ++k) { float v = __fadd_rn(-2.5f, __fmul_rn(rlx_unit(w[k]), "
            "__fsub_rn(7.0f, -2.5f))); unsigned u; memcpy(&u, &v, 4); printf(\"%u\\n\", u); } }\n"
            "  return 0;\n}\n")
    assert uniform.threads == 1
    out = _host_program(tmp_path, main).split()
    words = np.array(out[:32], dtype=np.uint64).astype(np.uint32)
    np.testing.assert_array_equal(words, philox_u32(seed, 32))
    floats = np.array(out[32:], dtype=np.uint64).astype(np.uint32).view(np.float32)
    np.testing.assert_array_equal(floats, philox_uniform(seed, 32, -2.5, 7.0))


@pytest.mark.skipif(GXX is None, reason="g++ is not installed")
def test_device_bfloat16_rounding_matches_ml_dtypes(tmp_path):
    from rlx_cuda.kernels.preamble import PREAMBLE
    start = PREAMBLE.index("RLX_D float rlx_bf2f")
    conversions = PREAMBLE[start:PREAMBLE.index("RLX_D unsigned short rlx_f2bf(double")]
    rng = np.random.default_rng(0)
    values = np.concatenate([rng.standard_normal(2000).astype(np.float32) * 10.0 ** rng.integers(-30, 30, 2000),
                             np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.00390625, 1.01171875, 3.4e38,
                                       1e-40, -1e-45], np.float32)]).astype(np.float32)
    bits = values.view(np.uint32)
    main = (conversions + "int main() {\n  unsigned in[] = {" + ",".join(map(str, bits)) + "};\n"
            f"  for (int i = 0; i < {len(bits)}; ++i) printf(\"%u\\n\", (unsigned)rlx_f2bf(__uint_as_float(in[i])));\n"
            "  return 0;\n}\n")
    got = np.array(_host_program(tmp_path, main).split(), dtype=np.uint64).astype(np.uint16)
    want = values.astype(ml_dtypes.bfloat16).view(np.uint16)
    finite = ~np.isnan(values)
    np.testing.assert_array_equal(got[finite], want[finite])
    assert np.isnan(got[~finite].view(ml_dtypes.bfloat16).astype(np.float32)).all()


def test_coalesce_merges_what_every_access_walks_as_one():
    dims, strides = coalesce((4, 1, 8, 16), [(128, 999, 16, 1), (0, 0, 16, 1)])
    assert dims == (4, 128) and strides == [(128, 1), (0, 1)]
    dims, strides = coalesce((4, 8), [(8, 1), (1, 4)])  # a transpose: nothing to merge
    assert dims == (4, 8) and strides == [(8, 1), (1, 4)]
    assert coalesce((1, 1), [(5, 7)]) == ((), [()])


def test_fused_kernel_rounds_every_low_float_op_and_reads_broadcasts():
    loop = (4, 8)
    kernel = FusedKernel(loop, [broadcast_access("bf16", loop, loop), broadcast_access("bf16", (8,), loop)],
                         [FusedOp("add", (0, 1), "bf16"), FusedOp("tanh", (2,), "bf16")],
                         [(3, broadcast_access("bf16", loop, loop))])
    src = kernel.source()[len(PREAMBLE):]
    assert src.count("rlx_round_bf16(") == 2
    assert "in1[(int)c1 * 1]" in src  # the bias row is read with stride 0 along dim 0
    assert "out0[" in src and "rlx_f2bf(v3)" in src


def test_broadcast_access_of_scalars_and_leading_dims():
    assert broadcast_access("f32", (), (3, 4)) == Access("f32", 0, (0, 0))
    assert broadcast_access("f32", (3, 1), (2, 3, 4)).strides == (0, 1, 0)
