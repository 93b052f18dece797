"""Random numbers on the device: Philox bits equal to ``rlx_core.rng``'s, every mode of
``RngOptions``, new seeds without recompiling, and per-iteration folding in loops."""
import jax
import numpy as np
import pytest

from rlx_core import Graph, RngOptions, Session, evaluate, rng as host
from rlx_core.testing import assert_close
from rlx_core.testing import backend_contract as contract
from rlx_tpu.lowering import random as device
from rlx_tpu.platform import x64

# Random123's known answers for Philox4x32-10: (counter, key, result).
KAT = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]
SEEDS = [0, 1, 42, 2**32 - 1, 2**32, 0x0123456789ABCDEF, 2**64 - 1]


def _on_device(fn, *args):
    with x64():
        return jax.tree.map(np.asarray, jax.jit(fn)(*args))


@pytest.mark.parametrize("counter,key,expected", KAT)
def test_device_philox_known_answers(counter, key, expected):
    words = [np.uint32(w) for w in counter + key]
    assert [int(w) for w in _on_device(device.philox4x32_10, *words)] == list(expected)


@pytest.mark.parametrize("seed", SEEDS)
def test_device_stream_equals_rlx_core_bit_for_bit(seed):
    for n in (0, 1, 5, 1031):
        got = _on_device(lambda s, n=n: device.philox_u32(s, n), np.uint64(seed))
        np.testing.assert_array_equal(got, host.philox_u32(seed, n))


@pytest.mark.parametrize("seed", SEEDS)
def test_device_fold_in_equals_rlx_core(seed):
    for data in (0, 1, 7, 2**32 + 3, 2**64 - 1):
        assert int(_on_device(device.fold_in, np.uint64(seed), np.uint64(data))) == host.fold_in(seed, data)


def _draws():
    g = Graph("draws")
    g.set_outputs([g.rng_uniform((3, 7), low=-2.5, high=7.0), g.rng_uniform((5,), dtype="f64", low=1e-3, high=2.0),
                   g.rng_uniform((4,), dtype="bf16"), g.rng_uniform((6,), seed=9),
                   g.rng_normal((2, 9), mean=1.0, scale=3.0), g.rng_normal((5,), dtype="f16")])
    return g


def _check(compiled, graph, options):
    """Outputs equal the reference's under ``options``: uniforms exactly, normals to a few f32 ulp."""
    nodes = [graph.nodes[r.node] for r in graph.outputs]
    for out, want, node in zip(compiled.run({}), evaluate(graph, rng=options), nodes):
        exact = node.kind == "rng_uniform" or options.mode != "philox"
        assert_close(out, want, "f32" if want.dtype == np.float64 and not exact else want.dtype, 0 if exact else 1,
                     what=f"{node.label} under {options}")


def test_new_seeds_reuse_the_compiled_program():
    g = _draws()
    compiled = Session("tpu").compile(g)
    modes = compiled.executable.program.compiled_modes
    for seed in SEEDS:
        options = RngOptions(seed)
        compiled.set_rng(options)
        _check(compiled, g, options)
        _check(compiled, g, options)  # every run re-seeds: equal options, equal numbers
    assert compiled.executable.program.compiled_modes == modes


@pytest.mark.parametrize("mode", ["ort", "zero"])
def test_other_modes(mode):
    g = _draws()
    compiled = Session("tpu").compile(g)
    for seed in (5, 2**40 + 1):
        options = RngOptions(seed, mode)
        compiled.set_rng(options)
        _check(compiled, g, options)
    assert mode in compiled.executable.program.compiled_modes  # compiled once, on first use


@pytest.mark.parametrize("mode", ["philox", "ort"])
def test_loop_bodies_draw_under_the_folded_seed(mode):
    contract.check_loop_draws_match_reference("tpu", mode)
