"""safetensors and numpy ``.npz`` files as :class:`WeightLoader` s, and ``open_weights``.

safetensors: ``safetensors.safe_open(path, framework="np")`` checks the file (header,
offsets inside the file, no overlaps) and gives each tensor's dims and type. Its numpy
``get_tensor`` copies every tensor into a new buffer (safetensors 0.8), so the data are
read instead as views of one read-only ``numpy.memmap`` of the file, at the offsets of
the header safe_open validated: no copy, and pages are read only when a tensor is used.
A tensor whose offset is not a multiple of its item size (the format does not pad
between tensors) is copied once so that kernels see aligned data.
"""
from __future__ import annotations

import json
import os
import struct
import zipfile

import numpy as np

from .base import TensorInfo, WeightLoader, WeightsError, dtype_label

__all__ = ["SafetensorsLoader", "NpzLoader", "open_weights"]

# safetensors type name -> numpy dtype (little-endian, as the format stores them)
_ST_NUMPY = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "I16": "<i2", "I8": "i1",
             "U64": "<u8", "U32": "<u4", "U16": "<u2", "U8": "u1", "BOOL": "?"}
_ST_ML_DTYPES = {"BF16": "bfloat16", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}


def _st_dtype(name: str) -> np.dtype | None:
    if name in _ST_NUMPY:
        return np.dtype(_ST_NUMPY[name])
    if name in _ST_ML_DTYPES:
        import ml_dtypes
        return np.dtype(getattr(ml_dtypes, _ST_ML_DTYPES[name]))
    return None


def _require(module: str, extra: str = "weights"):
    try:
        return __import__(module, fromlist=["_"])
    except ImportError:
        from ..runtime.registry import install_hint
        raise WeightsError(f"reading this file needs the {module.split('.')[0]} package: "
                           f"{install_hint(extra)}") from None


class SafetensorsLoader(WeightLoader):
    """A ``.safetensors`` file, memory-mapped (see the module docstring)."""

    def __init__(self, path: "str | os.PathLike"):
        self.path = os.fspath(path)
        self.source = self.path
        safe_open = _require("safetensors").safe_open
        try:
            with open(self.path, "rb") as f:
                (header_len,) = struct.unpack("<Q", f.read(8))
                header = json.loads(f.read(header_len))
            with safe_open(self.path, framework="np") as st:  # validates what the header says
                self.metadata = st.metadata() or {}
                entries = {k: (tuple(st.get_slice(k).get_shape()), st.get_slice(k).get_dtype())
                           for k in sorted(st.keys(), key=lambda k: header[k]["data_offsets"][0])}
        except (OSError, ValueError, struct.error) as e:  # SafetensorError derives from Exception only
            raise WeightsError(f"cannot read safetensors file {self.path!r}: {e}") from None
        except Exception as e:
            raise WeightsError(f"{self.path!r} is not a valid safetensors file: {e}") from None
        data_start = 8 + header_len
        self._entries = {name: (dims, dtype, data_start + header[name]["data_offsets"][0],
                                data_start + header[name]["data_offsets"][1]) for name, (dims, dtype) in entries.items()}
        self._map = np.memmap(self.path, dtype=np.uint8, mode="r") if self._entries else None

    def names(self) -> list[str]:
        return list(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def info(self, name: str) -> TensorInfo:
        dims, st_type, start, end = self._entry(name)
        np_dtype = _st_dtype(st_type)
        return TensorInfo(name, dims, dtype_label(np_dtype) if np_dtype is not None else st_type.lower(), end - start)

    def tensor(self, name: str) -> np.ndarray:
        dims, st_type, start, end = self._entry(name)
        np_dtype = _st_dtype(st_type)
        if np_dtype is None:
            raise WeightsError(f"{self.source}: tensor {name!r} has type {st_type}, which numpy cannot hold")
        if self._map is None:
            raise WeightsError(f"{self.source} is closed")
        raw = self._map[start:end]
        if start % np_dtype.itemsize:
            raw = raw.copy()  # unaligned in the file: one aligned copy
        return raw.view(np_dtype).reshape(dims)

    def close(self) -> None:
        self._map = None

    def _entry(self, name: str):
        try:
            return self._entries[name]
        except KeyError:
            raise self._missing(name) from None


class NpzLoader(WeightLoader):
    """A numpy ``.npz`` archive (``np.savez`` / ``savez_compressed``). Each member's
    header is read for ``info``; its data only when the tensor is asked for. Object
    arrays are refused (they would need pickle)."""

    def __init__(self, path: "str | os.PathLike"):
        self.path = os.fspath(path)
        self.source = self.path
        try:
            self._npz = np.load(self.path, allow_pickle=False)
            self._infos = {name: self._header(name) for name in self._npz.files}
        except (OSError, ValueError, zipfile.BadZipFile) as e:
            raise WeightsError(f"cannot read .npz file {self.path!r}: {e}") from None

    def _header(self, name: str) -> TensorInfo:
        with self._npz.zip.open(name + ".npy") as f:
            version = np.lib.format.read_magic(f)
            reader = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            dims, fortran, dtype = reader(f)
        if dtype.hasobject:
            raise WeightsError(f"{self.path}: member {name!r} is an object array; only plain numeric arrays load")
        count = int(np.prod(dims, dtype=np.int64))
        return TensorInfo(name, tuple(int(d) for d in dims), dtype_label(dtype), count * dtype.itemsize)

    def names(self) -> list[str]:
        return list(self._infos)

    def __contains__(self, name: object) -> bool:
        return name in self._infos

    def info(self, name: str) -> TensorInfo:
        try:
            return self._infos[name]
        except KeyError:
            raise self._missing(name) from None

    def tensor(self, name: str) -> np.ndarray:
        self.info(name)
        try:
            return self._npz[name]
        except (OSError, ValueError, zipfile.BadZipFile) as e:
            raise WeightsError(f"{self.path}: cannot read member {name!r}: {e}") from None

    def close(self) -> None:
        self._npz.close()


def open_weights(path: "str | os.PathLike", **options) -> WeightLoader:
    """The loader for ``path`` by its suffix: ``.safetensors``, ``.gguf`` (``options``:
    ``dequantize=True``) or ``.npz``."""
    path = os.fspath(path)
    suffix = os.path.splitext(path)[1].lower()
    if suffix == ".gguf":
        from .gguf import GGUFLoader
        return GGUFLoader(path, **options)
    if options:
        raise WeightsError(f"options {sorted(options)} apply to .gguf files only, not {path!r}")
    if suffix == ".safetensors":
        return SafetensorsLoader(path)
    if suffix == ".npz":
        return NpzLoader(path)
    raise WeightsError(f"cannot tell the format of {path!r}: expected a .safetensors, .gguf or .npz file")
