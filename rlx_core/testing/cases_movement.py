"""Conformance cases of the 'movement' family: every kind on every dtype, then (on f32)
each attribute value that changes behaviour, rank 0, empty dims, negative and repeated
indices, and the slice/reshape patterns that ``x[...]`` indexing produces."""
from __future__ import annotations

import numpy as np

from ..ir.dtypes import DType
from .cases import Case, spec

F32 = DType.F32
ALL_DTYPES = sorted(DType, key=lambda d: d.value)
INDEX_DTYPES = (DType.I32, DType.I64)


def indices(n: int, dims, dtype=DType.I32):
    """Spec of valid indices into an axis of size ``n``: in [-n, n), negative ones included."""
    return spec(dims, dtype, "int", low=-n, high=n)


def _every_dtype():
    """One case per kind and dtype: the plain use of each kind."""
    for dt in ALL_DTYPES:
        x = {"x": spec((2, 3, 4), dt)}
        yield Case("reshape[2,3,4]->[4,-1]", "reshape", dt, x, lambda g, x: g.reshape(x, (4, -1)))
        yield Case("transpose[2,3,4]/2,0,1", "transpose", dt, x, lambda g, x: g.transpose(x, (2, 0, 1)))
        yield Case("slice[2,3,4]/steps", "slice", dt, x, lambda g, x: g.slice(x, [1, 0], [3, 4], [1, 2], axes=[1, 2]))
        yield Case("concat/axis1", "concat", dt, {"a": spec((2, 3), dt), "b": spec((2, 1), dt)},
                   lambda g, a, b: g.concat([a, b], 1))
        yield Case("split[2,3,4]/axis2", "split", dt, x, lambda g, x: g.split(x, [1, 3], 2))
        yield Case("expand[3,1]->[2,3,4]", "expand", dt, {"x": spec((3, 1), dt)}, lambda g, x: g.expand(x, (2, 3, 4)))
        for mode in ("constant", "reflect", "edge"):
            yield Case(f"pad[3,4]/{mode}", "pad", dt, {"x": spec((3, 4), dt)},
                       lambda g, x, m=mode: g.pad(x, [(1, 2), (2, 0)], m, value=3))
        yield Case("gather[5,3]/embedding", "gather", dt, {"t": spec((5, 3), dt), "i": indices(5, (2, 4))},
                   lambda g, t, i: g.gather(t, i))
        yield Case("gather_elements[3,4]/axis1", "gather_elements", dt,
                   {"x": spec((3, 4), dt), "i": indices(4, (3, 6))}, lambda g, x, i: g.gather_elements(x, i, 1))
        yield Case("scatter_add[4,3]/repeats", "scatter_add", dt,
                   {"d": spec((4, 3), dt), "i": spec((5,), "i32", "values", values=[0, 2, 0, -1, 2]),
                    "u": spec((5, 3), dt)}, lambda g, d, i, u: g.scatter_add(d, i, u))


def _reshape_transpose_cases():
    for name, dims, new in [("rank0->[1,1]", (), (1, 1)), ("[1,1]->rank0", (1, 1), ()),
                            ("empty[0,3]->[3,-1,2]", (0, 3), (3, 0, 2)), ("[6]->[-1,2,1]", (6,), (-1, 2, 1))]:
        yield Case(f"reshape/{name}", "reshape", F32, {"x": spec(dims, F32)}, lambda g, x, d=new: g.reshape(x, d))
    for name, dims, perm in [("reversed", (2, 3, 4), None), ("negative", (2, 3, 4), (-1, 0, -2)),
                             ("rank0", (), None), ("rank1", (5,), (0,)), ("empty", (0, 2, 3), (1, 2, 0))]:
        yield Case(f"transpose/{name}", "transpose", F32, {"x": spec(dims, F32)},
                   lambda g, x, p=perm: g.transpose(x, p))
    yield Case("reshape/helpers", "reshape", F32, {"x": spec((1, 3, 1, 2), F32)},
               lambda g, x: [g.squeeze(x), g.squeeze(x, -2), g.unsqueeze(x, (0, -1)), g.flatten(x, 1, 2),
                             g.flatten(x)])


