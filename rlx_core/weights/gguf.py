"""GGUF files (llama.cpp's format) through the ``gguf`` package, and GGML block weights
kept quantized inside a graph.

``GGUFReader`` memory-maps the file; plain tensors (f32, f16, bf16, f64, integers) are
views of that mapping in numpy's order (GGUF lists dims fastest-first; here they are
reversed, so a ``[ne0=64, ne1=4]`` tensor is ``(4, 64)``).

Quantized tensors are, by default, kept as their blocks. The IR dequantizes affine
codes (``dequantize``: ``(q - zero_point) * scale`` with a scale per index of one axis),
and a GGML block is exactly that with one scale per block of 32 values. So a
``q8_0``/``q4_0``/``q4_1`` tensor ``w`` is exposed as the parts of its blocks --
``w.qs`` (the codes, one row per block), ``w.d`` (the f16 block scales) and, for q4_1,
``w.m`` (the f16 block minimums) -- and :func:`block_param` declares those params in a
graph and adds the ops that rebuild ``w`` at run time: f16->f32 casts, nibble unpacking
for the 4-bit formats (``mod``/``div`` by 16, concat), ``dequantize`` with one scale per
block, ``+ m`` for q4_1, and a reshape to ``w``'s dims. The result equals
``gguf.quants.dequantize`` bit for bit, while the params hold 1.06 (q8_0) or 0.56 (q4_0)
bytes per value instead of 4. Other GGML types (the k-quants, i-quants) have no such
form and are loaded with ``dequantize=True``, which expands every quantized tensor to
f32 on load with ``gguf.quants.dequantize``.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from ..errors import ShapeError
from .base import TensorInfo, WeightLoader, WeightsError, dtype_label
from .files import _require

__all__ = ["GGUFLoader", "BlockFormat", "BLOCK_FORMATS", "block_param", "split_blocks"]


@dataclass(frozen=True)
class BlockFormat:
    """One GGML block layout: ``values`` per block, ``nbytes`` per block, and its parts as
    ``(suffix, first byte, numpy dtype, count per block)`` in storage order."""

    name: str
    values: int
    nbytes: int
    parts: tuple[tuple[str, int, str, int], ...]

    def part_dims(self, suffix: str, n_blocks: int) -> tuple[int, ...]:
        count = next(p[3] for p in self.parts if p[0] == suffix)
        return (n_blocks,) if count == 1 else (n_blocks, count)


# The layouts of ggml-common.h (block_q8_0, block_q4_0, block_q4_1): f16 scale(s) first.
BLOCK_FORMATS = {
    "q8_0": BlockFormat("q8_0", 32, 34, (("d", 0, "<f2", 1), ("qs", 2, "i1", 32))),
    "q4_0": BlockFormat("q4_0", 32, 18, (("d", 0, "<f2", 1), ("qs", 2, "u1", 16))),
    "q4_1": BlockFormat("q4_1", 32, 20, (("d", 0, "<f2", 1), ("m", 2, "<f2", 1), ("qs", 4, "u1", 16))),
}


def split_blocks(blocks: np.ndarray, fmt: BlockFormat) -> dict[str, np.ndarray]:
    """The parts of ``blocks`` (any shape whose last axis holds whole blocks' bytes) as
    strided views, one row per block: ``{"d": (n,) f16, "qs": (n, k) codes, ...}``."""
    rows = np.asarray(blocks, dtype=np.uint8).reshape(-1, fmt.nbytes)
    out = {}
    for suffix, start, dtype, count in fmt.parts:
        dt = np.dtype(dtype)
        part = rows[:, start:start + count * dt.itemsize].view(dt)
        out[suffix] = part.reshape(-1) if count == 1 else part
    return out


def block_param(g, name: str, dims, fmt: str):
    """Declare the weight ``name`` of ``dims`` as GGML ``fmt`` blocks in graph ``g``: params
    ``name.qs``, ``name.d`` (and ``name.m`` for q4_1) as a :class:`GGUFLoader` names them,
    and the ops that dequantize them; returns the f32 value of ``dims``."""
    f = BLOCK_FORMATS.get(fmt)
    if f is None:
        raise WeightsError(f"no in-graph dequantization for GGML type {fmt!r}; types kept as blocks: "
                           f"{', '.join(BLOCK_FORMATS)} (open other files with dequantize=True)")
    dims = tuple(int(d) for d in dims)
    if not dims or dims[-1] % f.values:
        raise ShapeError(f"{fmt} weight '{name}': the last dim must be a multiple of {f.values} (GGML blocks run "
                         f"along rows), got dims {list(dims)}")
    n_blocks = int(np.prod(dims, dtype=np.int64)) // f.values
    params = {suffix: g.param(f"{name}.{suffix}", f.part_dims(suffix, n_blocks), dtype_label(np.dtype(dt)))
              for suffix, _, dt, _ in f.parts}
    scale = g.cast(params["d"], "f32")
    codes = params["qs"]
    if fmt != "q8_0":  # two 4-bit codes per byte: element j in the low nibble, j + 16 in the high one
        wide = g.cast(codes, "i32")
        codes = g.concat([g.mod(wide, 16), g.div(wide, 16)], axis=1)
        if fmt == "q4_0":
            codes = g.sub(codes, 8)
    values = g.dequantize(codes, scale, axis=0)
    if fmt == "q4_1":
        values = g.add(values, g.reshape(g.cast(params["m"], "f32"), (n_blocks, 1)))
    return g.reshape(values, dims)


class GGUFLoader(WeightLoader):
    """A ``.gguf`` file. ``dequantize=False`` (default) keeps q8_0/q4_0/q4_1 tensors as
    their block parts (see the module docstring; other quantized types are listed under
    their own name with their GGML type, and loading one says to use dequantize=True);
    ``dequantize=True`` expands every quantized tensor to f32 when it is read."""

    def __init__(self, path: "str | os.PathLike", *, dequantize: bool = False):
        gguf = _require("gguf")
        self.path = os.fspath(path)
        self.source = self.path
        self.dequantize = bool(dequantize)
        try:
            self._reader = gguf.GGUFReader(self.path)
        except (OSError, ValueError) as e:
            raise WeightsError(f"cannot read GGUF file {self.path!r}: {e}") from None
        except Exception as e:  # the reader raises bare errors on malformed files
            raise WeightsError(f"{self.path!r} is not a valid GGUF file: {type(e).__name__}: {e}") from None
        self._gguf = gguf
        self._entries: dict[str, tuple] = {}  # exposed name -> (reader tensor, block part or None)
        self._quantized: dict[str, str] = {}  # tensor kept as parts -> its GGML type
        for t in self._reader.tensors:
            kind = t.tensor_type.name.lower()
            if not self.dequantize and kind in BLOCK_FORMATS:
                self._quantized[t.name] = kind
                for suffix, *_ in BLOCK_FORMATS[kind].parts:
                    self._entries[f"{t.name}.{suffix}"] = (t, suffix)
            else:
                self._entries[t.name] = (t, None)

    @property
    def metadata(self) -> dict[str, object]:
        """The file's key/value fields (architecture, tokenizer, ...), decoded."""
        return {k: f.contents() for k, f in self._reader.fields.items() if not k.startswith("GGUF.")}

    def names(self) -> list[str]:
        return list(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def note(self, name: str) -> str | None:
        kind = self._quantized.get(name)
        if kind is None:
            return None
        parts = ", ".join(f"'{name}.{p[0]}'" for p in BLOCK_FORMATS[kind].parts)
        return (f"the file holds it as {kind} blocks ({parts}): declare it with "
                f"rlx_core.weights.block_param(g, {name!r}, dims, {kind!r}), or open the file with dequantize=True")

    def info(self, name: str) -> TensorInfo:
        t, part = self._entry(name)
        dims = self._dims(t)
        kind = t.tensor_type.name.lower()
        if part is not None:
            fmt = BLOCK_FORMATS[kind]
            n_blocks = int(t.n_elements) // fmt.values
            dt = np.dtype(next(p[2] for p in fmt.parts if p[0] == part))
            part_dims = fmt.part_dims(part, n_blocks)
            return TensorInfo(name, part_dims, dtype_label(dt), int(np.prod(part_dims)) * dt.itemsize)
        plain = self._plain_dtype(kind)
        if plain is not None:
            return TensorInfo(name, dims, dtype_label(plain), int(t.n_bytes))
        if self.dequantize:
            return TensorInfo(name, dims, "f32", int(t.n_elements) * 4)
        return TensorInfo(name, dims, kind, int(t.n_bytes))

    def tensor(self, name: str) -> np.ndarray:
        t, part = self._entry(name)
        kind = t.tensor_type.name.lower()
        if part is not None:
            return split_blocks(t.data, BLOCK_FORMATS[kind])[part]
        plain = self._plain_dtype(kind)
        if plain is not None:
            return t.data.view(plain).reshape(self._dims(t))
        if self.dequantize:
            return self._gguf.quants.dequantize(t.data, t.tensor_type).reshape(self._dims(t)).astype(np.float32,
                                                                                                 copy=False)
        raise WeightsError(f"{self.source}: tensor {name!r} is {kind} blocks, which stay quantized only as "
                           f"{', '.join(BLOCK_FORMATS)}; open the file with dequantize=True to read it as f32")

    def close(self) -> None:
        self._entries.clear()
        self._reader = None

    @staticmethod
    def _dims(t) -> tuple[int, ...]:
        return tuple(int(d) for d in reversed(t.shape))  # GGUF: fastest dim first

    @staticmethod
    def _plain_dtype(kind: str) -> np.dtype | None:
        if kind == "bf16":
            import ml_dtypes
            return np.dtype(ml_dtypes.bfloat16)
        return {"f32": np.dtype("<f4"), "f16": np.dtype("<f2"), "f64": np.dtype("<f8"), "i8": np.dtype("i1"),
                "i16": np.dtype("<i2"), "i32": np.dtype("<i4"), "i64": np.dtype("<i8")}.get(kind)

    def _entry(self, name: str):
        try:
            return self._entries[name]
        except KeyError:
            raise self._missing(name) from None
