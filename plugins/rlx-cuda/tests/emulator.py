"""Run lowered CUDA steps on the host: the generated CUDA C, compiled with g++ against an
emulation of CUDA's execution model, on an arena laid out by the real memory plan.

What is emulated: blocks run one after another; the threads of a block are fibers
(``ucontext``) scheduled cooperatively in a shuffled order that changes every round,
so a missing ``__syncthreads`` shows up as wrong numbers instead of passing by luck.
``__syncthreads`` / ``__syncwarp`` are barriers (a barrier reached by only part of a
block or warp is reported as a deadlock); ``__shared__`` arrays are ``static``, i.e.
one per block since blocks run in turn. The warp-collective primitives of
``rlx_cuda.kernels.attention`` (``mma.sync`` m16n8k16, ``ldmatrix .x4.trans``) are
replaced by host versions that exchange the lanes' registers and compute exactly the
fragment layouts the PTX ISA documents, checking ``ldmatrix``'s 16-byte row alignment.
cuBLAS GEMMs (:class:`~rlx_cuda.steps.Gemm`) of real types are computed by a plain
loop nest in double precision; complex GEMMs and host-driven steps are not supported.

The arena starts filled with 0xFF bytes (NaN in every float format), so a kernel that
reads memory nobody wrote gives NaN rather than a plausible number. The program is
built with UBSan's alignment check: a vector load or store the GPU would fault on
(e.g. a 16-byte access at an address that is not a multiple of 16) aborts the run.
"""
from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
from rlx_core.ir import Graph, Ref
from rlx_core.reference import evaluate
from rlx_core.rng import RngOptions, combine_seed

from rlx_cuda.dtypes import storage_np
from rlx_cuda.kernels.attention import MMA_PRIMITIVES
from rlx_cuda.kernels.preamble import KERNEL_NAME, PREAMBLE
from rlx_cuda.lower import LowerContext, RngSeed, lower_graph
from rlx_cuda.plan import plan_memory
from rlx_cuda.steps import Buf, Copy, Gemm, Host, Launch, Memset

GXX = shutil.which("g++")
_CACHE = Path(tempfile.gettempdir()) / "rlx-cuda-emulator"

# The preamble's three inline-PTX half-precision conversions, as host code (_Float16
# converts with round-to-nearest-even, as cvt.rn does).
_HOST_F16 = {
    'RLX_D float rlx_h2f(unsigned short h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }':
        "RLX_D float rlx_h2f(unsigned short h) { _Float16 f; memcpy(&f, &h, 2); return (float)f; }",
    'RLX_D unsigned short rlx_f2h(float f) { unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); '
    'return h; }':
        "RLX_D unsigned short rlx_f2h(float f) { _Float16 v = (_Float16)f; unsigned short h; memcpy(&h, &v, 2); "
        "return h; }",
    'RLX_D unsigned short rlx_f2h(double d) { unsigned short h; asm("cvt.rn.f16.f64 %0, %1;" : "=h"(h) : "d"(d)); '
    'return h; }':
        "RLX_D unsigned short rlx_f2h(double d) { _Float16 v = (_Float16)d; unsigned short h; memcpy(&h, &v, 2); "
        "return h; }",
}

