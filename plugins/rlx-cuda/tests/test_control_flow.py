"""Control flow without a GPU: the control kernels compile for sm_90 without ``-rdc``
(nvcc) and copy / count / decide as documented (compiled for the host with g++), the
conditional-graph builder adds nodes in program order (a recording driver), only the
inputs a body reads are copied, and the GPU check's models are what they claim."""
import ctypes
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from rlx_core import DType, Graph
from rlx_core.errors import RlxError
from rlx_core.reference import evaluate

from rlx_cuda.control import _disjoint, _used_inputs
from rlx_cuda.executable import check_backend_options
from rlx_cuda.graphs import CONTROL_SOURCE, IF, WHILE, CopyTable, build
from rlx_cuda.lower import LowerContext, lower_graph
from rlx_cuda.plan import plan_memory

from nvcc_check import NVCC

HERE = Path(__file__).resolve().parent
GXX = shutil.which("g++")


# --- the kernels ------------------------------------------------------------------------------
def _cubin(tmp_path, *flags) -> bytes:
    src = tmp_path / "control.cu"
    src.write_text(CONTROL_SOURCE)
    out = tmp_path / "control.cubin"
    res = subprocess.run([NVCC, "-cubin", "-arch=sm_90", "-std=c++17", *flags, "-o", str(out), str(src)],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return out.read_bytes()


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
def test_control_kernels_compile_whole_program_and_only_the_conditional_variant_sets_handles(tmp_path):
    conditional = _cubin(tmp_path, "-DRLX_CF_CONDITIONAL")   # no -rdc, no cudadevrt: the loader resolves it
    plain = _cubin(tmp_path)
    assert b"cudaGraphSetConditional" in conditional
    assert b"cudaGraphSetConditional" not in plain


@pytest.fixture(scope="module")
def host_kernels(tmp_path_factory):
    """CONTROL_SOURCE (plain variant) built for the host; every thread of every block
    runs in turn (the kernels have no barriers)."""
    if GXX is None:
        pytest.skip("g++ is not installed")
    src = tmp_path_factory.mktemp("cf") / "control.cc"
    src.write_text(r"""
#include <cstdint>
struct rlx_dim3 { unsigned x = 0, y = 0, z = 0; };
static rlx_dim3 threadIdx, blockIdx, blockDim, gridDim;
#define __align__(n) __attribute__((aligned(n)))
#define __global__
#define __device__
""" + CONTROL_SOURCE + r"""
extern "C" void emu_copy(const unsigned long long* table, const long long* counter, long long length, int reverse,
                         unsigned gx, unsigned gy, unsigned bx) {
    gridDim.x = gx; gridDim.y = gy; blockDim.x = bx;
    for (unsigned y = 0; y < gy; ++y) for (unsigned x = 0; x < gx; ++x) for (unsigned t = 0; t < bx; ++t) {
        blockIdx.x = x; blockIdx.y = y; threadIdx.x = t;
        rlx_cf_copy(table, counter, length, reverse);
    }
}
extern "C" void emu_control(long long* counter, long long step, long long limit, const unsigned char* cond,
                            unsigned char* flag) {
    rlx_cf_control(0, 0, 0, counter, step, limit, cond, flag);
}
""")
    lib = src.with_suffix(".so")
    res = subprocess.run([GXX, "-O1", "-shared", "-fPIC", "-o", str(lib), str(src)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return ctypes.CDLL(str(lib))


def _ptr(a: np.ndarray) -> int:
    return a.ctypes.data


def _copy(lib, table: CopyTable, counter=None, length=0, reverse=False, blocks=None):
    lib.emu_copy(ctypes.c_void_p(_ptr(table.table)), ctypes.c_void_p(None if counter is None else _ptr(counter)),
                 ctypes.c_longlong(length), ctypes.c_int(int(reverse)), ctypes.c_uint(blocks or table.blocks),
                 ctypes.c_uint(len(table)), ctypes.c_uint(32))


def test_batched_copies_of_any_alignment(host_kernels):
    rng = np.random.default_rng(0)
    src = rng.integers(0, 255, 4096, np.uint8)
    dst = np.zeros(4096, np.uint8)
    cases = [(0, 0, 256), (256, 512, 100), (1000, 7, 13), (2048, 3000, 64)]   # 16-, 4- and 1-byte paths
    table = CopyTable(np, [(_ptr(dst) + d, _ptr(src) + s, n, 0, 0) for d, s, n in cases])
    _copy(host_kernels, table, blocks=3)
    for d, s, n in cases:
        np.testing.assert_array_equal(dst[d:d + n], src[s:s + n])
    untouched = np.ones(4096, bool)
    for d, _, n in cases:
        untouched[d:d + n] = False
    assert not dst[untouched].any()


def test_counter_indexed_slices_forward_and_reversed(host_kernels):
    xs = np.arange(5 * 6, dtype=np.float32).reshape(5, 6)
    x_t, ys = np.zeros(6, np.float32), np.zeros((5, 6), np.float32)
    into = CopyTable(np, [(_ptr(x_t), _ptr(xs), x_t.nbytes, 0, xs.strides[0])])
    out = CopyTable(np, [(_ptr(ys), _ptr(x_t), x_t.nbytes, ys.strides[0], 0)])
    for reverse in (False, True):
        ys[:] = 0
        for i in range(5):
            counter = np.array([i], np.int64)
            _copy(host_kernels, into, counter, 5, reverse)
            t = 4 - i if reverse else i
            np.testing.assert_array_equal(x_t, xs[t])
            _copy(host_kernels, out, counter, 5, reverse)
        np.testing.assert_array_equal(ys, xs)
    counter = np.array([5], np.int64)   # out of range: nothing is copied
    x_t[:] = -1
    _copy(host_kernels, into, counter, 5, False)
    assert (x_t == -1).all()


def test_copy_table_drops_empty_and_self_copies():
    a = np.zeros(4, np.float32)
    table = CopyTable(np, [(_ptr(a), _ptr(a), 16, 0, 0), (_ptr(a), _ptr(a) + 4, 0, 0, 0), (_ptr(a), _ptr(a), 4, 4, 0)])
    assert len(table) == 1 and table.entries[0][3] == 4
    assert len(CopyTable(np, [])) == 0 and CopyTable(np, []).table is None


def test_one_copy_launch_only_when_no_destination_overlaps_a_source():
    def arr(ptr, nbytes):
        return SimpleNamespace(data=SimpleNamespace(ptr=ptr), nbytes=nbytes)
    a, b, c = arr(0, 32), arr(32, 32), arr(64, 32)
    assert _disjoint([(a, b), (c, arr(128, 8))])
    assert _disjoint([(a, a), (b, c)])                  # a copy onto itself is skipped
    assert not _disjoint([(a, b), (b, c)])              # b is read and written: a carry passed on
    assert not _disjoint([(a, b), (b, a)])              # a swap
    assert not _disjoint([(arr(0, 16), b), (c, arr(8, 16))])  # partial overlap


@pytest.mark.parametrize("start,step,limit,cond,go", [
    (0, 0, -1, None, 1), (0, 0, 0, None, 0), (0, 0, 3, 1, 1), (2, 1, 3, 1, 0), (1, 1, 3, 1, 1), (1, 1, -1, 0, 0),
    (5, 1, -1, 7, 1)])
def test_loop_control_counts_and_decides(host_kernels, start, step, limit, cond, go):
    counter, flag = np.array([start], np.int64), np.array([9], np.uint8)
    c = None if cond is None else np.array([cond], np.uint8)
    host_kernels.emu_control(ctypes.c_void_p(_ptr(counter)), ctypes.c_longlong(step), ctypes.c_longlong(limit),
                             ctypes.c_void_p(None if c is None else _ptr(c)), ctypes.c_void_p(_ptr(flag)))
    assert counter[0] == start + step and flag[0] == go


# --- the builder, with a driver that records ---------------------------------------------------
class RecordingDriver:
    """The ``graphs.Driver`` calls as plain bookkeeping: graphs are lists of
    ``(node, kind, deps)``; work captured into a graph is recorded by ``record``."""

    def __init__(self, fail_on: str | None = None):
        self.graphs: dict[int, list] = {}
        self.destroyed: list[int] = []
        self.capturing = None
        self.fail_on = fail_on
        self._ids = 100

    def _id(self) -> int:
        self._ids += 1
        return self._ids

    def _add(self, graph, kind, deps) -> int:
        node = self._id()
        self.graphs[graph].append((node, kind, tuple(deps)))
        return node

    def context(self):
        return 7

    def graph_create(self):
        g = self._id()
        self.graphs[g] = []
        return g

    def graph_destroy(self, g):
        self.destroyed.append(g)

    def add_empty(self, g, deps):
        return self._add(g, "empty", deps)

    def handle_create(self, g, ctx):
        assert ctx == 7
        return 1000 + self._id()

    def add_conditional(self, g, deps, handle, kind, ctx):
        body = self.graph_create()
        return self._add(g, ("if", "while")[kind] + f":{body}", deps), body

    def begin_capture(self, stream, g, deps):
        assert self.capturing is None, "captures never nest"
        self.capturing = [g, list(deps)]

    def record(self, name):
        g, frontier = self.capturing
        if name == self.fail_on:
            raise RuntimeError(f"{name} failed")
        self.capturing[1] = [self._add(g, name, frontier)]

    def capture_frontier(self, stream):
        return list(self.capturing[1])

    def end_capture(self, stream):
        self.capturing = None

    def instantiate(self, g):
        return ("exec", g)

    def launch(self, exe, stream):
        pass

    def exec_destroy(self, exe):
        pass

    def kinds(self, g) -> list[str]:
        return [kind for _, kind, _ in self.graphs[g]]


class _Stream:
    ptr = 1

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def synchronize(self):
        pass


FAKE_CP = SimpleNamespace(cuda=SimpleNamespace(get_current_stream=_Stream, Stream=lambda non_blocking: _Stream()))


def test_chain_orders_work_and_conditional_nodes():
    drv = RecordingDriver()

    def populate(chain):
        chain.work(lambda: drv.record("init"))
        h = chain.handle()
        chain.work(lambda: drv.record("set"))
        (body,) = chain.branch([(h, WHILE)])
        inner = chain.body(body)
        inner.work(lambda: drv.record("step"))
        inner.work(lambda: drv.record("advance"))
        inner.close()
        t, e = chain.handle(), chain.handle()
        bodies = chain.branch([(t, IF), (e, IF)])
        for b in bodies:
            chain.body(b).close()   # an empty body gets an empty node
        chain.work(lambda: drv.record("after"))

    graph = build(FAKE_CP, populate, drv=drv)
    top = drv.graphs[graph.graph]
    assert [k.split(":")[0] for k in drv.kinds(graph.graph)] == ["init", "set", "while", "if", "if", "after"]
    init, set_, loop, then, other, after = top
    assert init[2] == () and set_[2] == (init[0],) and loop[2] == (set_[0],)
    assert then[2] == other[2] == (loop[0],) and after[2] == (then[0], other[0])
    body = int(loop[1].split(":")[1])
    assert drv.kinds(body) == ["step", "advance"]
    for node in (then, other):
        assert drv.kinds(int(node[1].split(":")[1])) == ["empty"]
    assert graph.exe == ("exec", graph.graph)


def test_a_failed_build_destroys_its_graph():
    drv = RecordingDriver(fail_on="boom")
    with pytest.raises(RuntimeError, match="boom failed"):
        build(FAKE_CP, lambda chain: chain.work(lambda: drv.record("boom")), drv=drv)
    assert drv.capturing is None and drv.destroyed == [next(iter(drv.graphs))]


# --- what a body reads ----------------------------------------------------------------------
def _sub(graph):
    ctx = LowerContext(graph)
    steps = lower_graph(ctx)
    return SimpleNamespace(graph=graph, steps=steps, plan=plan_memory(graph, steps, ctx.views.aliases))


def test_only_inputs_a_body_reads_are_copied():
    g = Graph("cond")
    ins = [g.input(f"in{k}", (), dt) for k, dt in enumerate([DType.I64, DType.BOOL, DType.F32])]
    g.set_outputs([ins[1]])                       # the ONNX Loop cond: returns input 1
    assert _used_inputs(_sub(g)) == [False, True, False]
    g = Graph("body")
    a, b, c = (g.input(n, (4,), "f32") for n in "abc")
    g.set_outputs([a * 2.0, g.reshape(b, (2, 2))])  # c unused, b only through an alias
    assert _used_inputs(_sub(g)) == [True, True, False]


def test_control_flow_backend_option_is_checked():
    check_backend_options({"control_flow": "host"})
    check_backend_options({"control_flow": "auto"})
    with pytest.raises(RlxError, match="control_flow must be one of auto, host"):
        check_backend_options({"control_flow": "device"})


# --- the GPU check's models --------------------------------------------------------------------
def test_gpu_check_models_have_their_control_flow_and_match_onnxruntime():
    sys.path.insert(0, str(HERE))
    from control_flow_gpu_check import _kinds, models
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from rlx_core.frontends.onnx import load_onnx
    seen = set()
    for name, _, model, graph, feeds, kinds in models():
        params = {}
        if model is not None:
            imported = load_onnx(model)
            graph, params = imported.graph, imported.params
        assert kinds <= _kinds(graph), name
        seen |= kinds
        expected = evaluate(graph, feeds, params)
        if model is not None:
            got = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
            for g, e in zip(got, expected):
                np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5, err_msg=name)
    assert seen == {"if", "while", "scan"}
