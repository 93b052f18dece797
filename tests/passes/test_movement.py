"""Transposes and reshapes merged, dropped when they do nothing, and the flatten /
unflatten reshapes around a projection folded into the matmul."""
from __future__ import annotations

import numpy as np

from rlx_core import Graph
from rlx_core.passes.pipeline import optimize


def run(g, same):
    new, report = optimize(g)
    same(g, new)
    return [n.kind for n in new.nodes], report


def test_transpose_chains(same):
    g = Graph("transposes")
    x = g.input("x", (2, 3, 4, 5), "f32")
    a = g.transpose(g.transpose(x, (0, 2, 1, 3)), (0, 1, 3, 2))        # one transpose
    b = g.transpose(g.transpose(x, (3, 2, 1, 0)), (3, 2, 1, 0))        # none
    c = g.transpose(x, (0, 1, 2, 3))                                   # none
    g.set_outputs([a, g.exp(b), g.relu(c)])
    got, report = run(g, same)
    assert got.count("transpose") == 1 and "transposes merged" in report.text()


def test_reshape_chains(same):
    g = Graph("reshapes")
    x = g.input("x", (2, 3, 4), "f32")
    g.set_outputs([g.reshape(g.reshape(g.reshape(x, (6, 4)), (24,)), (4, 6)), g.exp(g.reshape(x, (2, 3, 4)))])
    got, _ = run(g, same)
    assert got.count("reshape") == 1


def test_flattened_projection(same):
    g = Graph("sandwich")
    x = g.input("x", (2, 5, 8), "f32")
    w = g.param("w", (8, 6), "f32")
    b = g.param("b", (1, 6), "f32")
    y = g.reshape(g.reshape(x, (10, 8)) @ w + b, (2, 5, 6))
    z = g.reshape(g.reshape(x, (10, 8)) @ g.transpose(g.param("w2", (6, 8), "f32")), (2, 5, 6))
    g.set_outputs([y, z])
    got, report = run(g, same)
    assert "reshape" in got  # the bias [1, 6] becomes [6]
    new = optimize(g)[0]
    assert all(new.shape_of(n.inputs[0]).rank == 3 for n in new.nodes if n.kind == "matmul")


def test_gemm_trans_b_of_a_constant_is_prefolded(same):
    g = Graph("gemm")
    x = g.input("x", (4, 8), "f32")
    w = g.constant(np.arange(48, dtype=np.float32).reshape(6, 8) / 48)
    g.set_outputs([x @ g.transpose(w)])
    got, _ = run(g, same)
    assert got == ["input", "constant", "matmul"]
