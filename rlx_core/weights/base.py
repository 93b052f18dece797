"""Named tensors from a weight file: the seed's ``WeightLoader`` protocol in Python.

The original's trait has two calls, ``names()`` and ``tensor_bytes(name)``. Here a loader
also says each tensor's dims and dtype *without reading its data* (``info``), so that
``load_weights`` can check every tensor against the graph before it touches any param,
and hands out typed arrays (``tensor``) that are views of a memory-mapped file wherever
the file's layout is already the one a param needs.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Iterable

import numpy as np

from ..errors import RlxError

__all__ = ["WeightsError", "TensorInfo", "WeightLoader", "BytesWeightLoader", "dtype_label"]


class WeightsError(RlxError):
    """A weight file cannot be read, or holds no tensor of the requested name or type."""


@dataclass(frozen=True)
class TensorInfo:
    """What a file says about one tensor. ``dtype`` is the RLX dtype label where one
    exists (``f32``, ``bf16``), else the file's own type name (``u16``, ``f8_e4m3``,
    ``q4_k``); untyped bytes (``BytesWeightLoader``) have ``dims=None`` and dtype ``bytes``."""

    name: str
    dims: tuple[int, ...] | None
    dtype: str
    nbytes: int

    def describe(self) -> str:
        if self.dims is None:
            return f"{self.nbytes} bytes"
        return f"{list(self.dims)} {self.dtype}"


def dtype_label(np_dtype: np.dtype) -> str:
    """The RLX label of a numpy dtype (``f32``), or numpy's name for types RLX lacks."""
    from ..ir.dtypes import DType
    try:
        return DType.of(np_dtype).label
    except RlxError:
        return np.dtype(np_dtype).name


class WeightLoader(abc.ABC):
    """A source of named tensors (a file, or bytes in memory).

    Subclasses implement ``names``, ``info`` and ``tensor``; ``source`` names the file in
    messages. ``tensor(name)`` returns an array of ``info(name)``'s dims and dtype, read-only
    and backed by the file's mapping where its layout allows. Loaders are context managers;
    ``close`` drops the file (arrays already handed out stay valid).
    """

    source: str = "weights"

    @abc.abstractmethod
    def names(self) -> list[str]:
        """Every tensor name, in file order."""

    @abc.abstractmethod
    def info(self, name: str) -> TensorInfo:
        """Dims, dtype and size of ``name``, without reading its data."""

    @abc.abstractmethod
    def tensor(self, name: str) -> np.ndarray:
        """The tensor ``name`` (WeightsError when there is none)."""

    def note(self, name: str) -> str | None:
        """Why a param ``name`` the file lacks is not there, where the loader knows
        (e.g. it is stored quantized under other names); None otherwise."""
        return None

    def tensor_bytes(self, name: str) -> memoryview | None:
        """The seed's call: ``name``'s raw little-endian bytes in C order, None if absent."""
        if name not in self:
            return None
        arr = np.ascontiguousarray(self.tensor(name))
        return memoryview(arr.reshape(-1).view(np.uint8))

    def __contains__(self, name: object) -> bool:
        return name in self.names()

    def __len__(self) -> int:
        return len(self.names())

    def close(self) -> None:
        """Release the file (subclasses that hold one override this)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.source!r}, {len(self)} tensors)"

    def _missing(self, name: str) -> WeightsError:
        names = self.names()
        shown = ", ".join(names[:8]) + (f", ... ({len(names)} in all)" if len(names) > 8 else "")
        return WeightsError(f"{self.source} has no tensor named {name!r}; it has: {shown or 'none'}")


class BytesWeightLoader(WeightLoader):
    """Untyped tensors in one buffer, as the seed's ``BytesWeightLoader::from_pairs``:
    each name's bytes are read as the dtype of the param they load into (so their length
    must be that param's element count times its item size)."""

    def __init__(self, buffer: bytes | bytearray, spans: dict[str, tuple[int, int]], source: str = "bytes"):
        self._buffer = np.frombuffer(buffer, dtype=np.uint8)
        self._spans = dict(spans)
        self.source = source

    @classmethod
    def from_pairs(cls, pairs: Iterable[tuple[str, bytes]]) -> "BytesWeightLoader":
        """Concatenate ``(name, bytes)`` pairs into one buffer (a name given twice is an error)."""
        buffer, spans = bytearray(), {}
        for name, data in pairs:
            if not isinstance(name, str) or not name:
                raise WeightsError(f"tensor names must be non-empty strings, got {name!r}")
            if name in spans:
                raise WeightsError(f"tensor {name!r} is given twice")
            view = memoryview(data).cast("B")
            spans[name] = (len(buffer), len(buffer) + view.nbytes)
            buffer += view
        return cls(bytes(buffer), spans)

    def names(self) -> list[str]:
        return list(self._spans)

    def __contains__(self, name: object) -> bool:
        return name in self._spans

    def info(self, name: str) -> TensorInfo:
        start, end = self._span(name)
        return TensorInfo(name, None, "bytes", end - start)

    def tensor(self, name: str) -> np.ndarray:
        start, end = self._span(name)
        return self._buffer[start:end]

    def _span(self, name: str) -> tuple[int, int]:
        try:
            return self._spans[name]
        except KeyError:
            raise self._missing(name) from None