EMULATION = r"""
#include <ucontext.h>
#include <math.h>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <algorithm>
#include <functional>
using std::isnan; using std::isinf;
static inline int min(int a, int b) { return a < b ? a : b; }  // CUDA's integer min / max
static inline int max(int a, int b) { return a > b ? a : b; }

struct rlx_dim3 { unsigned x = 0, y = 1, z = 1; };
static rlx_dim3 threadIdx, blockIdx, blockDim, gridDim;
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)

static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
static inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
static inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
static inline int __float_as_int(float f) { int u; memcpy(&u, &f, 4); return u; }
static inline double __longlong_as_double(long long i) { double d; memcpy(&d, &i, 8); return d; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float rlx_emu_expf(float x) { return expf(x); }
#define __expf rlx_emu_expf

namespace emu {
enum Wait { RUNNING = 0, BLOCK_BARRIER = 1, WARP_BARRIER = 2, DONE = 3 };
struct Fiber { ucontext_t ctx; std::vector<char> stack; int state = DONE; };
static std::vector<Fiber> fibers;
static ucontext_t scheduler;
static int current = 0;
static std::function<void()> body;
static unsigned char lanes[1024 / 32][32][64];   // per-warp register exchange
static unsigned long long rng_state = 0x9E3779B97F4A7C15ull;

static void trampoline() {
  body();
  fibers[current].state = DONE;
  swapcontext(&fibers[current].ctx, &scheduler);
}
static void wait(int kind) {
  fibers[current].state = kind;
  swapcontext(&fibers[current].ctx, &scheduler);
}
static unsigned next_random() {
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return (unsigned)(rng_state >> 33);
}
static void fail(const char* what) {
  fprintf(stderr, "emulator: %s (block %u, thread %u)\n", what, blockIdx.x, threadIdx.x);
  exit(3);
}

// Run one block of `n` threads to completion.
static void run_block(unsigned n) {
  if (fibers.size() < n) fibers.resize(n);
  for (unsigned t = 0; t < n; ++t) {
    Fiber& f = fibers[t];
    if (f.stack.empty()) f.stack.resize(256 * 1024);
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = f.stack.data();
    f.ctx.uc_stack.ss_size = f.stack.size();
    f.ctx.uc_link = nullptr;
    makecontext(&f.ctx, trampoline, 0);
    f.state = RUNNING;
  }
  std::vector<unsigned> order(n);
  for (unsigned t = 0; t < n; ++t) order[t] = t;
  for (;;) {
    for (unsigned t = n; t > 1; --t) std::swap(order[t - 1], order[next_random() % t]);
    for (unsigned t : order) {
      if (fibers[t].state != RUNNING) continue;
      current = (int)t;
      threadIdx.x = t;
      swapcontext(&scheduler, &fibers[t].ctx);
    }
    bool live = false, all_at_block = true, released = false;
    for (unsigned t = 0; t < n; ++t) {
      if (fibers[t].state == DONE) continue;
      live = true;
      all_at_block &= fibers[t].state == BLOCK_BARRIER;
    }
    if (!live) return;
    if (all_at_block) {
      for (unsigned t = 0; t < n; ++t) if (fibers[t].state == BLOCK_BARRIER) fibers[t].state = RUNNING;
      continue;
    }
    for (unsigned w = 0; w * 32 < n; ++w) {
      bool any = false, all = true;
      for (unsigned t = w * 32; t < std::min(n, w * 32 + 32); ++t) {
        if (fibers[t].state == DONE) continue;
        any = true;
        all &= fibers[t].state == WARP_BARRIER;
      }
      if (any && all) {
        for (unsigned t = w * 32; t < std::min(n, w * 32 + 32); ++t)
          if (fibers[t].state == WARP_BARRIER) fibers[t].state = RUNNING;
        released = true;
      }
    }
    if (!released) fail("deadlock: a barrier or warp-collective reached by only part of the block/warp");
  }
}

template <class F> void launch(unsigned grid, unsigned block, F&& kernel) {
  gridDim.x = grid;
  blockDim.x = block;
  body = kernel;
  for (unsigned b = 0; b < grid; ++b) {
    blockIdx.x = b;
    run_block(block);
  }
}

// A pointer argument that converts to whatever pointer type the kernel takes.
struct Ptr {
  unsigned char* p;
  template <class T> operator T*() const { return (T*)p; }
};
}  // namespace emu

static inline void __syncthreads() { emu::wait(emu::BLOCK_BARRIER); }
static inline void __syncwarp(unsigned = 0xffffffffu) { emu::wait(emu::WARP_BARRIER); }
template <class T> static T rlx_emu_exchange(T v, int src_lane) {
  static_assert(sizeof(T) <= 64, "lane exchange slot");
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  memcpy(emu::lanes[warp][lane], &v, sizeof(T));
  __syncwarp();
  T r;
  memcpy(&r, emu::lanes[warp][src_lane], sizeof(T));
  __syncwarp();
  return r;
}
template <class T> static T __shfl_xor_sync(unsigned, T v, int mask, int = 32) {
  return rlx_emu_exchange(v, (int)(threadIdx.x % 32) ^ mask);
}
template <class T> static T __shfl_sync(unsigned, T v, int src, int = 32) { return rlx_emu_exchange(v, src); }
"""

