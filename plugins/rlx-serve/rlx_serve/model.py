"""What a deployment serves: the graph (an RLX ``Graph``, a graph ``.json`` file or an ONNX
model), its weights, and the request signature -- input and output names, dims and dtypes,
and the batch dimension when requests are batched.

Everything here runs once in the driver, so a model that does not import, weights that do
not fit, or a batching setting the graph cannot honour fail ``deployment()`` at once rather
than in every replica; the replicas get the result as the graph's JSON plus arrays.

Batching works on axis 0: a graph "has a batch dimension" when every input and output has
the same leading dim ``B`` and rows are computed independently (an ONNX model says so by a
symbolic leading dim on every input; an RLX graph cannot, so its batching is asked for).
A request then carries ``1 <= r <= B`` rows; requests are packed into runs of at most ``B``
rows, concatenated, padded with zeros to ``B`` and their outputs split back by rows.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Mapping

import numpy as np

from rlx_core.errors import ArgumentTypeError, ParamError
from rlx_core.ir.dtypes import DType
from rlx_core.ir.graph import Graph
from rlx_core.runtime.session import check_value

from .errors import BadRequestError, ServeConfigError

__all__ = ["Batching", "TensorSpec", "Signature", "ModelSpec", "Run", "load_model", "DEFAULT_ONNX_BATCH"]

DEFAULT_ONNX_BATCH = 8  # rows per run for an ONNX model with a symbolic batch dim, unless given


@dataclass(frozen=True)
class Batching:
    """Request batching (``serve.batch``) for graphs with a batch dimension: requests that
    arrive within ``wait_timeout_s`` of the first are gathered, up to ``max_batch_size``
    requests, and run ``max_batch_size`` rows at a time. ``max_batch_size`` None: the
    graph's leading dim (an RLX graph) or :data:`DEFAULT_ONNX_BATCH` (an ONNX model, whose
    symbolic batch dim is then fixed to it)."""

    max_batch_size: int | None = None
    wait_timeout_s: float = 0.005

    def __post_init__(self):
        size = self.max_batch_size
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
            raise ServeConfigError(f"Batching.max_batch_size must be an integer >= 1 (or None), got {size!r}")
        wait = self.wait_timeout_s
        if isinstance(wait, bool) or not isinstance(wait, (int, float)) or not 0 <= wait <= 60:
            raise ServeConfigError(f"Batching.wait_timeout_s must be seconds in [0, 60], got {wait!r}")


@dataclass(frozen=True)
class TensorSpec:
    """One input or output: its name, declared dims and dtype label (``"f32"``)."""

    name: str
    dims: tuple[int, ...]
    dtype: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "dims": list(self.dims), "dtype": self.dtype}


@dataclass(frozen=True)
class Run:
    """One graph run of a batch: which requests it serves (indices), their row counts, and
    the feeds (their rows concatenated and padded to the batch)."""

    members: tuple[int, ...]
    rows: tuple[int, ...]
    feeds: dict[str, np.ndarray]


@dataclass(frozen=True)
class Signature:
    """The inputs and outputs requests see; ``batch`` is the rows per run when requests are
    batched along axis 0 (None: every request gives the full declared dims)."""

    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    batch: int | None = None

    @classmethod
    def of(cls, graph: Graph, batch: int | None = None) -> "Signature":
        inputs = tuple(TensorSpec(n.attrs["name"], tuple(n.attrs["dims"]), str(n.attrs["dtype"]))
                       for n in graph.input_nodes)
        outputs = tuple(TensorSpec(name, tuple(graph.shape_of(ref).dims), str(graph.shape_of(ref).dtype))
                        for name, ref in zip(graph.output_names, graph.outputs))
        if batch is not None:
            wrong = [f"{kind} '{t.name}' {list(t.dims)}" for kind, specs in (("input", inputs), ("output", outputs))
                     for t in specs if not t.dims or t.dims[0] != batch]
            if wrong:
                raise ServeConfigError(f"graph '{graph.name}' cannot batch {batch} rows along axis 0: every input "
                                       f"and output needs leading dim {batch}; not so: {', '.join(wrong)}")
        return cls(inputs, outputs, batch)

    def to_dict(self) -> dict[str, Any]:
        return {"inputs": [t.to_dict() for t in self.inputs], "outputs": [t.to_dict() for t in self.outputs],
                "batch": self.batch}

    # --- requests ---------------------------------------------------------------------------
    def check(self, inputs: Any) -> dict[str, np.ndarray]:
        """The request's inputs as arrays of the declared dtypes and dims (``r`` rows when
        batching), or BadRequestError naming what was expected and what was given."""
        if not isinstance(inputs, Mapping):
            raise BadRequestError(f"inputs must map input names to arrays, got {type(inputs).__name__}")
        names = [t.name for t in self.inputs]
        unknown = [k for k in inputs if k not in names]
        missing = [n for n in names if n not in inputs]
        if unknown or missing:
            raise BadRequestError(f"inputs: expected {names}, got {list(inputs)}"
                                  + (f"; unknown: {unknown}" if unknown else "")
                                  + (f"; missing: {missing}" if missing else ""))
        if self.batch is None:
            return {t.name: check_value(_node(t, t.dims), inputs[t.name], BadRequestError, "input", False)
                    for t in self.inputs}
        out, rows = {}, {}
        for t in self.inputs:
            value = inputs[t.name]
            arr = value if isinstance(value, np.ndarray) else _as_array(value, t)
            r = arr.shape[0] if arr.ndim == len(t.dims) and tuple(arr.shape[1:]) == t.dims[1:] else None
            if r is None or not 1 <= r <= self.batch:
                want = ", ".join(["r", *map(str, t.dims[1:])])
                raise BadRequestError(f"input '{t.name}': expected dims [{want}] with 1 <= r <= {self.batch} "
                                      f"rows, got {list(arr.shape)}")
            out[t.name] = check_value(_node(t, (r, *t.dims[1:])), arr, BadRequestError, "input", False)
            rows[t.name] = r
        if len(set(rows.values())) > 1:
            raise BadRequestError(f"inputs must have the same number of rows, got {rows}")
        return out

    def rows(self, feeds: Mapping[str, np.ndarray]) -> int:
        return feeds[self.inputs[0].name].shape[0]

    def probe(self) -> dict[str, np.ndarray]:
        """Zeros of every input's full declared dims: the health check's run."""
        return {t.name: np.zeros(t.dims, DType.of(t.dtype).np) for t in self.inputs}

    def pack(self, requests: list[dict[str, np.ndarray]]) -> list[Run]:
        """Checked batched requests packed in order into runs of at most ``batch`` rows."""
        groups: list[list[int]] = []
        filled = self.batch
        for i, feeds in enumerate(requests):
            r = self.rows(feeds)
            if filled + r > self.batch:
                groups.append([])
                filled = 0
            groups[-1].append(i)
            filled += r
        runs = []
        for members in groups:
            rows = tuple(self.rows(requests[i]) for i in members)
            feeds = {}
            for t in self.inputs:
                stacked = np.zeros(t.dims, DType.of(t.dtype).np)
                np.concatenate([requests[i][t.name] for i in members], axis=0, out=stacked[:sum(rows)])
                feeds[t.name] = stacked
            runs.append(Run(tuple(members), rows, feeds))
        return runs

    def split(self, outputs: Mapping[str, np.ndarray], rows: tuple[int, ...]) -> list[dict[str, np.ndarray]]:
        """One run's outputs cut back into each member's rows (copies: a backend may reuse
        its output buffers on the next run)."""
        parts, start = [], 0
        for r in rows:
            parts.append({t.name: np.array(outputs[t.name][start:start + r], copy=True) for t in self.outputs})
            start += r
        return parts


def _node(spec: TensorSpec, dims: tuple[int, ...]) -> SimpleNamespace:
    """What ``check_value`` reads of an input node, with the dims this request must have."""
    return SimpleNamespace(attrs={"name": spec.name, "dims": dims, "dtype": DType.of(spec.dtype)})


def _as_array(value: Any, spec: TensorSpec) -> np.ndarray:
    """A list (JSON) takes the declared dtype; a typed buffer keeps its own."""
    try:
        if isinstance(value, (list, tuple, int, float, bool)):
            return np.asarray(value, dtype=DType.of(spec.dtype).np)
        return np.asarray(value)
    except (TypeError, ValueError) as e:
        raise BadRequestError(f"input '{spec.name}': cannot read {type(value).__name__} as {spec.dtype} rows: {e}") \
            from None


@dataclass(frozen=True)
class ModelSpec:
    """The served model as replicas receive it."""

    name: str
    graph_json: str
    params: dict[str, np.ndarray]
    signature: Signature
    batching: Batching | None

    def graph(self) -> Graph:
        return Graph.from_json(self.graph_json)


def load_model(source: Any, *, weights: "Mapping[str, Any] | str | os.PathLike | None" = None,
               input_shapes: Mapping[str, Any] | None = None,
               batching: "Batching | bool | None" = None) -> ModelSpec:
    """Import ``source`` (a Graph, a ``.json`` graph or an ``.onnx`` model) with ``weights``
    (a mapping or an ``.npz`` path; for ONNX they replace initializers of those names).

    ``batching`` None: on for an ONNX model whose inputs all have a symbolic leading dim,
    off otherwise; True or a :class:`Batching`: on (the graph must have a batch dim);
    False: off. ``input_shapes`` fixes other symbolic dims of an ONNX model."""
    if batching is True:
        batching = Batching()
    elif batching is not None and batching is not False and not isinstance(batching, Batching):
        raise ServeConfigError(f"batching must be a Batching, True, False or None, got {batching!r}")
    path = os.fspath(source) if isinstance(source, (str, os.PathLike)) else None
    if input_shapes and not (path or "").endswith(".onnx"):
        raise ServeConfigError("input_shapes applies to ONNX models only (an RLX graph's dims are fixed)")
    if isinstance(source, Graph):
        graph, params = source, {}
    elif path is None:
        raise ArgumentTypeError(f"deployment() serves a Graph or the path of an .onnx / graph .json file, "
                                f"got {type(source).__name__}")
    elif path.endswith(".onnx"):
        graph, params, batching = _import_onnx(path, input_shapes, batching)
    elif path.endswith(".json"):
        graph, params = _read_graph_json(path), {}
    else:
        raise ServeConfigError(f"cannot serve {path!r}: expected an .onnx model or a graph .json file")
    graph.verify()
    params = {**params, **_checked_weights(graph, weights)}
    missing = [n.attrs["name"] for n in graph.param_nodes if n.attrs["name"] not in params]
    if missing:
        raise ParamError(f"graph '{graph.name}': no weights given for params {missing} (pass weights=...)")
    batch = None
    if batching not in (None, False):
        batch = _leading_dim(graph)
        if batching.max_batch_size not in (None, batch):
            raise ServeConfigError(f"graph '{graph.name}' runs {batch} rows (its leading dim); "
                                   f"Batching.max_batch_size={batching.max_batch_size} cannot differ from it")
        batching = Batching(batch, batching.wait_timeout_s)
    else:
        batching = None
    return ModelSpec(graph.name, graph.to_json(), params, Signature.of(graph, batch), batching)


def _read_graph_json(path: str) -> Graph:
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        raise ServeConfigError(f"cannot read graph file {path!r}: {e}") from None
    return Graph.from_json(text)


def _import_onnx(path: str, input_shapes, batching):
    """Import an ONNX model; with batching on (or None and a symbolic leading dim on every
    input) that dim is fixed to the batch size."""
    from rlx_core.frontends.onnx import load_onnx, require_onnx
    onnx = require_onnx()
    try:
        proto = onnx.load(path)
    except Exception as e:  # noqa: BLE001 -- onnx raises many kinds; the message says which
        raise ServeConfigError(f"cannot read ONNX model {path!r}: {e}") from None
    shapes = {k: tuple(v) for k, v in (input_shapes or {}).items()}
    initializers = {i.name for i in proto.graph.initializer}
    runtime = [vi for vi in proto.graph.input if vi.name not in initializers]
    symbolic = [vi.name for vi in runtime if vi.name not in shapes and _symbolic_leading(vi)]
    if batching is not False and runtime and len(symbolic) == len(runtime):
        batching = batching or Batching()
        rows = batching.max_batch_size or DEFAULT_ONNX_BATCH
        for vi in runtime:
            shapes[vi.name] = (rows, *(d.dim_value for d in vi.type.tensor_type.shape.dim[1:]))
    elif batching is None:
        batching = False
    model = load_onnx(proto, input_shapes=shapes, name=os.path.splitext(os.path.basename(path))[0])
    return model.graph, dict(model.params), batching


def _symbolic_leading(vi) -> bool:
    """Only the leading dim of this ONNX input is symbolic."""
    t = vi.type.tensor_type
    dims = list(t.shape.dim) if t.HasField("shape") else []
    return bool(dims) and not dims[0].HasField("dim_value") and all(d.HasField("dim_value") for d in dims[1:])


def _leading_dim(graph: Graph) -> int:
    dims = {tuple(n.attrs["dims"])[:1] for n in graph.input_nodes}
    if len(dims) != 1 or dims == {()}:
        raise ServeConfigError(f"graph '{graph.name}' has no batch dim to batch on: its inputs' leading dims are "
                               f"{sorted(d[0] if d else None for d in dims)}")
    return next(iter(dims))[0]


def _checked_weights(graph: Graph, weights) -> dict[str, np.ndarray]:
    """``weights`` (mapping or .npz path) checked against the graph's params now."""
    if weights is None:
        return {}
    if isinstance(weights, (str, os.PathLike)):
        try:
            with np.load(os.fspath(weights), allow_pickle=False) as npz:
                weights = {k: npz[k] for k in npz.files}
        except (OSError, ValueError) as e:
            raise ServeConfigError(f"cannot read weights {os.fspath(weights)!r} (an .npz file): {e}") from None
    if not isinstance(weights, Mapping):
        raise ArgumentTypeError(f"weights must map param names to arrays or be an .npz path, got "
                                f"{type(weights).__name__}")
    nodes = {n.attrs["name"]: n for n in graph.param_nodes}
    unknown = [k for k in weights if k not in nodes]
    if unknown:
        raise ParamError(f"graph '{graph.name}' has no params {unknown}; its params: {list(nodes) or 'none'}")
    return {k: np.array(check_value(nodes[k], v, ParamError, "param", False), copy=True) for k, v in weights.items()}