def _slice_cases():
    variants = [  # name, dims, starts, stops, steps, axes
        ("negative-step", (6, 5), [-1, 4], [-7, 0], [-1, -2], None),
        ("clamped", (4, 5), [-100, 2], [100, 1_000_000], None, None),
        ("axes-unordered", (3, 4, 5), [1, -3], [5, 3], [2, 1], [2, 0]),
        ("empty-result", (4, 5), [3], [1], [1], [1]),
        ("reverse-from-middle", (7,), [3], [-100], [-1], None),
        ("step3", (10, 2), [1], [10], [3], None),
        ("rank0", (), [], [], None, None),
        ("empty-input", (0, 4), [0, 1], [5, 3], None, None),
    ]
    for name, dims, starts, stops, steps, axes in variants:
        yield Case(f"slice/{name}", "slice", F32, {"x": spec(dims, F32)},
                   lambda g, x, a=starts, b=stops, c=steps, d=axes: g.slice(x, a, b, c, d))
    for name, index in [("x[1]", 1), ("x[-1,::-2]", (-1, slice(None, None, -2))),
                        ("x[None,...,1:]", (None, Ellipsis, slice(1, None))),
                        ("x[:,None,2,::-1]", (slice(None), None, 2, slice(None, None, -1)))]:
        yield Case(f"getitem/{name}", "slice", F32, {"x": spec((3, 4, 5), F32)}, lambda g, x, i=index: x[i])


def _concat_split_expand_cases():
    yield Case("concat/three/axis-1", "concat", F32,
               {"a": spec((2, 3, 1), F32), "b": spec((2, 3, 4), F32), "c": spec((2, 3, 2), F32)},
               lambda g, a, b, c: g.concat([a, b, c], -1))
    yield Case("concat/one", "concat", F32, {"a": spec((2, 3), F32)}, lambda g, a: g.concat([a], 0))
    yield Case("concat/empty-part", "concat", F32, {"a": spec((0, 3), F32), "b": spec((2, 3), F32)},
               lambda g, a, b: g.concat([a, b, a], 0))
    yield Case("split/zero-size-part/axis-1", "split", F32, {"x": spec((2, 5), F32)},
               lambda g, x: g.split(x, [0, 2, 3], -1))
    yield Case("split/one-part", "split", F32, {"x": spec((4, 2), F32)}, lambda g, x: g.split(x, [4]))
    for name, dims, to in [("rank0->[2,3]", (), (2, 3)), ("[1,3]->[0,3]", (1, 3), (0, 3)),
                           ("[4]->[2,3,4]", (4,), (2, 3, 4)), ("same", (2, 2), (2, 2))]:
        yield Case(f"expand/{name}", "expand", F32, {"x": spec(dims, F32)}, lambda g, x, d=to: g.expand(x, d))


def _pad_cases():
    variants = [  # name, dims, pads, mode
        ("crop", (5, 6), [(-1, -2), (0, -6)], "constant"),
        ("crop-then-reflect", (5, 6), [(-1, 3), (2, -2)], "reflect"),
        ("crop-then-edge", (5, 6), [(2, -4), (-5, 1)], "edge"),
        ("reflect-max", (3, 4), [(2, 2), (3, 3)], "reflect"),
        ("rank0", (), [], "constant"),
        ("empty-axis", (0, 3), [(1, 1), (0, 2)], "constant"),
        ("rank3-edge", (2, 3, 2), [(0, 1), (2, 0), (1, 1)], "edge"),
    ]
    for name, dims, pads, mode in variants:
        yield Case(f"pad/{name}", "pad", F32, {"x": spec(dims, F32)},
                   lambda g, x, p=pads, m=mode: g.pad(x, p, m, value=-2.5))
    for dt in (DType.I32, DType.BOOL, DType.U8):  # the fill value converted as cast does
        yield Case("pad/value-cast", "pad", dt, {"x": spec((2, 2), dt)},
                   lambda g, x: g.pad(x, [(1, 0), (0, 1)], value=7.9))