# Host versions of MMA_PRIMITIVES: every lane publishes its registers, then computes its
# own outputs from the documented fragment layouts (PTX ISA, "Matrix fragments for
# mma.m16n8k16" and "ldmatrix"). cvt.rn.{bf16,f16}x2.f32 d, a, b puts a in the upper
# half (as cuda_bf16.hpp's __floats2bfloat162_rn relies on).
HOST_MMA_PRIMITIVES = r"""
struct rlx_emu_mma_regs { unsigned a[4]; unsigned b[2]; float c[4]; };
template <class Lo> static void rlx_emu_mma(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2], Lo load) {
  rlx_emu_mma_regs mine;
  memcpy(mine.a, a, sizeof(mine.a)); memcpy(mine.b, b, sizeof(mine.b)); memcpy(mine.c, d, sizeof(mine.c));
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  memcpy(emu::lanes[warp][lane], &mine, sizeof(mine));
  __syncwarp();
  rlx_emu_mma_regs all[32];
  for (int l = 0; l < 32; ++l) memcpy(&all[l], emu::lanes[warp][l], sizeof(rlx_emu_mma_regs));
  __syncwarp();
  auto half = [](unsigned reg, int k) { return (unsigned short)(k & 1 ? reg >> 16 : reg & 0xffffu); };
  auto A = [&](int row, int k) {  // a0..a7: rows g / g+8, cols 2t+{0,1} / +8
    const int lane_of = (row % 8) * 4 + (k % 8) / 2, reg = (row >= 8) + 2 * (k >= 8);
    return load(half(all[lane_of].a[reg], k));
  };
  auto B = [&](int k, int col) {  // b0..b3: rows (k) 2t+{0,1} / +8, col g
    const int lane_of = col * 4 + (k % 8) / 2, reg = k >= 8;
    return load(half(all[lane_of].b[reg], k));
  };
  const int g = lane / 4, t = lane % 4;
  for (int e = 0; e < 4; ++e) {  // c0..c3: rows g / g+8, cols 2t+{0,1}
    const int row = g + 8 * (e >= 2), col = 2 * t + (e & 1);
    float acc = mine.c[e];
    for (int k = 0; k < 16; ++k) acc += A(row, k) * B(k, col);
    d[e] = acc;
  }
}
RLX_D void rlx_mma_bf16(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  rlx_emu_mma(d, a, b, [](unsigned short v) { return rlx_bf2f(v); });
}
RLX_D void rlx_mma_f16(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  rlx_emu_mma(d, a, b, [](unsigned short v) { return rlx_h2f(v); });
}
RLX_D unsigned rlx_pack_bf16(float lo, float hi) { return rlx_f2bf(lo) | ((unsigned)rlx_f2bf(hi) << 16); }
RLX_D unsigned rlx_pack_f16(float lo, float hi) { return rlx_f2h(lo) | ((unsigned)rlx_f2h(hi) << 16); }
RLX_D void rlx_ldmatrix_x4_trans(unsigned (&r)[4], const unsigned short* row) {
  if ((uintptr_t)row % 16) emu::fail("ldmatrix row address not 16-byte aligned");
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  memcpy(emu::lanes[warp][lane], &row, sizeof(row));
  __syncwarp();
  const unsigned short* rows[32];
  for (int l = 0; l < 32; ++l) memcpy(&rows[l], emu::lanes[warp][l], sizeof(rows[l]));
  __syncwarp();
  // Lane 8m + i addresses row i of matrix m; with .trans, lane 4r + w receives the
  // elements (2w, r) and (2w + 1, r) of each matrix, the first in the low half.
  const int rr = lane / 4, w = lane % 4;
  for (int m = 0; m < 4; ++m)
    r[m] = (unsigned)rows[8 * m + 2 * w][rr] | ((unsigned)rows[8 * m + 2 * w + 1][rr] << 16);
}
"""

_HOST_GEMM = r"""
static double rlx_emu_load(const unsigned char* p, int type, long long i) {
  switch (type) {
    case 0: return ((const float*)p)[i];
    case 1: return ((const double*)p)[i];
    case 2: return rlx_h2f(((const unsigned short*)p)[i]);
    case 14: return rlx_bf2f(((const unsigned short*)p)[i]);
  }
  emu::fail("gemm data type"); return 0;
}
static void rlx_emu_store(unsigned char* p, int type, long long i, double v) {
  switch (type) {
    case 0: ((float*)p)[i] = (float)v; return;
    case 1: ((double*)p)[i] = v; return;
    case 2: ((unsigned short*)p)[i] = rlx_f2h((float)v); return;
    case 14: ((unsigned short*)p)[i] = rlx_f2bf((float)v); return;
  }
  emu::fail("gemm data type");
}
// cublasGemmStridedBatchedEx with alpha = 1, beta = 0 (column-major).
static void rlx_emu_gemm(int ta, int tb, int m, int n, int k, const unsigned char* a, int atype, int lda, long long sa,
                         const unsigned char* b, int btype, int ldb, long long sb, unsigned char* c, int ctype, int ldc,
                         long long sc, int batch) {
  const int ia = atype == 1 ? 8 : atype == 0 ? 4 : 2, ib = btype == 1 ? 8 : btype == 0 ? 4 : 2;
  const int ic = ctype == 1 ? 8 : ctype == 0 ? 4 : 2;
  for (int q = 0; q < batch; ++q)
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) {
        double acc = 0;
        for (int l = 0; l < k; ++l)
          acc += rlx_emu_load(a + q * sa * ia, atype, ta ? l + (long long)i * lda : i + (long long)l * lda) *
                 rlx_emu_load(b + q * sb * ib, btype, tb ? j + (long long)l * ldb : l + (long long)j * ldb);
        rlx_emu_store(c + q * sc * ic, ctype, i + (long long)j * ldc, acc);
      }
}
"""


