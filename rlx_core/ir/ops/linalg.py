"""Linear algebra: matrix products and dense linear solves.

Both kinds take operands of one dtype; the builder methods promote mixed operands
(``rlx_core.ir.dtypes.promote``) by inserting ``cast`` nodes, as the elementwise
builders do.
"""
from __future__ import annotations

from ...errors import ShapeError
from ..dtypes import COMPLEX, FLOATS, NUMERIC
from ..schema import op, same_dtype
from ..shape import Shape, broadcast_dims


@op("matmul", inputs=("a", "b"), dtypes=NUMERIC)
def matmul(attrs, a, b):
    """Matrix product with numpy ``matmul`` semantics.

    ``a`` is ``[..., M, K]`` and ``b`` is ``[..., K, N]``; the batch dims ``...``
    broadcast as numpy does and the result is ``[..., M, N]``. A 1-D ``a`` (``[K]``) is
    treated as ``[1, K]`` and a 1-D ``b`` as ``[K, 1]``; the added dim is removed from
    the result (so vector @ vector is a rank-0 dot product). Rank-0 operands are an
    error. ``K = 0`` gives zeros.

    Floats and complex numbers accumulate in their dtype (16-bit floats in f32, rounded
    once). Integers accumulate exactly and the result wraps to the dtype, i.e. it is the
    exact integer sum of products modulo 2**bits (what per-step wrapping accumulation
    gives too, since wrapping commutes with + and *).
    """
    same_dtype("matmul", a, b)
    for name, s in (("a", a), ("b", b)):
        if s.rank == 0:
            raise ShapeError(f"matmul operand {name} must have rank >= 1, got a rank-0 {s}")
    a_dims = (1,) + a.dims if a.rank == 1 else a.dims
    b_dims = b.dims + (1,) if b.rank == 1 else b.dims
    if a_dims[-1] != b_dims[-2]:
        raise ShapeError(f"matmul contraction sizes differ: a {list(a.dims)} has K={a_dims[-1]}, "
                         f"b {list(b.dims)} has K={b_dims[-2]}")
    batch = broadcast_dims(a_dims[:-2], b_dims[:-2], what="matmul batch dims")
    out = batch + (() if a.rank == 1 else (a_dims[-2],)) + (() if b.rank == 1 else (b_dims[-1],))
    return Shape(out, a.dtype)


@op("dense_solve", inputs=("a", "b"), dtypes=FLOATS | COMPLEX)
def dense_solve(attrs, a, b):
    """x = A^-1 b: the solution of the square linear system(s) ``A x = b``.

    ``A`` is ``[..., N, N]``. ``b`` is a (batch of) vector(s) ``[..., N]`` when it is 1-D
    or when its dims are exactly ``A``'s without the last one (torch.linalg.solve's
    rule); otherwise it is a (batch of) matrix(es) ``[..., N, K]`` whose K columns are
    solved for independently. Batch dims broadcast; ``x`` has the broadcast batch dims
    followed by ``[N]`` or ``[N, K]``.

    The reference solves by LU factorization with partial pivoting (LAPACK ``gesv``).
    For a singular (or numerically singular) ``A`` the result is undefined: the
    reference returns NaN for that system, backends may return anything.
    """
    same_dtype("dense_solve", a, b)
    if a.rank < 2 or a.dims[-1] != a.dims[-2]:
        raise ShapeError(f"dense_solve needs square matrices A [..., N, N], got A {list(a.dims)}")
    n = a.dims[-1]
    vector = solve_rhs_is_vector(a.dims, b.dims)
    if b.rank == 0 or (not vector and b.rank < 2):
        raise ShapeError(f"dense_solve needs b [..., N] or [..., N, K], got b {list(b.dims)}")
    rows, tail = (b.dims[-1], ()) if vector else (b.dims[-2], b.dims[-1:])
    if rows != n:
        kind = "vector" if vector else "matrix"
        raise ShapeError(f"dense_solve: A {list(a.dims)} has N={n} but b {list(b.dims)} (a {kind} "
                         f"right-hand side) has {rows} rows")
    b_batch = b.dims[:-1] if vector else b.dims[:-2]
    batch = broadcast_dims(a.dims[:-2], b_batch, what="dense_solve batch dims")
    return Shape(batch + (n,) + tail, a.dtype)


def solve_rhs_is_vector(a_dims, b_dims) -> bool:
    """Whether dense_solve treats ``b`` as (a batch of) vectors rather than matrices."""
    return len(b_dims) == 1 or tuple(b_dims) == tuple(a_dims[:-1])


class LinalgBuilders:
    def matmul(self, a, b, shape=None, *, name=None):
        """``a @ b`` (numpy matmul semantics); mixed dtypes are promoted first.

        ``shape`` (optional, 3rd positional as in ``g.matmul(x, w, Shape((1, 2), "f32"))``)
        is checked against the inferred result.
        """
        a, b = self.promote_operands(a, b)
        return self.add_node("matmul", (a, b), shape=shape, name=name)

    def dense_solve(self, a, b, shape=None, *, name=None):
        """The solution x of ``a @ x = b`` (see the ``dense_solve`` op kind)."""
        a, b = self.promote_operands(a, b)
        return self.add_node("dense_solve", (a, b), shape=shape, name=name)