def _gather_scatter_cases():
    for dt in INDEX_DTYPES:
        yield Case(f"gather/axis1/{dt.value}-indices", "gather", F32,
                   {"t": spec((2, 6, 3), F32), "i": indices(6, (4,), dt)}, lambda g, t, i: g.gather(t, i, 1))
        yield Case(f"gather_elements/axis0/{dt.value}-indices", "gather_elements", F32,
                   {"x": spec((4, 3), F32), "i": indices(4, (6, 2), dt)}, lambda g, x, i: g.gather_elements(x, i, 0))
        yield Case(f"scatter_add/axis1/{dt.value}-indices", "scatter_add", F32,
                   {"d": spec((2, 5, 3), F32), "i": indices(5, (7,), dt), "u": spec((2, 7, 3), F32)},
                   lambda g, d, i, u: g.scatter_add(d, i, u, axis=-2))
    yield Case("gather/scalar-index", "gather", F32, {"t": spec((4, 3), F32), "i": indices(4, ())},
               lambda g, t, i: g.gather(t, i, 0))
    yield Case("gather/empty-indices", "gather", F32, {"t": spec((4, 3), F32), "i": indices(4, (0, 2))},
               lambda g, t, i: g.gather(t, i, -2))
    yield Case("gather/rank1-table", "gather", F32, {"t": spec((7,), F32), "i": indices(7, (3, 3))},
               lambda g, t, i: g.gather(t, i))
    yield Case("gather_elements/rank3/axis-1", "gather_elements", F32,
               {"x": spec((2, 3, 4), F32), "i": indices(4, (2, 2, 5))}, lambda g, x, i: g.gather_elements(x, i, -1))
    yield Case("scatter_add/empty-indices", "scatter_add", F32,
               {"d": spec((3, 2), F32), "i": indices(3, (0,)), "u": spec((0, 2), F32)},
               lambda g, d, i, u: g.scatter_add(d, i, u))
    yield Case("scatter_add/i8-wraps", "scatter_add", DType.I8,
               {"d": spec((2, 3), "i8", "int", low=100, high=128),
                "i": spec((4,), "i32", "values", values=[1, 1, 0, 1]),
                "u": spec((4, 3), "i8", "int", low=50, high=128)}, lambda g, d, i, u: g.scatter_add(d, i, u))


def cases():
    yield from _every_dtype()
    yield from _reshape_transpose_cases()
    yield from _slice_cases()
    yield from _concat_split_expand_cases()
    yield from _pad_cases()
    yield from _gather_scatter_cases()


def _bad_indices(dtype: DType) -> list[int]:
    """Out-of-range indices into an axis of size 5 (among valid ones): one past each end,
    far past both ends, and the extremes of ``dtype`` (2**62 hung rlx-cpu's numpy wrap)."""
    info = np.iinfo(dtype.np)
    big = 2**62 if dtype is DType.I64 else 10**9
    return [1, 5, -6, big, -big, int(info.min), int(info.max), -1]


def out_of_range_cases():
    """The index kinds with indices outside ``[-n, n)`` (input ``i``; n = 5). The
    reference refuses them, so these are not in ``cases()``: ``ConformanceSuite.
    test_index_out_of_range`` checks them against the ops' two modes (``InputError`` or
    the clamp). The data are small integers, so every clamped result is exact."""
    for dt in INDEX_DTYPES:
        bad = _bad_indices(dt)
        data = spec((2, 5, 3), F32, "int")
        yield Case(f"gather/out-of-range/{dt.value}", "gather", F32,
                   {"t": data, "i": spec((2, 4), dt, "values", values=bad)}, lambda g, t, i: g.gather(t, i, 1))
        yield Case(f"gather_elements/out-of-range/{dt.value}", "gather_elements", F32,
                   {"x": data, "i": spec((2, 4, 3), dt, "values", values=(bad * 3)[:24])},
                   lambda g, x, i: g.gather_elements(x, i, 1))
        yield Case(f"scatter_add/out-of-range/{dt.value}", "scatter_add", F32,
                   {"d": data, "i": spec((8,), dt, "values", values=bad), "u": spec((2, 8, 3), F32, "int")},
                   lambda g, d, i, u: g.scatter_add(d, i, u, axis=1))