def host_source(source: str) -> str:
    """A generated kernel source made compilable for the host (the PTX parts swapped)."""
    assert source.startswith(PREAMBLE), "every generated kernel starts with the preamble"
    body = source[len(PREAMBLE):]
    if MMA_PRIMITIVES in body:
        body = body.replace(MMA_PRIMITIVES, "")
    return body


def _host_preamble() -> str:
    text = PREAMBLE
    for device, host in _HOST_F16.items():
        assert device in text, f"preamble changed; update the emulator: {device[:40]}..."
        text = text.replace(device, host)
    return text


class Emulated:
    """A lowered graph bound to a host arena (as ``CudaExecutable`` binds it to a device one)."""

    def __init__(self, graph: Graph, **ctx):
        self.graph = graph
        self.ctx = LowerContext(graph, **ctx)
        self.steps = lower_graph(self.ctx)
        self.plan = plan_memory(graph, self.steps, self.ctx.views.aliases)
        unsupported = [s.label for s in self.steps for a in s.actions if isinstance(a, Host)]
        if unsupported:
            raise NotImplementedError(f"the emulator runs no host-driven steps: {unsupported}")
        self._persistent = {r: i for i, r in enumerate(self.plan.persistent)}

    def kinds(self) -> list[str]:
        return [s.label for s in self.steps]

    # --- addresses, as C expressions over `arena` and the persistent buffers `pers[i]`
    def _value_address(self, ref: Ref) -> str:
        ref = self.plan.root(ref)
        if ref in self._persistent:
            return f"pers[{self._persistent[ref]}]"
        return f"(arena + {self.plan.placements[ref].offset}ull)"

    def _address(self, step: int, buf: Buf) -> str:
        base = f"(arena + {self.plan.scratch[step].offset}ull)" if buf.ref is None else self._value_address(buf.ref)
        return f"({base} + {buf.offset}ll)"

    def _program(self, seeds: dict) -> tuple[str, list[str]]:
        kernels: dict[str, int] = {}
        calls = []
        for i, step in enumerate(self.steps):
            for act in step.actions:
                if isinstance(act, Launch):
                    k = kernels.setdefault(act.source, len(kernels))
                    args = []
                    for a in act.args:
                        if isinstance(a, Buf):
                            args.append(f"emu::Ptr{{{self._address(i, a)}}}")
                        elif isinstance(a, RngSeed):
                            args.append(f"(unsigned long long){seeds[a.node.id]}ull")
                        else:
                            args.append(f"({'unsigned long long' if a.dtype.kind == 'u' else 'long long'}){int(a)}")
                    calls.append(f"  emu::launch({act.grid}u, {act.block}u, [&] {{ k{k}::{KERNEL_NAME}_{k}("
                                 + ", ".join(args) + "); });")
                elif isinstance(act, Gemm):
                    a, b, c = (self._address(i, x) for x in (act.a, act.b, act.c))
                    ta, tb, tc = act.data_types
                    calls.append(f"  rlx_emu_gemm({act.transa}, {act.transb}, {act.m}, {act.n}, {act.k}, {a}, {ta}, "
                                 f"{act.lda}, {act.stride_a}ll, {b}, {tb}, {act.ldb}, {act.stride_b}ll, {c}, {tc}, "
                                 f"{act.ldc}, {act.stride_c}ll, {act.batch});")
                elif isinstance(act, Memset):
                    calls.append(f"  memset({self._address(i, act.dst)}, {act.value}, {act.nbytes});")
                elif isinstance(act, Copy):
                    calls.append(f"  memcpy({self._address(i, act.dst)}, {self._address(i, act.src)}, {act.nbytes});")
        parts = [EMULATION, _host_preamble(), HOST_MMA_PRIMITIVES, _HOST_GEMM]
        for src, k in kernels.items():
            parts.append(f"namespace k{k} {{\n{host_source(src).replace(KERNEL_NAME, f'{KERNEL_NAME}_{k}')}\n}}\n"
                         "#undef RLX_ACC\n")
        return "".join(parts), calls

    def run(self, inputs: dict, params: dict | None = None, seed: int = RngOptions().seed) -> list[np.ndarray]:
        g = self.graph
        params = params or {}
        seeds = {n.id: combine_seed(n.attrs["seed"] if n.attrs.get("seed") is not None else seed, n.attrs["key"])
                 for n in g.nodes if n.kind in ("rng_uniform", "rng_normal")}
        source, calls = self._program(seeds)
        feeds = []  # (C address, bytes)
        for n in g.nodes:
            ref = Ref(n.id)
            if n.kind == "input":
                value = inputs[n.attrs["name"]]
            elif n.kind == "param":
                value = params[n.attrs["name"]]
            elif ref in self._persistent:
                value = evaluate(_single_node_graph(n), {}, {})[0]
            else:
                continue
            shape = g.shape_of(ref)
            data = np.ascontiguousarray(np.asarray(value, dtype=shape.dtype.np)).view(storage_np(shape.dtype))
            feeds.append((self._value_address(ref), data.tobytes()))
        outs = [(self._value_address(r), g.shape_of(r)) for r in g.outputs]
        main = ["int main(int argc, char** argv) {",
                "  (void)argc; FILE* in = fopen(argv[1], \"rb\"); FILE* out = fopen(argv[2], \"wb\");",
                f"  std::vector<unsigned char> arena_bytes({max(self.plan.size, 1)}ull + 256, 0xFF);",
                "  unsigned char* arena = arena_bytes.data() + (256 - (uintptr_t)arena_bytes.data() % 256) % 256;",
                f"  std::vector<std::vector<unsigned char>> pers_bytes({len(self.plan.persistent)});",
                f"  unsigned char* pers[{max(len(self.plan.persistent), 1)}] = {{}};"]
        for i, r in enumerate(self.plan.persistent):
            main += [f"  pers_bytes[{i}].resize({max(g.shape_of(r).nbytes, 1)} + 256);",
                     f"  pers[{i}] = pers_bytes[{i}].data() + (256 - (uintptr_t)pers_bytes[{i}].data() % 256) % 256;"]
        for addr, data in feeds:
            main.append(f"  if (fread({addr}, 1, {len(data)}, in) != {len(data)}) return 2;")
        main += calls
        for addr, shape in outs:
            main.append(f"  fwrite({addr}, 1, {shape.nbytes}, out);")
        main += ["  fclose(out); return 0;", "}"]
        exe = _compile(source + "\n".join(main) + "\n")
        with tempfile.TemporaryDirectory() as tmp:
            fin, fout = Path(tmp) / "in.bin", Path(tmp) / "out.bin"
            fin.write_bytes(b"".join(d for _, d in feeds))
            res = subprocess.run([str(exe), str(fin), str(fout)], capture_output=True, text=True, timeout=600)
            if res.returncode:
                raise RuntimeError(f"emulated run failed ({res.returncode}): {res.stderr[-3000:]}")
            raw = fout.read_bytes()
        results, pos = [], 0
        for _, shape in outs:
            arr = np.frombuffer(raw[pos:pos + shape.nbytes], storage_np(shape.dtype)).view(shape.dtype.np)
            results.append(arr.reshape(shape.dims).copy())
            pos += shape.nbytes
        return results


def _single_node_graph(node) -> Graph:
    g = Graph("constant")
    g.set_outputs([g.add_node(node.kind, (), dict(node.attrs))])
    return g


def _compile(source: str) -> Path:
    """The host executable of ``source`` (cached by content across test runs)."""
    _CACHE.mkdir(exist_ok=True)
    key = hashlib.sha256(source.encode()).hexdigest()[:24]
    exe = _CACHE / key
    if not exe.exists():
        src = _CACHE / f"{key}.cpp"
        src.write_text(source)
        res = subprocess.run([GXX, "-std=c++20", "-O1", "-w", "-fsanitize=alignment", "-fno-sanitize-recover=all",
                              "-o", str(exe) + ".tmp", str(src)], capture_output=True, text=True)
        if res.returncode:
            raise RuntimeError(f"g++ failed on {src}:\n{res.stderr[-6000:]}")
        Path(str(exe) + ".tmp").rename(exe)
    return exe
