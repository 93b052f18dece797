"""Conformance cases: small graphs with generated data, checked against the reference.

A case names the op kind it exercises, the dtype it exercises it on, its inputs
(shape, dtype, how to generate data, whether it is a param) and a ``build`` function
that adds the op(s) on those inputs and returns the output value(s)::

    Case("softmax/2x3x5/axis1", "softmax", DType.F32,
         inputs={"x": spec((2, 3, 5), "f32")},
         build=lambda g, x: g.softmax(x, axis=1))

Case modules live in ``rlx_core.testing.cases_*`` and each exposes ``cases()``.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import numpy as np

from ..ir.dtypes import DType
from ..ir.graph import Graph
from ..ir.shape import Shape

__all__ = ["Case", "InputSpec", "spec", "make_data", "build_case", "all_cases", "CASE_MODULES"]

CASE_MODULES = ["sources", "elementwise", "reduce", "movement", "linalg", "nn", "conv", "quant",
                "fft", "random", "control"]


@dataclass(frozen=True)
class InputSpec:
    """One graph input (or param) of a case and how to fill it.

    ``gen``: ``"normal"`` (default), ``"uniform"`` (in ``[low, high)``), ``"positive"``
    (uniform in [0.1, 3)), ``"int"`` (integers in ``[low, high)``), ``"bool"``,
    ``"values"`` (exactly ``values``) or a callable ``(rng, shape, dtype) -> array``.
    """

    shape: Shape
    gen: "str | Callable" = "normal"
    low: float | None = None
    high: float | None = None
    values: Any = None
    param: bool = False


def spec(dims, dtype="f32", gen="normal", *, low=None, high=None, values=None, param=False) -> InputSpec:
    return InputSpec(Shape(dims, dtype), gen, low, high, values, param)


@dataclass(frozen=True)
class Case:
    name: str
    kind: str
    dtype: DType
    inputs: dict[str, InputSpec]
    build: Callable[..., Any]
    tol: float = 1.0  # multiplier on the dtype's tolerances (compare.TOLERANCES)
    note: str = ""
    tags: frozenset[str] = field(default_factory=frozenset)

    @property
    def id(self) -> str:
        return f"{self.kind}:{self.name}:{self.dtype.value}"


def build_case(case: Case) -> Graph:
    """The case's graph: its inputs/params, then ``build``; outputs as returned."""
    g = Graph(case.name)
    vals = [(g.param if s.param else g.input)(name, s.shape) for name, s in case.inputs.items()]
    out = case.build(g, *vals)
    g.set_outputs(list(out) if isinstance(out, (list, tuple)) else [out])
    return g


def make_data(case: Case, variant: int = 0) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Deterministic (inputs, params) for a case; ``variant`` gives a second data set."""
    rng = np.random.default_rng(zlib.crc32(f"{case.id}#{variant}".encode()))
    inputs, params = {}, {}
    for name, s in case.inputs.items():
        (params if s.param else inputs)[name] = _generate(rng, s)
    return inputs, params


def _generate(rng: np.random.Generator, s: InputSpec) -> np.ndarray:
    dims, dt = s.shape.dims, s.shape.dtype
    gen = s.gen
    if callable(gen):
        arr = np.asarray(gen(rng, dims, dt))
    elif gen == "values":
        arr = np.asarray(s.values).reshape(dims)
    elif dt.is_bool or gen == "bool":
        arr = rng.random(dims) < 0.5
    elif dt.is_int or gen == "int":
        lo = int(s.low if s.low is not None else (0 if not dt.is_signed else -8))
        hi = int(s.high if s.high is not None else 9)
        arr = rng.integers(lo, hi, size=dims)
    elif gen == "uniform":
        arr = rng.uniform(s.low if s.low is not None else -1, s.high if s.high is not None else 1, dims)
    elif gen == "positive":
        arr = rng.uniform(s.low or 0.1, s.high or 3.0, dims)
    elif gen == "normal":
        arr = rng.standard_normal(dims)
        if dt.is_complex:
            arr = arr + 1j * rng.standard_normal(dims)
    else:
        raise ValueError(f"unknown generator {gen!r}")
    if dt.is_complex and not np.iscomplexobj(arr):
        arr = arr + 1j * rng.standard_normal(dims)
    return np.asarray(arr).astype(dt.np)


def all_cases(kinds: Iterable[str] | None = None) -> list[Case]:
    """Every built-in case (optionally only those exercising ``kinds``)."""
    import importlib
    out: list[Case] = []
    for mod in CASE_MODULES:
        out.extend(importlib.import_module(f"{__package__}.cases_{mod}").cases())
    if kinds is not None:
        wanted = set(kinds)
        out = [c for c in out if c.kind in wanted]
    ids = [c.id for c in out]
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        raise ValueError(f"duplicate conformance case ids: {sorted(dup)[:5]}")
    return out
