"""i64 on wgpu, exactly: every claimed op on values across the whole 64-bit range (carries
between the words, the most negative value, the 2^31 / 2^32 boundaries), compared bit for
bit with the reference interpreter; i64 indices out of every range clamp as the device mode
says; what is not emulated stays rejected at compile time."""
import numpy as np
import pytest

from rlx_core import DType, Graph, Session, Shape, evaluate
from rlx_core.errors import UnsupportedOpError
from rlx_core.reference.movement import clamped_indices

pytest.importorskip("wgpu")

I64_MIN, I64_MAX = np.iinfo(np.int64).min, np.iinfo(np.int64).max
EDGES = np.array([0, 1, -1, 2, -2, I64_MIN, I64_MAX, I64_MIN + 1, I64_MAX - 1, 2**31 - 1, 2**31, -2**31, -2**31 - 1,
                  2**32 - 1, 2**32, 2**32 + 1, -2**32, 0xFFFF, 0x10000, 3 * 2**40 + 12345, -(7 * 2**50) - 99,
                  2**62, -2**62, 2**53 + 1, 2**24 + 1, -(2**24 + 3)], np.int64)


def _values(n: int, seed: int, small: bool = False) -> np.ndarray:
    """``n`` i64 values: the edge cases, then random ones of every magnitude."""
    rng = np.random.default_rng(seed)
    bits = rng.integers(1, 64, n)
    mags = (rng.integers(0, 2**62, n, dtype=np.int64) >> (62 - np.minimum(bits, 62))).astype(np.int64)
    rand = np.where(rng.random(n) < 0.5, -mags, mags)
    out = np.concatenate([EDGES, rand])[:n]
    return (out % 1000) - 500 if small else out


def _check(build, inputs: dict, device: str = "gpu"):
    g = Graph("i64")
    vals = {name: g.input(name, Shape(v.shape, DType.of(v.dtype))) for name, v in inputs.items()}
    out = build(g, **vals)
    g.set_outputs(list(out) if isinstance(out, (list, tuple)) else [out])
    want = evaluate(g, inputs)
    got = Session(device).compile(g).run(inputs)
    for w, o in zip(want, got):
        assert o.dtype == w.dtype
        np.testing.assert_array_equal(o, w)
    return got


@pytest.mark.parametrize("kind", ["add", "sub", "mul", "max", "min", "eq", "ne", "lt", "le", "gt", "ge"])
def test_binary_across_the_range(kind):
    a, b = _values(300, 1), _values(300, 2)
    b[:len(EDGES)] = EDGES[::-1]
    _check(lambda g, a, b: getattr(g, kind)(a, b), {"a": a, "b": np.concatenate([b[:150], a[150:]])})


@pytest.mark.parametrize("kind,fmod", [("div", False), ("mod", False), ("mod", True)])
def test_division_across_the_range(kind, fmod):
    a, b = _values(300, 3), _values(300, 4)
    b[b == 0] = 7
    b[::5] = _values(60, 5, small=True)  # small divisors: long quotients
    b[b == 0] = -3
    a[-1], b[-1] = I64_MIN, -1  # the one overflowing quotient wraps
    with np.errstate(over="ignore"):
        build = (lambda g, a, b: g.mod(a, b, fmod=fmod)) if kind == "mod" else (lambda g, a, b: g.div(a, b))
        _check(build, {"a": a, "b": b})


@pytest.mark.parametrize("kind", ["neg", "abs", "sign", "relu"])
def test_unary_across_the_range(kind):
    _check(lambda g, x: getattr(g, kind)(x), {"x": _values(200, 6)})


@pytest.mark.parametrize("to", ["f32", "f16", "i32", "u32", "bool", "c64"])
def test_casts_from_i64(to):
    x = _values(400, 7)
    x[-40:] = (2**24 + np.arange(40)) * np.where(np.arange(40) % 2, 1, -1)  # ties of f32 rounding
    x[-80:-40] = ((2**40 + np.arange(40) * 2**15 + 2**16) * np.where(np.arange(40) % 3, 1, -1))
    if to == "f16":
        x = (x % 140000) - 70000  # both sides of f16's largest finite value
    _check(lambda g, x: g.cast(x, to), {"x": x})


