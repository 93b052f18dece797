"""Random numbers on MLX's device: Philox bits equal to ``rlx_core.rng``'s (and so to the
cpu backend's), every mode of ``RngOptions``, new seeds without retracing, and
per-iteration folding in loops."""
import mlx.core as mx
import numpy as np
import pytest

from rlx_core import Graph, RngOptions, Session, evaluate, rng as host
from rlx_core.errors import DeviceUnavailableError
from rlx_core.testing import assert_close
from rlx_core.testing import backend_contract as contract
from rlx_mlx.lowering import random as device
from rlx_mlx.platform import availability, requested_device

# Random123's known answers for Philox4x32-10: (counter, key, result).
KAT = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]
SEEDS = [0, 1, 42, 2**32 - 1, 2**32, 0x0123456789ABCDEF, 2**63, 2**64 - 1]


@pytest.mark.parametrize("counter,key,expected", KAT)
@pytest.mark.parametrize("compiled", [False, True])
def test_device_philox_known_answers(counter, key, expected, compiled):
    fn = mx.compile(device.philox4x32_10) if compiled else device.philox4x32_10
    words = [mx.array(np.uint32(w)) for w in counter + key]
    assert [int(w.item()) for w in fn(*words)] == list(expected)


@pytest.mark.parametrize("seed", SEEDS)
def test_device_stream_equals_rlx_core_bit_for_bit(seed):
    for n in (0, 1, 5, 1031):
        fn = mx.compile(lambda s, n=n: device.philox_u32(s, n))
        got = np.asarray(fn(mx.array(np.uint64(seed))))
        np.testing.assert_array_equal(got, host.philox_u32(seed, n))


# f64 draws where MLX's device computes float64 (its CPU), f32 on a GPU
WIDE = "f64" if availability(requested_device()).detail.get("device") == "cpu" else "f32"


def _draws():
    g = Graph("draws")
    g.set_outputs([g.rng_uniform((3, 7), low=-2.5, high=7.0), g.rng_uniform((5,), dtype=WIDE, low=1e-3, high=2.0),
                   g.rng_uniform((4,), dtype="bf16"), g.rng_uniform((6,), seed=9),
                   g.rng_uniform((257,), low=-1e3, high=3e-3), g.rng_normal((2, 9), mean=1.0, scale=3.0),
                   g.rng_normal((5,), dtype="f16")])
    return g


def _check(compiled, graph, options, cpu=None):
    """Outputs equal the reference's under ``options``: uniforms bit for bit (and the cpu
    backend's, when given), normals to a few f32 ulp."""
    nodes = [graph.nodes[r.node] for r in graph.outputs]
    got = compiled.run({})
    others = cpu.run({}) if cpu is not None else [None] * len(got)
    for out, want, other, node in zip(got, evaluate(graph, rng=options), others, nodes):
        exact = node.kind == "rng_uniform" or options.mode != "philox"
        if exact:
            np.testing.assert_array_equal(out, want, err_msg=f"{node.label} under {options}")
            if other is not None:
                np.testing.assert_array_equal(out, other, err_msg=f"{node.label}: mlx vs cpu")
        else:
            assert_close(out, want, "f32" if want.dtype == np.float64 else want.dtype, 1,
                         what=f"{node.label} under {options}")


def test_new_seeds_reuse_the_traced_function():
    g = _draws()
    compiled = Session("mlx").compile(g)
    function = compiled.executable.program.main
    try:
        cpu = Session("cpu").compile(g)
    except DeviceUnavailableError:  # rlx-core without its cpu backend: the reference alone
        cpu = None
    for seed in SEEDS:
        options = RngOptions(seed)
        compiled.set_rng(options)
        if cpu is not None:
            cpu.set_rng(options)
        _check(compiled, g, options, cpu)
        _check(compiled, g, options)  # every run re-seeds: equal options, equal numbers
    assert set(function._traced) == {"philox"}  # traced once, for the one mode in use


@pytest.mark.parametrize("mode", ["ort", "zero"])
def test_other_modes(mode):
    g = _draws()
    compiled = Session("mlx").compile(g)
    for seed in (5, 2**40 + 1):
        options = RngOptions(seed, mode)
        compiled.set_rng(options)
        _check(compiled, g, options)
    assert mode in compiled.executable.program.main._traced  # traced once, on first use


@pytest.mark.parametrize("mode", ["philox", "ort"])
def test_loop_bodies_draw_under_the_folded_seed(mode):
    """rng nodes in loop bodies, and one in a compiled segment of the graph around them."""
    contract.check_loop_draws_match_reference("mlx", mode, draw_outside=True)
