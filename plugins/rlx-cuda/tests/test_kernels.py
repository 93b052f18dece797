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
    assert "(in1 + (int)c1 * 1)" in src  # the bias row is read with stride 0 along dim 0
    assert "*(rlx_pack_unsigned_short_8*)(out0 + " in src and "rlx_f2bf(v3[e])" in src


def test_fused_kernels_vectorize_contiguous_innermost_dims_only_when_aligned():
    loop = (4, 8)

    def width(*accesses):
        kernel = FusedKernel(loop, list(accesses), [FusedOp("neg", (0,), "bf16")],
                             [(len(accesses), broadcast_access("bf16", loop, loop))])
        return kernel, kernel._loop()[2]
    kernel, w = width(broadcast_access("bf16", loop, loop))
    assert w == 8 and kernel.threads == 4 and "struct __align__(16) rlx_pack_unsigned_short_8" in kernel.source()
    kernel, w = width(broadcast_access("f32", loop, loop))  # 8 floats would be 32 bytes
    assert w == 4 and kernel.threads == 8
    kernel, w = width(broadcast_access("bf16", (4, 1), loop))  # one value per row: a scalar read, vector write
    assert w == 8 and "const float v0 = rlx_bf2f(in0[" in kernel.source()
    assert width(Access("bf16", 0, (1, 4)))[1] == 1  # transposed: strided innermost
    assert width(Access("bf16", 2, (8, 1)))[1] == 2  # a view starting at element 2
    assert width(Access("bf16", 0, (6, 1)))[1] == 2  # rows 6 elements apart


def test_broadcast_access_of_scalars_and_leading_dims():
    assert broadcast_access("f32", (), (3, 4)) == Access("f32", 0, (0, 0))
    assert broadcast_access("f32", (3, 1), (2, 3, 4)).strides == (0, 1, 0)


_EMULATED_KINDS = ("add", "cast", "where", "quantize", "gelu", "transpose", "slice", "split", "expand", "frame",
                   "concat", "reshape", "pad", "layer_norm", "rms_norm", "softmax", "reduce_sum", "argmax", "conv")


def _emulated_cases():
    from rlx_core.ir import DType
    picked = {}
    for case in all_cases():  # per kind: its first bf16 case and its first other one
        if case.kind in _EMULATED_KINDS:
            picked.setdefault((case.kind, case.dtype is DType.BF16), case)
    return list(picked.values())


@pytest.mark.skipif(GXX is None, reason="g++ is not installed")
@pytest.mark.parametrize("case", _emulated_cases(), ids=lambda c: c.id)
def test_generated_kernels_match_the_reference_under_emulation(case):
    """The kernels of a sample of conformance cases (vectorized elementwise, view copies,
    concat, rows, conv) run in the host emulator on the planned arena, both data sets."""
    from emulator import Emulated
    from rlx_core.reference import evaluate
    from rlx_core.testing.cases import make_data
    from rlx_core.testing.compare import assert_close
    g = build_case(case)
    emulated = Emulated(g)
    for variant in (0, 1):
        inputs, params = make_data(case, variant)
        for i, (got, want) in enumerate(zip(emulated.run(inputs, params), evaluate(g, inputs, params))):
            assert_close(got, want, g.output_shapes[i].dtype, case.tol, what=f"{case.id} output {i}")