@pytest.mark.parametrize("src", ["f32", "f16", "i32", "u32", "bool"])
def test_casts_to_i64(src):
    rng = np.random.default_rng(8)
    if src in ("f32", "f16"):
        top = 9e18 if src == "f32" else 6e4
        x = (rng.uniform(-1, 1, 300) * np.exp(rng.uniform(0, np.log(top), 300))).astype(src.replace("f", "float"))
        x[:6] = [0.0, -0.0, 0.5, -0.5, 1.5, -2.75]
    elif src == "bool":
        x = rng.random(20) < 0.5
    else:
        info = np.iinfo(np.int32 if src == "i32" else np.uint32)
        x = rng.integers(info.min, info.max, 300, endpoint=True).astype(info.dtype)
        x[:2] = [info.min, info.max]
    _check(lambda g, x: g.cast(x, "i64"), {"x": x})


def test_fused_chain_with_constants_and_where():
    x, y = _values(256, 9), _values(256, 10)
    _check(lambda g, x, y: g.where(g.gt(x, y), x * 3 - y, g.max(x, y) + (2**40 + 7)), {"x": x, "y": y})


@pytest.mark.parametrize("kind", ["sum", "prod", "reduce_max", "reduce_min"])
def test_reductions(kind):
    x = _values(3 * 300, 11).reshape(3, 300)
    if kind == "prod":
        x = (x % 19) - 9
    _check(lambda g, x: getattr(g, kind)(x, axes=[1]), {"x": x})
    _check(lambda g, x: getattr(g, kind)(x, axes=[0]), {"x": x})


def test_argmax_argmin_topk_cumsum():
    x = _values(4 * 70, 12).reshape(4, 70)
    x[1, 10] = x[1, 50] = I64_MAX  # ties: the lower index
    _check(lambda g, x: [g.argmax(x, axis=1), g.argmin(x, axis=0), *g.topk(x, 5, axis=1)], {"x": x})
    _check(lambda g, x: [g.cumsum(x, axis=1), g.cumsum(x, axis=0, exclusive=True, reverse=True)], {"x": x})


def test_i64_indices_clamp_in_device_mode():
    table = np.arange(40, dtype=np.float32).reshape(10, 4)
    idx = np.array([0, 9, -1, -10, 10, -11, 2**31, -2**31 - 5, 2**32 + 3, -2**32 + 2, I64_MAX, I64_MIN, 5], np.int64)
    g = Graph("gather64")
    t, i = g.input("t", Shape((10, 4), "f32")), g.input("i", Shape((13,), "i64"))
    g.set_outputs([g.gather(t, i, axis=0)])
    got = Session("gpu").compile(g).run({"t": table, "i": idx})[0]
    np.testing.assert_array_equal(got, table[clamped_indices(idx, 10)])

    g = Graph("scatter64")
    d, i, u = g.input("d", Shape((10,), "i64")), g.input("i", Shape((13,), "i64")), g.input("u", Shape((13,), "i64"))
    g.set_outputs([g.scatter_add(d, i, u)])
    data, upd = _values(10, 13), _values(13, 14)
    got = Session("gpu").compile(g).run({"d": data, "i": idx, "u": upd})[0]
    want = evaluate(g, {"d": data, "i": clamped_indices(idx, 10), "u": upd})[0]
    np.testing.assert_array_equal(got, want)


def test_what_is_not_emulated_is_rejected_at_compile_time():
    g = Graph("mm64")
    a = g.input("a", Shape((2, 2), "i64"))
    g.set_outputs([g.matmul(a, a)])
    with pytest.raises(UnsupportedOpError, match="matmul on i64"):
        Session("gpu").compile(g)
