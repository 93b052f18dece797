"""rlx_core.rng: Philox known answers and stream layout, seed folding, the onnxruntime
engine's building blocks, and the rng contract of CompiledGraph (set_rng, re-seeding)."""
import os
import subprocess
import sys

import numpy as np
import pytest

from rlx_core import Graph, RngOptions, Session
from rlx_core.errors import DTypeError, OpAttributeError, RlxError, ShapeError
from rlx_core.rng import (Philox, box_muller, combine_seed, draw, fold_in, minstd_rand0, ort_canonical,
                          philox4x32_10, philox_normal, philox_u32, philox_uniform, u32_to_unit)

# Random123's kat_vectors for philox4x32 with 10 rounds: counter (4 words), key (2 words) -> output.
KAT = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


@pytest.mark.parametrize("ctr,key,expected", KAT)
def test_philox_known_answers(ctr, key, expected):
    assert tuple(int(v) for v in philox4x32_10(*ctr, *key)) == expected


def test_philox_stream_layout():
    # Block i is the counter (i, 0, 0, 0) under key (seed lo, seed hi); words in order.
    seed = 0x0123456789ABCDEF
    stream = philox_u32(seed, 12)
    for block in range(3):
        want = philox4x32_10(block, 0, 0, 0, seed & 0xFFFFFFFF, seed >> 32)
        np.testing.assert_array_equal(stream[4 * block:4 * block + 4], want)


@pytest.mark.parametrize("offset", [0, 1, 3, 4, 5, 11, 2**33 + 2])
@pytest.mark.parametrize("n", [0, 1, 6, 17])
def test_philox_offsets_index_one_stream(offset, n):
    whole = philox_u32(99, offset % 64 + n, offset - offset % 64)
    np.testing.assert_array_equal(philox_u32(99, n, offset), whole[offset % 64:])


def test_philox_class_matches_the_stream():
    rng = Philox(7)
    parts = [rng.u32(3), rng.u32(0), rng.u32(6), np.array([rng.next_u32()], np.uint32)]
    np.testing.assert_array_equal(np.concatenate(parts), philox_u32(7, 10))
    assert rng.offset == 10
    twin = rng.clone()
    np.testing.assert_array_equal(rng.random(5), twin.random(5))
    assert repr(twin) == "Philox(seed=7, offset=15)"
    np.testing.assert_array_equal(Philox(5).random(8), philox_uniform(5, 8))
    np.testing.assert_array_equal(Philox(5).normal(8), philox_normal(5, 8))
    assert isinstance(Philox(5).random(), float) and isinstance(Philox(5).normal(), float)
    g = Philox(3).gumbel(1000)
    assert np.isfinite(g).all() and abs(g.mean() - 0.5772) < 0.1  # Euler-Mascheroni


def test_unit_conversion_and_box_muller_edges():
    u = u32_to_unit(np.array([0, 255, 256, 0xFFFFFFFF], np.uint32))
    np.testing.assert_array_equal(u, np.array([0, 0, 2**-24, 1 - 2**-24], np.float32))
    z = box_muller(np.zeros(2, np.float32), np.array([0.0, 0.5], np.float32))
    assert np.isfinite(z).all() and z[0] > 13 and z[1] < -13  # u1 = 0 is floored, not log(0)
    lo_hi = philox_uniform(1, 10000, -2.0, 3.0)
    assert lo_hi.dtype == np.float32 and lo_hi.min() >= -2 and lo_hi.max() < 3


def test_combine_seed_and_fold_in():
    assert combine_seed(5, 0) == 5
    assert combine_seed(2**64 - 1, 1) == (2**64 - 1 + 0x9E3779B97F4A7C15) % 2**64
    folded = {fold_in(42, i) for i in range(1000)}
    assert len(folded) == 1000 and 42 not in folded
    assert fold_in(fold_in(42, 1), 2) != fold_in(fold_in(42, 2), 1)
    assert fold_in(42, -1) == fold_in(42, 2**64 - 1)
    opts = RngOptions(seed=3, mode="ort").fold_in(9)
    assert opts == RngOptions(seed=fold_in(3, 9), mode="ort")


def test_rng_options_validation():
    assert RngOptions(seed=-1).seed == 2**64 - 1
    with pytest.raises(RlxError, match="rng mode must be one of philox, ort, zero"):
        RngOptions(mode="mt19937")
    with pytest.raises(RlxError, match="integer"):
        RngOptions(seed=True)


def _minstd_loop(seed, n):
    x, out = seed % (2**31 - 1) or 1, []
    for _ in range(n):
        x = x * 16807 % (2**31 - 1)
        out.append(x)
    return out


def test_minstd_rand0():
    # The C++ standard ([rand.predef]): the 10000th draw of a default-seeded minstd_rand0.
    assert minstd_rand0(1, 10000)[-1] == 1043618065
    for seed in (0, 1, 2**31 - 1, 2**31, 2**32 - 1, 123456789):
        assert minstd_rand0(seed, 37).tolist() == _minstd_loop(seed, 37)
    assert minstd_rand0(5, 0).shape == (0,)


