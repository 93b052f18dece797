"""In-graph random numbers: ``rng_uniform`` and ``rng_normal`` (ONNX RandomUniform /
RandomNormal, and their ``*Like`` forms when given a template input).

An rng node reads no data: its output shape comes from ``dims`` or from a template
input (whose dims, not values, are used), and its numbers from the run's
``RngOptions`` (``CompileOptions.rng``, changed without recompiling by
``CompiledGraph.set_rng``) and the node's ``key``; ``rlx_core.rng.draw`` defines them
for each mode. Every run re-seeds: two runs with equal options give equal outputs.

``key`` tells the rng nodes of a graph apart. The builder's default is a 64-bit
BLAKE2b hash of ``"<graph name>#rng<k>"`` (the graph's k-th rng node), which is the
same in every process; subgraphs built by the control-flow builders get distinct
names, so their nodes get distinct keys too.

``seed`` is an integer; ONNX's float ``seed`` attribute ``s`` corresponds to
``int(float32(s))``, the value onnxruntime converts it to.
"""
from __future__ import annotations

import hashlib
import math

from ...errors import DTypeError, OpAttributeError, ShapeError
from ..dtypes import FLOATS, DType
from ..schema import Attr, op
from ..shape import Shape

KINDS = ("rng_uniform", "rng_normal")

_COMMON = {
    "dims": Attr("ints", None, "output dims; taken from the template input when there is one", optional=True),
    "dtype": Attr("dtype", DType.F32, "output dtype (a float dtype)"),
    "key": Attr("int", doc="the node's stream id, 0 <= key < 2**64 (the builder picks a stable one)"),
    "seed": Attr("int", None, "fixed seed used instead of RngOptions.seed for this node", optional=True),
}


def _rng_shape(kind, a, like):
    """Shared shape rule: float dtype, key range, dims from the template or ``dims``."""
    if a.dtype not in FLOATS:
        raise DTypeError(f"{kind} dtype must be one of {', '.join(sorted(d.value for d in FLOATS))}, "
                         f"got {a.dtype}")
    if not 0 <= a.key < 2**64:
        raise OpAttributeError(f"{kind} key must be in [0, 2**64), got {a.key}")
    if like is not None:
        if a.dims is not None and tuple(a.dims) != like.dims:
            raise ShapeError(f"{kind} dims {list(a.dims)} disagree with the template input's {list(like.dims)}")
        a.dims = like.dims
    elif a.dims is None:
        raise OpAttributeError(f"{kind} needs dims or a template input")
    return Shape(a.dims, a.dtype)


def _finite(kind, **values):
    for name, v in values.items():
        if not math.isfinite(v):
            raise OpAttributeError(f"{kind} {name} must be finite, got {v}")


@op("rng_uniform", inputs="like?",
    attrs={**_COMMON, "low": Attr("float", 0.0, "lower bound"), "high": Attr("float", 1.0, "upper bound")})
def rng_uniform(a, like=None):
    """Uniform random numbers in ``[low, high)`` (``low <= high``), of ``dims`` or of the
    template input's dims, in ``dtype``. ``philox`` mode: ``low + u * (high - low)`` in
    f32 with ``u`` from 24 random bits, then rounded to ``dtype`` (so f16/bf16 may
    round up to ``high``, and f64 holds f32 values); ``ort`` mode: onnxruntime's
    RandomUniform for the same seed, bit for bit on f32/f64 (see ``rlx_core.rng``);
    ``zero`` mode: zeros. Unlike the original RLX (f32 only), any float dtype."""
    _finite("rng_uniform", low=a.low, high=a.high)
    if a.high < a.low:
        raise OpAttributeError(f"rng_uniform needs low <= high, got low={a.low}, high={a.high}")
    return _rng_shape("rng_uniform", a, like)


@op("rng_normal", inputs="like?",
    attrs={**_COMMON, "mean": Attr("float", 0.0, "mean"), "scale": Attr("float", 1.0, "standard deviation")})
def rng_normal(a, like=None):
    """Normal random numbers ``mean + scale * z`` (``scale >= 0``), of ``dims`` or of the
    template input's dims, in ``dtype``. ``philox`` mode: ``z`` by Box-Muller (cosine
    branch) in f32, rounded to ``dtype``; backends agree to a few ulp (their ``log`` /
    ``cos`` round differently). ``ort`` mode: onnxruntime's RandomNormal (Marsaglia's
    polar method of libstdc++) for the same seed, bit for bit on f32/f64 with glibc;
    ``zero`` mode: zeros (not ``mean``)."""
    _finite("rng_normal", mean=a.mean, scale=a.scale)
    if a.scale < 0:
        raise OpAttributeError(f"rng_normal scale must be >= 0, got {a.scale}")
    return _rng_shape("rng_normal", a, like)


class RandomBuilders:
    def rng_uniform(self, dims=None, *, like=None, low: float = 0.0, high: float = 1.0, dtype=None,
                    key: int | None = None, seed: int | None = None, name=None, shape=None):
        """Uniform numbers in ``[low, high)`` of ``dims`` (or of ``like``'s dims); see the op."""
        return self._rng("rng_uniform", dims, like, dtype, key, seed, name, shape, low=low, high=high)

    def rng_normal(self, dims=None, *, like=None, mean: float = 0.0, scale: float = 1.0, dtype=None,
                   key: int | None = None, seed: int | None = None, name=None, shape=None):
        """Normal numbers ``mean + scale * z`` of ``dims`` (or of ``like``'s dims); see the op."""
        return self._rng("rng_normal", dims, like, dtype, key, seed, name, shape, mean=mean, scale=scale)

    def _rng(self, kind, dims, like, dtype, key, seed, name, shape, **params):
        """``dtype`` defaults to the template's dtype when that is a float, else f32."""
        inputs = () if like is None else (self.as_value(like),)
        if isinstance(dims, Shape):
            dims, dtype = dims.dims, dtype or dims.dtype
        if dtype is None:
            dtype = inputs[0].dtype if inputs and inputs[0].dtype.is_float else DType.F32
        attrs = {"dims": dims, "dtype": dtype, "key": self.default_rng_key() if key is None else key,
                 "seed": seed, **params}
        return self.add_node(kind, inputs, attrs, shape=shape, name=name)

    def default_rng_key(self) -> int:
        """The key the next rng node gets by default (see the module docstring)."""
        ordinal = sum(1 for n in self.nodes if n.kind in KINDS)
        digest = hashlib.blake2b(f"{self.name}#rng{ordinal}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "little")
