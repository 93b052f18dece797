"""Initializer data of ONNX models: embedded (``raw_data`` or a typed field) or external
(``onnx.save_model(..., save_as_external_data=True)``: the bytes live in a file beside
the model, named by ``location``, at ``offset`` for ``length`` bytes).

Every tensor's data is checked against its dims before it is used, so a model whose
data do not fit its shapes fails with ``ModelDataError`` naming the tensor instead of a
numpy error. External files are read only from inside the model's folder: a
``location`` that is absolute, climbs out with ``..``, or resolves through a symbolic
link to somewhere outside the folder is refused, so a model cannot make the importer
read arbitrary files. External tensors are memory-mapped (read-only, no copy) unless
their offset leaves them misaligned for their dtype.
"""
from __future__ import annotations

import math
import mmap
import os
import stat
import sys
from pathlib import PurePath

import numpy as np

from ..errors import FrontendError

__all__ = ["ModelDataError", "ExternalData", "initializer_array"]


class ModelDataError(FrontendError, ValueError):
    """An ONNX model's data contradicts its own declarations (an initializer whose data
    do not fit its dims, external data outside the model's folder or past the end of
    its file, an op argument such as Range's delta = 0); the message names the tensor
    or node."""


class ExternalData:
    """Where a model's external tensors are read from (``base_dir``: the model's folder,
    None when it is unknown) and the files mapped so far (one read-only map per file,
    kept alive by the arrays viewing it)."""

    def __init__(self, base_dir: str | os.PathLike | None):
        self.base_dir = None if base_dir is None else os.path.realpath(os.fspath(base_dir))
        self._maps: dict[str, "mmap.mmap | bytes"] = {}

    def read(self, tensor, np_dtype: np.dtype, count: int) -> np.ndarray:
        """The ``count`` elements of ``tensor``'s external data, as a flat array."""
        from onnx.external_data_helper import ExternalDataInfo
        name = tensor.name
        try:
            info = ExternalDataInfo(tensor)
        except ValueError as e:  # negative offset or length
            raise ModelDataError(f"initializer '{name}': {e}") from None
        data = self._map(self._resolve(name, info.location))
        offset = info.offset or 0
        length = len(data) - offset if info.length is None else info.length
        if offset + length > len(data):
            raise ModelDataError(f"initializer '{name}': external data {info.location!r} at offset {offset} for "
                                 f"{length} bytes runs past the end of the file ({len(data)} bytes)")
        _expect_count(name, tensor, count, length, np_dtype.itemsize, "bytes of external data")
        arr = np.frombuffer(data, np_dtype, count, offset)
        return arr if arr.flags.aligned else arr.copy()

    def _resolve(self, name: str, location: str) -> str:
        """The real path of ``location``, which must stay inside the model's folder."""
        if self.base_dir is None:
            raise ModelDataError(f"initializer '{name}' keeps its data in the external file {location!r}, but the "
                                 f"model's folder is unknown: pass the model's path to load_onnx (or base_dir=)")
        where = f"initializer '{name}': external data location {location!r}"
        if not location or "\0" in location:
            raise ModelDataError(f"{where} is not a file name")
        if os.path.isabs(location) or PurePath(location).anchor:
            raise ModelDataError(f"{where} is absolute; external data must lie in the model's folder "
                                 f"{self.base_dir!r}")
        if ".." in PurePath(location).parts:
            raise ModelDataError(f"{where} climbs out with '..'; external data must lie in the model's folder "
                                 f"{self.base_dir!r}")
        path = os.path.realpath(os.path.join(self.base_dir, location))
        if os.path.commonpath([self.base_dir, path]) != self.base_dir:
            raise ModelDataError(f"{where} resolves (through a symbolic link) to {path!r}, outside the model's "
                                 f"folder {self.base_dir!r}")
        return path

    def _map(self, path: str) -> "mmap.mmap | bytes":
        if path not in self._maps:
            try:
                with open(path, "rb") as f:
                    st = os.fstat(f.fileno())
                    if not stat.S_ISREG(st.st_mode):
                        raise ModelDataError(f"external data file {path!r} is not a regular file")
                    self._maps[path] = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if st.st_size else b""
            except OSError as e:
                raise ModelDataError(f"cannot read external data file {path!r}: {e.strerror or e}") from None
        return self._maps[path]


def initializer_array(tensor, external: ExternalData) -> np.ndarray:
    """``tensor``'s value as an array of its dims (ONNX's numpy dtype for its type),
    after checking that its data hold exactly as many elements as the dims say."""
    from onnx import TensorProto, helper, numpy_helper
    from onnx.external_data_helper import uses_external_data
    name, dims = tensor.name, tuple(tensor.dims)
    count = math.prod(dims)
    np_dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.data_type))
    if tensor.HasField("segment"):
        raise ModelDataError(f"initializer '{name}' is split into segments, which ONNX's loaders do not support")
    if uses_external_data(tensor):
        arr = external.read(tensor, np_dtype, count)
        return (arr.byteswap() if sys.byteorder == "big" else arr).reshape(dims)
    if tensor.HasField("raw_data"):
        _expect_count(name, tensor, count, len(tensor.raw_data), np_dtype.itemsize, "bytes of raw_data")
    else:
        field = helper.tensor_dtype_to_field(tensor.data_type)
        per = 2 if tensor.data_type in (TensorProto.COMPLEX64, TensorProto.COMPLEX128) else 1
        _expect_count(name, tensor, count, len(getattr(tensor, field)), per, f"entries of {field}")
    try:
        return numpy_helper.to_array(tensor)
    except (ValueError, TypeError) as e:
        raise ModelDataError(f"initializer '{name}' ({list(dims)}): {e}") from None


def _expect_count(name: str, tensor, count: int, have: int, per: int, what: str) -> None:
    if have != count * per:
        raise ModelDataError(f"initializer '{name}' declares dims {list(tensor.dims)} ({count} elements, "
                             f"{count * per} {what}), but its data hold {have} {what}")