def test_ort_canonical_stays_below_one():
    m = 2**31 - 1
    seed = (m - 1) * pow(16807, -1, m) % m  # first draw m - 1: float(m - 2) rounds to 2**31
    assert minstd_rand0(seed, 1)[0] == m - 1
    assert ort_canonical(seed, 1)[0] == np.nextafter(np.float32(1), np.float32(0))
    u = ort_canonical(11, 5000, f64=True)
    assert u.dtype == np.float64 and 0 <= u.min() and u.max() < 1


def test_draw_modes():
    opts = RngOptions(seed=9)
    np.testing.assert_array_equal(draw(opts, "uniform", 5, key=4, a=-1, b=1),
                                  philox_uniform(combine_seed(9, 4), 5, -1, 1))
    np.testing.assert_array_equal(draw(opts, "normal", 5, key=4, seed=2), philox_normal(combine_seed(2, 4), 5))
    assert draw(opts, "normal", 3, key=4, dtype=np.float64).dtype == np.float64
    np.testing.assert_array_equal(draw(RngOptions(mode="zero"), "normal", 3, key=1, a=5), np.zeros(3, np.float32))
    with pytest.raises(RlxError, match="'uniform' or 'normal'"):
        draw(opts, "gamma", 3, key=0)


def _two_rng_graph():
    g = Graph("rng")
    g.set_outputs([g.rng_uniform((64,)), g.rng_normal((3, 5), dtype="f64")])
    return g


def test_set_rng_reseeds_without_recompiling():
    compiled = Session("cpu").compile(_two_rng_graph())
    exe = compiled.executable
    first, again = compiled.run(), compiled.run()
    for a, b in zip(first, again):  # every run re-seeds: no stream advance across runs
        np.testing.assert_array_equal(a, b)
    compiled.set_rng(RngOptions(seed=7))
    reseeded = compiled.run()
    assert compiled.executable is exe and compiled.rng == RngOptions(seed=7)
    assert not np.array_equal(first[0], reseeded[0])
    compiled.set_rng(RngOptions(seed=42))  # back to the default options: back to the first numbers
    np.testing.assert_array_equal(compiled.run()[0], first[0])
    compiled.set_rng(RngOptions(mode="zero"))
    assert not compiled.run()[1].any()
    with pytest.raises(RlxError, match="set_rng takes RngOptions"):
        compiled.set_rng(7)


def test_equal_options_give_equal_outputs_across_compiles():
    a = Session("cpu").compile(_two_rng_graph()).run()
    b = Session("cpu").compile(_two_rng_graph()).run()
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


def test_nodes_of_one_graph_draw_different_streams():
    g = Graph("twins")
    g.set_outputs([g.rng_uniform((16,)), g.rng_uniform((16,)), g.rng_uniform((16,), seed=1),
                   g.rng_uniform((16,), seed=1)])
    a, b, c, d = Session("cpu").compile(g).run()
    assert not np.array_equal(a, b) and not np.array_equal(c, d)  # keys differ even with one seed


def test_default_keys_are_distinct_and_process_independent():
    g = _two_rng_graph()
    keys = [n.attrs["key"] for n in g.nodes]
    assert len(set(keys)) == 2
    code = ("from rlx_core import Graph\ng = Graph('rng')\ng.rng_uniform((64,)); g.rng_normal((3, 5))\n"
            "print([n.attrs['key'] for n in g.nodes])")
    env = dict(os.environ, PYTHONHASHSEED="12345")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))), check=True)
    assert out.stdout.strip() == str(keys)
    assert Graph("other").rng_uniform((2,)).node.attrs["key"] != keys[0]
    assert Graph("rng").rng_uniform((2,), key=5).node.attrs["key"] == 5


def test_rng_build_errors_name_the_problem():
    g = Graph("bad")
    x = g.input("x", (2, 3), "i32")
    with pytest.raises(OpAttributeError, match="needs dims or a template input"):
        g.rng_uniform()
    with pytest.raises(ShapeError, match=r"dims \[3, 2\] disagree with the template input's \[2, 3\]"):
        g.rng_uniform((3, 2), like=x)
    with pytest.raises(DTypeError, match="dtype must be one of .* got i32"):
        g.rng_normal((2,), dtype="i32")
    with pytest.raises(OpAttributeError, match="low <= high"):
        g.rng_uniform((2,), low=1.0, high=0.0)
    with pytest.raises(OpAttributeError, match="scale must be >= 0"):
        g.rng_normal((2,), scale=-1.0)
    with pytest.raises(OpAttributeError, match="mean must be finite"):
        g.rng_normal((2,), mean=float("nan"))
    with pytest.raises(OpAttributeError, match=r"key must be in \[0, 2\*\*64\)"):
        g.rng_uniform((2,), key=-1)
    with pytest.raises(ShapeError, match="negative"):
        g.rng_uniform((2, -1))
    assert g.rng_normal(like=x).dtype.value == "f32"  # an int template gives f32 numbers
    assert g.rng_normal(like=g.input("h", (2,), "f16")).dtype.value == "f16"
