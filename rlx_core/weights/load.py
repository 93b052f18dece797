"""Setting a graph's params from a :class:`WeightLoader`: every tensor is checked first,
and a file that does not fit loads nothing.

``read_weights`` pairs the file's tensors with the graph's params (after ``rename``),
checks dims and dtypes from the file's headers alone, and only then reads the data;
``load_weights`` sets the result on a compiled graph. Either one raises one
:class:`WeightMismatchError` that lists every missing, extra and mismatched tensor.
"""
from __future__ import annotations

import os
from typing import Callable, Mapping

import numpy as np

from ..errors import ParamError
from .base import TensorInfo, WeightLoader, WeightsError

__all__ = ["WeightMismatchError", "read_weights", "load_weights", "as_loader"]

Rename = Mapping[str, "str | None"] | Callable[[str], "str | None"] | None


class WeightMismatchError(WeightsError, ParamError):
    """The file's tensors do not fit the graph's params; nothing was loaded.

    ``missing``: ``[(param, expected)]``; ``extra``: ``[(tensor, found)]``;
    ``mismatched``: ``[(param, expected, found)]`` (descriptions such as ``[4, 2] f32``).
    """

    def __init__(self, source: str, graph: str, missing, extra, mismatched, notes=()):
        self.missing, self.extra, self.mismatched = list(missing), list(extra), list(mismatched)
        lines = [f"  missing  {n}: expected {e}" + (f"; {notes[n]}" if n in notes else "") for n, e in self.missing]
        lines += [f"  extra    {n}: {f} (no such param)" for n, f in self.extra]
        lines += [f"  mismatch {n}: expected {e}, found {f}" for n, e, f in self.mismatched]
        hint = "\n(load_weights(..., strict=False) ignores extra tensors)" if self.extra else ""
        super().__init__(f"weights from {source} do not fit graph '{graph}' (nothing was loaded):\n"
                         + "\n".join(lines) + hint)


def as_loader(weights: "WeightLoader | str | os.PathLike", **options) -> WeightLoader:
    """``weights`` itself when it is a loader, else ``open_weights(weights, **options)``."""
    if isinstance(weights, WeightLoader):
        if options:
            raise WeightsError(f"options {sorted(options)} apply when opening a file, not to a loader")
        return weights
    if isinstance(weights, (str, os.PathLike)):
        from .files import open_weights
        return open_weights(weights, **options)
    raise WeightsError(f"expected a WeightLoader or a file path, got {type(weights).__name__}")


def read_weights(graph, loader: WeightLoader, rename: Rename = None, *, strict: bool = True
                 ) -> dict[str, np.ndarray]:
    """``{param: array}`` for every param of ``graph`` (a Graph or CompiledGraph) from
    ``loader``, after checking all of them.

    ``rename`` maps a file's tensor name to a param name: a mapping (names it lacks stay
    as they are; a value of None skips that tensor) or a function returning the name or
    None. Every param must be given; a tensor matching no param is an error unless
    ``strict=False``. Untyped bytes (``BytesWeightLoader``) are read as the param's dtype.
    """
    graph = getattr(graph, "graph", graph)
    params = {n.attrs["name"]: n for n in graph.param_nodes}
    chosen: dict[str, str] = {}  # param -> tensor
    extra, mismatched = [], []
    for tensor in loader.names():
        param = _renamed(tensor, rename)
        if param is None:
            continue
        if param in chosen:
            mismatched.append((param, "one tensor", f"both {chosen[param]!r} and {tensor!r} rename to it"))
        elif param in params:
            chosen[param] = tensor
        elif strict:
            extra.append((tensor if param == tensor else f"{tensor} (as {param})", loader.info(tensor).describe()))
    infos = {}
    for param, tensor in chosen.items():
        info = infos[param] = loader.info(tensor)
        expected = _expected(params[param])
        if not _fits(info, params[param]):
            label = param if param == tensor else f"{param} (from {tensor})"
            mismatched.append((label, expected, info.describe()))
    missing = [(p, _expected(n)) for p, n in params.items() if p not in chosen]
    if missing or extra or mismatched:
        notes = {p: note for p, _ in missing if (note := loader.note(p))}
        raise WeightMismatchError(loader.source, graph.name, missing, extra, mismatched, notes)
    values = {}
    for param, tensor in chosen.items():
        arr = loader.tensor(tensor)
        if infos[param].dims is None:  # untyped bytes take the param's dtype
            node = params[param]
            arr = np.frombuffer(np.ascontiguousarray(arr).data, dtype=node.attrs["dtype"].np).reshape(
                tuple(node.attrs["dims"]))
        values[param] = arr
    return values


def load_weights(compiled, weights: "WeightLoader | str | os.PathLike", rename: Rename = None, *,
                 strict: bool = True, **options) -> list[str]:
    """Set every param of ``compiled`` from ``weights`` (a loader or a file path, opened
    with ``options`` and closed again; see :func:`read_weights`). Returns the params set.
    Nothing is set unless every tensor fits."""
    loader = as_loader(weights, **options)
    try:
        values = read_weights(compiled, loader, rename, strict=strict)
        compiled.set_params(values)
    finally:
        if loader is not weights:
            loader.close()
    return list(values)


def _renamed(tensor: str, rename) -> str | None:
    if rename is None:
        return tensor
    if callable(rename):
        out = rename(tensor)
    elif isinstance(rename, Mapping):
        out = rename.get(tensor, tensor)
    else:
        raise WeightsError(f"rename must be a mapping or a function, got {type(rename).__name__}")
    if out is not None and not isinstance(out, str):
        raise WeightsError(f"rename gave {out!r} for tensor {tensor!r}; expected a param name or None")
    return out


def _expected(node) -> str:
    return f"{list(node.attrs['dims'])} {node.attrs['dtype']}"


def _fits(info: TensorInfo, node) -> bool:
    dims, dtype = tuple(node.attrs["dims"]), node.attrs["dtype"]
    if info.dims is None:
        return info.nbytes == int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    return tuple(info.dims) == dims and info.dtype == dtype.label
