"""The CPU backend's memory plan and the arena contract."""
import tracemalloc

import numpy as np
import pytest

from rlx_core import CompileOptions, Graph, Session, evaluate, models
from rlx_cpu.load import machine_load
from rlx_cpu.plan import Scratch


def _chain(n=8, size=4096):
    g = Graph("chain")
    x = g.input("x", (size,))
    y = x
    for i in range(n):
        y = g.tanh(y) if i % 2 else y * 1.5
    g.set_outputs([y])
    return g


def _compiled(g, unfused=False):
    return Session("cpu").compile(g, CompileOptions(backend={"fusion": False}) if unfused else None)


def test_values_with_disjoint_lifetimes_share_bytes():
    c = _compiled(_chain(), unfused=True)
    plan = c.executable.plan
    nbytes = 4096 * 4
    # input + 8 intermediates (the scalar constants aside) fit in a few buffers.
    assert len(plan.placements) == 9
    assert plan.size <= 3 * nbytes
    placed = plan.placements
    for a, pa in placed.items():
        for b, pb in placed.items():
            if a != b and not (pa.last < pb.first or pb.last < pa.first):
                assert pa.offset + pa.nbytes <= pb.offset or pb.offset + pb.nbytes <= pa.offset, (a, b)


def test_arena_is_aligned():
    c = _compiled(_chain())
    assert c.executable.arena.ctypes.data % 64 == 0
    for ref, p in c.executable.plan.placements.items():
        assert p.offset % 64 == 0


def test_outputs_are_not_aliased_to_the_arena():
    c = _compiled(_chain(n=2, size=8))
    x = np.ones(8, np.float32)
    first = c.run({"x": x})[0]
    c.run({"x": 2 * x})
    np.testing.assert_allclose(first, np.tanh(1.5 * x), rtol=1e-6)


def test_steady_state_run_with_out_allocates_no_tensor_memory():
    for size in (256, 1 << 16):
        c = _compiled(_chain(size=size))
        x = np.random.default_rng(0).standard_normal(size).astype(np.float32)
        out = [np.empty(size, np.float32)]
        for _ in range(3):
            c.run({"x": x}, out=out)
        tracemalloc.start()
        base, _ = tracemalloc.get_traced_memory()
        c.run({"x": x}, out=out)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert peak - base < 4096, f"run allocated {peak - base} bytes at size {size}"


def _allocated_per_run(compiled, inputs, out, refresh=False):
    """Peak bytes tracemalloc sees during one steady-state ``run(..., out=out)`` (with
    ``refresh``: one in which the machine-load state is re-read)."""
    for _ in range(3):
        compiled.run(inputs, out=out)
    tracemalloc.start()
    peaks = []
    for _ in range(3):
        if refresh:
            machine_load()._next = 0.0
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        compiled.run(inputs, out=out)
        peaks.append(tracemalloc.get_traced_memory()[1] - base)
    tracemalloc.stop()
    return max(peaks)


@pytest.mark.parametrize("refresh", [False, True])
@pytest.mark.parametrize("seq", [16, 128])
def test_encoder_block_steady_state_allocates_under_4_kib(seq, refresh):
    """The arena contract on the benchmark's transformer block, at two sequence lengths:
    what a run allocates does not grow with the tensors (also in a run that re-reads
    the machine's load)."""
    g, params = models.transformer_block(seq=seq, d_model=64, heads=4, ffn=128)
    compiled = _compiled(g)
    compiled.set_params(params)
    inputs = models.example_inputs(g)
    out = [np.empty(s.dims, s.dtype.np) for s in compiled.output_shapes]
    assert _allocated_per_run(compiled, inputs, out, refresh) < 4096
    np.testing.assert_allclose(out[0], evaluate(g, inputs, params)[0], rtol=1e-4, atol=1e-5)


def test_movement_ops_become_views():
    g, _ = models.transformer_block(seq=8, d_model=16, heads=2, ffn=24)
    exe = _compiled(g).executable
    kinds = {g.nodes[r.node].kind for r in exe.plan.views}
    assert {"split", "reshape", "transpose"} <= kinds
    for ref, (source, _) in exe.plan.views.items():
        assert ref not in exe.plan.placements  # a view has no bytes of its own


def test_scratch_lives_only_during_its_step():
    g, _ = models.transformer_block(seq=8, d_model=16, heads=2, ffn=24)
    plan = _compiled(g).executable.plan
    scratch = [(k, p) for k, p in plan.placements.items() if isinstance(k, Scratch)]
    assert scratch and all(p.first == p.last == k.step for k, p in scratch)


def test_out_buffers_are_written_directly():
    g, params = models.mlp(batch=2, sizes=(6, 5, 4))
    compiled = _compiled(g)
    compiled.set_params(params)
    exe = compiled.executable
    inputs = models.example_inputs(g)
    out = [np.full((2, 4), np.nan, np.float32)]
    compiled.run(inputs, out=out)
    _, copies = exe._variant(out)
    assert copies == []  # the last kernel wrote into out[0] itself
    np.testing.assert_allclose(out[0], evaluate(g, inputs, params)[0], rtol=1e-5)
    strided = [np.empty((4, 2), np.float32).T]  # not contiguous: computed in the arena, then copied
    compiled.run(inputs, out=strided)
    assert len(exe._variant(strided)[1]) == 1
    np.testing.assert_allclose(strided[0], out[0])


def test_an_output_that_is_an_input_or_param_is_copied():
    g = Graph("passthrough")
    x = g.input("x", (3,))
    w = g.param("w", (3,))
    g.set_outputs([x, w, x * w])
    compiled = _compiled(g)
    compiled.set_param("w", np.arange(3, dtype=np.float32))
    x_val = np.ones(3, np.float32)
    out = [np.empty(3, np.float32) for _ in range(3)]
    compiled.run({"x": x_val}, out=out)
    np.testing.assert_array_equal(out[0], x_val)
    np.testing.assert_array_equal(out[1], [0, 1, 2])
    np.testing.assert_array_equal(out[2], [0, 1, 2])


def _transposed_weight_graph(also_read: bool):
    """x @ w.T + b, as an exported Gemm(transB=1) arrives; ``also_read``: w.T is also
    added to something (then it is no matmul-only operand)."""
    g = Graph("gemm_tb")
    x, w = g.input("x", (8, 6)), g.param("w", (5, 6))
    wt = g.transpose(w, (1, 0))
    y = g.matmul(x, wt) + g.param("b", (5,))
    outs = [y, wt + g.input("z", (6, 5))] if also_read else [y]
    g.set_outputs(outs)
    return g


def test_a_transposed_weight_is_packed_row_major_and_refilled_when_its_param_is_set():
    g = _transposed_weight_graph(also_read=False)
    c = _compiled(g)
    exe = c.executable
    (packed,) = exe.plan.packed
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 6)).astype(np.float32)
    for _ in range(2):  # a second set_param must reach the packed copy
        params = {"w": rng.standard_normal((5, 6)).astype(np.float32), "b": rng.standard_normal(5).astype(np.float32)}
        c.set_params(params)
        np.testing.assert_allclose(c.run({"x": x})[0], evaluate(g, {"x": x}, params)[0], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(exe.clone().run({"x": x})[0], evaluate(g, {"x": x}, params)[0], rtol=1e-5,
                                   atol=1e-5)
    assert packed not in exe.plan.views and packed not in exe.plan.placements


def test_a_transposed_weight_read_by_other_steps_too_stays_a_view():
    c = _compiled(_transposed_weight_graph(also_read=True))
    assert not c.executable.plan.packed
