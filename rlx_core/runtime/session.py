"""``Session(device).compile(graph) -> CompiledGraph``: the user's handle on a backend.

Compilation runs verify -> graph passes (``rlx_core.passes.pipeline``; ``explain()``
says what they changed) -> precision policy -> legalize -> backend compile. The
``CompiledGraph`` validates every name, dims and dtype that crosses it, so backends
only ever see well-formed data, and users get an ``InputError``/``ParamError`` that
names the culprit instead of a failure deep inside a kernel.
"""
from __future__ import annotations

import array
import threading
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from ..errors import (ArgumentTypeError, BackendOutputError, CapabilityError, DeviceUnavailableError, InputError,
                      InputTypeError, ParamError, RlxError, ShardingError)
from ..ir.dtypes import DType
from ..ir.graph import Graph
from ..ir.node import Node
from ..passes.legalize import legalize_for_backend
from ..passes.pipeline import PassReport, optimize
from ..passes.precision import apply_precision
from ..rng import RngOptions
from .backend import Backend, ExecutableGraph
from .device import Device, parse_device
from .memory_plan import check_fits
from .options import CompileOptions, PrecisionPolicy
from .registry import registry
from .sharding import Sharding
from .stream import Handle

__all__ = ["Session", "CompiledGraph", "Outputs", "compile_graph", "check_value", "value_from_bytes"]


class Outputs(list):
    """Run results: a list in output order, also indexable by output name."""

    def __init__(self, arrays: Iterable[Any], names: Sequence[str]):
        super().__init__(arrays)
        self.names = list(names)

    def __getitem__(self, key):
        if isinstance(key, str):
            try:
                return super().__getitem__(self.names.index(key))
            except ValueError:
                raise KeyError(f"no output named {key!r}; outputs: {self.names}") from None
        return super().__getitem__(key)

    def as_dict(self) -> dict[str, Any]:
        return dict(zip(self.names, self))


class Session:
    """Compiles graphs for one device: ``Session("cpu")``, ``Session(Device.CUDA, precision="amp-bf16")``.

    ``backend="<name>"`` pins the backend when several plugins serve the device (by
    default the registry's choice: ``RLX_BACKEND_<DEVICE>``, else the highest priority).

    ``Session()`` (no device) picks per graph at compile time, as every other entry point
    does (``rlx_core.select.resolve_device``: ``RLX_DEVICE``, else the best device the
    ``RLX_*`` policy allows, by the cost model); ``device`` and ``backend`` are then None.

    ``mesh=`` sets ``options.sharding``: a :class:`Sharding`, or ``{"axis": size, ...}``
    for data parallel over the first axis (``Session("tpu", mesh={"data": 8})``). Like the
    device it is the session's: ``compile(graph, options)`` keeps it unless ``options``
    carries a sharding of its own.
    """

    def __init__(self, device: "Device | str | None" = None, precision: "PrecisionPolicy | str | None" = None,
                 options: CompileOptions | None = None, *, backend: str | None = None,
                 mesh: "Sharding | Mapping[str, int] | None" = None):
        if device is None and backend is not None:
            raise RlxError(f"Session(backend={backend!r}) needs the device that backend serves")
        self.device = None if device is None else parse_device(device)
        self.options = options or CompileOptions()
        if precision is not None:
            self.options = self.options.with_(precision=PrecisionPolicy.of(precision))
        if mesh is not None:
            self.options = self.options.with_(sharding=Sharding.of(mesh))
        self.backend: Backend | None = None if self.device is None else registry().backend(self.device) \
            if backend is None else _named_backend(self.device, backend)

    @property
    def precision(self) -> PrecisionPolicy:
        return self.options.precision

    def compile(self, graph: Graph, options: CompileOptions | None = None) -> "CompiledGraph":
        require_graph(graph, "Session.compile")
        options = options or self.options
        if options.sharding is None and self.options.sharding is not None:
            options = options.with_(sharding=self.options.sharding)
        session = self.resolved(graph, options)
        return compile_graph(session.backend, graph, options, session.device)

    def resolved(self, graph: Graph, options: CompileOptions | None = None) -> "Session":
        """This session when it names a device; for ``Session()``, a session on the device
        the shared pick (policy + cost model) chooses for ``graph``."""
        if self.device is not None:
            return self
        from ..select.devices import resolve_device
        return Session(resolve_device(graph, options=options or self.options), options=self.options)

    def __repr__(self) -> str:
        where = "auto" if self.device is None else f"{self.device}, backend={self.backend.name}"
        return f"Session({where}, precision={self.precision.value})"


def _named_backend(device: Device, name: str) -> Backend:
    """The backend called ``name`` serving ``device``, or DeviceUnavailableError saying why not."""
    entries = registry().entries.get(device.label, [])
    entry = next((e for e in entries if e.name == name), None)
    if entry is None:
        raise DeviceUnavailableError(f"no backend named '{name}' serves device '{device.label}'; backends "
                                     f"serving it: {', '.join(e.name for e in entries) or 'none'}")
    avail = entry.availability()
    if not avail.ok:
        raise DeviceUnavailableError(f"device '{device.label}' (backend '{name}') is not available: "
                                     f"{avail.reason}")
    return entry.get()


def compile_graph(backend: Backend, graph: Graph, options: CompileOptions, device: Device | None = None
                  ) -> "CompiledGraph":
    """The compile pipeline shared by Session, FlexibleSession and the multi-device runners."""
    require_graph(graph, "compile_graph")
    graph.verify()
    if options.sharding is not None and "sharding" not in backend.advisory_capabilities():
        raise ShardingError(f"backend '{backend.name}' ({backend.device}) cannot shard a graph over devices; "
                            f"CompileOptions(sharding=...) / Session(mesh=...) needs a backend with the "
                            f"'sharding' capability (tpu)")
    optimized, report = optimize(graph, options.passes)
    lowered = apply_precision(optimized, options.precision)
    legalize_for_backend(lowered, backend, registry().op_kernels(backend.name))
    check_fits(lowered, backend, device or backend.device)
    exe = backend.compile(lowered, options)
    if not isinstance(exe, ExecutableGraph):
        raise RlxError(f"backend '{backend.name}' returned {type(exe).__name__} from compile, "
                       f"not an ExecutableGraph")
    compiled = CompiledGraph(graph, exe, device or backend.device, backend.name, options)
    compiled.pass_report = report
    return compiled


def require_graph(graph: Any, where: str) -> None:
    """ArgumentTypeError unless ``graph`` is a Graph (a path or JSON text is not one)."""
    if not isinstance(graph, Graph):
        raise ArgumentTypeError(f"{where}(graph=...) takes an rlx_core.Graph, got {_describe(graph)} "
                                f"(load a saved graph with Graph.from_json, a model with rlx_core.frontends)")


class CompiledGraph:
    """A graph compiled for one device: set params, run, read outputs.

    Inputs and params must have the declared dtype (a wrong dtype is an error, not a
    silent cast: convert with ``.astype``) and either the declared dims or, as in the
    original's flat slices, one dimension holding exactly the declared number of
    elements (read in C order). Python lists and scalars are converted to the declared
    dtype; ``array.array``, memoryviews and tensors keep their own element type. Params
    keep their values across runs.

    Threads: ``run`` may be called from any number of threads at once. Inputs staged with
    ``set_input`` belong to the thread that staged them (each thread's next ``run`` reads
    its own and no other's), so one compiled graph can serve many threads either way.
    Params and rng settings are shared: set them before the threads start running.
    """

    def __init__(self, graph: Graph, executable: ExecutableGraph, device: Device, backend: str,
                 options: CompileOptions):
        self.graph = graph
        self.executable = executable
        self.device = device
        self.backend = backend
        self.options = options
        self._inputs: dict[str, Node] = {n.attrs["name"]: n for n in graph.input_nodes}
        self._params: dict[str, Node] = {n.attrs["name"]: n for n in graph.param_nodes}
        self._unset_params: set[str] = set(self._params)
        # name -> (dims, numpy dtype): an input matching it exactly takes the fast path in run
        self._input_specs = {name: (tuple(n.attrs["dims"]), n.attrs["dtype"].np, n.attrs["dtype"])
                             for name, n in self._inputs.items()}
        self._device_arrays = "dlpack" in executable.capabilities  # takes DLPack arrays as they are
        self._local = threading.local()  # .staged: this thread's set_input values
        # (dims, numpy dtype, DType) per output: what run checks the backend's results against
        self._output_specs = [(s.dims, s.dtype.np, s.dtype) for s in graph.output_shapes]
        self._rng = options.rng
        self._lock = threading.Lock()
        self.output_names = graph.output_names
        self.output_shapes = graph.output_shapes

    # --- introspection ----------------------------------------------------------------
    @property
    def input_names(self) -> list[str]:
        return list(self._inputs)

    @property
    def param_names(self) -> list[str]:
        return list(self._params)

    @property
    def capabilities(self) -> frozenset[str]:
        return frozenset(self.executable.capabilities)

    @property
    def rng(self) -> RngOptions:
        return self._rng

    pass_report: "PassReport | None" = None  # set by compile_graph

    def explain(self) -> str:
        """What each graph pass changed before the backend compiled the graph (pass name,
        node counts, nodes removed, rewritten or fused, named as ``Graph.describe`` does)."""
        if self.pass_report is None:
            return f"graph '{self.graph.name}': compiled without the graph passes"
        return self.pass_report.text()

    def __repr__(self) -> str:
        return (f"CompiledGraph('{self.graph.name}' on {self.device} via {self.backend}, "
                f"inputs={self.input_names}, params={self.param_names}, outputs={self.output_names})")

    # --- params -------------------------------------------------------------------------
    def set_param(self, name: str, value: Any) -> None:
        node = self._lookup(self._params, name, "param", ParamError)
        arr = check_value(node, value, ParamError, "param", self._device_arrays)
        self.executable.set_param(name, arr)
        self._unset_params.discard(name)

    def set_params(self, values: Mapping[str, Any]) -> None:
        for k, v in values.items():
            self.set_param(k, v)

    def set_param_typed(self, name: str, data: bytes, dtype: "DType | str") -> None:
        """Set a param from raw bytes of ``dtype``, widened or narrowed to the declared dtype."""
        node = self._lookup(self._params, name, "param", ParamError)
        self.set_param(name, value_from_bytes(node, data, dtype, ParamError, "param"))

    def load_weights(self, weights, rename=None, *, strict: bool = True, **options) -> list[str]:
        """Set every param from a weight file or ``rlx_core.weights`` loader (safetensors,
        GGUF, .npz); every tensor is checked first and a file that does not fit sets
        nothing. See :func:`rlx_core.weights.load_weights`."""
        from ..weights import load_weights
        return load_weights(self, weights, rename, strict=strict, **options)

    # --- inputs and runs ------------------------------------------------------------------
    def set_input(self, name: str, value: Any) -> None:
        """Stage an input for the next ``run`` (inputs given to ``run`` take precedence)."""
        node = self._lookup(self._inputs, name, "input", InputError)
        staged = getattr(self._local, "staged", None)
        if staged is None:
            staged = self._local.staged = {}
        staged[name] = check_value(node, value, InputError, "input", self._device_arrays)

    def run(self, inputs: "Mapping[str, Any] | Iterable[tuple[str, Any]] | None" = None, *,
            out: Sequence[np.ndarray] | None = None) -> Outputs:
        """Run once. ``inputs`` is a mapping or (name, array) pairs; inputs this thread
        staged fill the rest. ``out`` gives one preallocated host array per output to write
        into. Outputs whose count, dims or dtype disagree with the graph raise
        BackendOutputError (a backend failure: fallback chains try the next device)."""
        feeds, out = self._feeds(inputs, out)
        return self._outputs(self.executable.run(feeds, out))

    def submit(self, inputs: "Mapping[str, Any] | Iterable[tuple[str, Any]] | None" = None) -> Handle:
        """Queue one run and return its :class:`~rlx_core.runtime.stream.Handle` at once:
        ``handle.done()``, ``handle.wait()`` / ``result()`` -> the ``Outputs`` ``run`` gives.
        Inputs are checked here (errors raise now) and captured (reuse the arrays at once);
        an error of the run itself raises at ``wait()``. Backends with ``async_pipeline``
        queue it on the device, the others run it before returning."""
        feeds, _ = self._feeds(inputs, None)
        return Handle(self.executable.submit(feeds), self._outputs)

    def clone(self) -> "CompiledGraph":
        """A copy that shares the compiled code but owns its buffers and params (starting
        from this one's values): e.g. one per serving thread, without compiling again.
        CapabilityError on backends without the ``clone`` capability."""
        if "clone" not in self.capabilities:
            raise CapabilityError(f"backend '{self.backend}' ({self.device}) cannot clone a compiled graph "
                                  f"(no 'clone' capability); compile the graph again instead")
        twin = CompiledGraph(self.graph, self.executable.clone(), self.device, self.backend, self.options)
        twin._unset_params = set(self._unset_params)
        twin._rng = self._rng
        twin.pass_report = self.pass_report
        return twin

    def _outputs(self, results: Sequence[Any]) -> Outputs:
        return Outputs(self._checked_outputs(results), self.output_names)

    def _feeds(self, inputs, out: Sequence[np.ndarray] | None) -> tuple[dict, list[np.ndarray] | None]:
        """``run``'s arguments checked: every input (given or staged by this thread) as the
        backend takes it, params all set, ``out`` valid; this thread's staged inputs are
        consumed."""
        staged = getattr(self._local, "staged", None)
        feeds = dict(staged) if staged else {}
        given = inputs if type(inputs) is dict else _feed_dict(inputs)
        specs = self._input_specs
        for name, value in given.items():
            spec = specs.get(name)
            # Fast paths: a C-contiguous numpy array of exactly the declared dims and dtype,
            # or a device array of the declared dims and dtype (torch's, JAX's, CuPy's) for
            # a backend that takes them; anything else is checked and converted by check_value.
            if spec is not None:
                if type(value) is np.ndarray:
                    if value.dtype == spec[1] and value.shape == spec[0] and value.flags.c_contiguous:
                        feeds[name] = value
                        continue
                elif self._device_arrays and not isinstance(value, np.ndarray) and hasattr(value, "__dlpack__") \
                        and _dtype_of(value) is spec[2] \
                        and tuple(value.shape) == spec[0]:
                    feeds[name] = value
                    continue
            node = self._lookup(self._inputs, name, "input", InputError)
            feeds[name] = check_value(node, value, InputError, "input", self._device_arrays)
        if len(feeds) != len(specs):
            missing = [n for n in self._inputs if n not in feeds]
            raise InputError(f"missing input(s) {missing} for graph '{self.graph.name}'; expected "
                             + ", ".join(f"{n}: {list(self._inputs[n].attrs['dims'])} "
                                         f"{self._inputs[n].attrs['dtype']}" for n in missing))
        if self._unset_params:
            unset = [n for n in self._params if n in self._unset_params]
            raise ParamError(f"param(s) {unset} of graph '{self.graph.name}' were never set; "
                             f"call set_param first")
        if out is not None:
            out = self._check_out(out)
        if staged:
            staged.clear()
        return feeds, out

    def __call__(self, inputs=None, **kw):
        return self.run(inputs, **kw)

    def run_typed(self, inputs: Mapping[str, tuple[bytes, "DType | str"]]) -> list[tuple[bytes, str]]:
        """Bytes in, bytes out: ``{name: (bytes, dtype)}`` -> ``[(bytes, dtype_label), ...]``."""
        if not isinstance(inputs, Mapping):
            raise InputTypeError(f"run_typed(inputs=...) takes a mapping of input name -> (bytes, dtype), "
                                 f"got {_describe(inputs)}")
        feeds = {}
        for name, item in inputs.items():
            if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], (bytes, bytearray, memoryview))):
                raise InputTypeError(f"run_typed(inputs=...): input {name!r} must be a (bytes, dtype) pair, "
                                     f"got {_describe(item)}")
            data, dt = item
            node = self._lookup(self._inputs, name, "input", InputError)
            feeds[name] = value_from_bytes(node, data, dt, InputError, "input")
        outs = self.run(feeds)
        return [(np.ascontiguousarray(o).tobytes(), DType.of(o.dtype).value) for o in map(np.asarray, outs)]

    def set_rng(self, rng: RngOptions) -> None:
        """Re-seed (or change the mode of) in-graph rng ops without recompiling."""
        if not isinstance(rng, RngOptions):
            raise RlxError(f"set_rng takes RngOptions, got {type(rng).__name__}")
        self._rng = rng
        self.executable.set_rng(rng)

    # --- helpers --------------------------------------------------------------------------
    def _lookup(self, table: dict[str, Node], name: str, what: str, err: type) -> Node:
        try:
            return table[name]
        except (KeyError, TypeError):  # TypeError: an unhashable name such as a list
            known = ", ".join(table) or "none"
            raise err(f"graph '{self.graph.name}' has no {what} named {name!r}; its {what}s: {known}") from None

    def _check_out(self, out: Sequence[np.ndarray]) -> list[np.ndarray]:
        if not isinstance(out, (list, tuple)):
            raise InputTypeError(f"run(out=...) takes a list of numpy arrays, one per output, got {_describe(out)}")
        out = list(out)
        if len(out) != len(self.output_shapes):
            raise InputError(f"out= has {len(out)} arrays, the graph has {len(self.output_shapes)} outputs")
        for i, (arr, shape) in enumerate(zip(out, self.output_shapes)):
            if not isinstance(arr, np.ndarray) or arr.shape != shape.dims or arr.dtype != shape.dtype.np \
                    or not arr.flags.writeable:
                err = InputError if isinstance(arr, np.ndarray) else InputTypeError
                raise err(f"out[{i}] ({self.output_names[i]}) must be a writable numpy array of "
                          f"{list(shape.dims)} {shape.dtype}, got {_describe(arr)}")
        return out

    def _checked_outputs(self, results: Sequence[Any]) -> Sequence[Any]:
        """``results`` if they match the graph's outputs in count, dims and dtype (numpy
        results of the declared dims and dtype pass on one comparison each), else
        BackendOutputError naming the backend and the first mismatch."""
        specs = self._output_specs
        if not isinstance(results, (list, tuple)) or len(results) != len(specs):
            count = f"{len(results)} output(s)" if isinstance(results, (list, tuple)) else _describe(results)
            raise BackendOutputError(f"backend '{self.backend}' returned {count}, the graph has {len(specs)} "
                                     f"(graph '{self.graph.name}' on {self.device})")
        for i, (res, (dims, np_dtype, dtype)) in enumerate(zip(results, specs)):
            if type(res) is np.ndarray and res.shape == dims and (res.dtype is np_dtype or res.dtype == np_dtype):
                continue
            shape = getattr(res, "shape", None)
            if shape is not None and tuple(shape) == dims and _dtype_of(res) is dtype:
                continue
            got = f"{list(shape)} {_dtype_of(res) or getattr(res, 'dtype', '?')}" if shape is not None else \
                type(res).__name__
            raise BackendOutputError(f"backend '{self.backend}' returned output {i} ({self.output_names[i]}) of "
                                     f"graph '{self.graph.name}' as {got}; the graph declares {list(dims)} {dtype}")
        return results


def check_value(node: Node, value: Any, err: type, what: str, device_arrays: bool) -> Any:
    """``value`` for the input/param ``node`` (converted when it is a list or scalar; made
    C-contiguous), or ``err`` saying which dims/dtype were expected and given."""
    name, dims, dtype = node.attrs["name"], tuple(node.attrs["dims"]), node.attrs["dtype"]
    if device_arrays and not isinstance(value, np.ndarray) and hasattr(value, "__dlpack__"):
        arr = value  # a device array for a DLPack-capable backend: checked by attributes only
    elif isinstance(value, np.ndarray):
        arr = value
    elif hasattr(value, "__dlpack__") or hasattr(value, "__array__") or isinstance(value, (memoryview, array.array)):
        arr = _host_array(value, name, what, err)  # a torch CPU tensor, array.array, memoryview: typed
    else:
        try:  # a list or scalar takes the declared dtype
            arr = np.asarray(value, dtype=dtype.np)
        except (TypeError, ValueError) as e:
            raise err(f"{what} '{name}': cannot convert {type(value).__name__} to {dtype}: {e}") from None
    got_dt = _dtype_of(arr)
    if tuple(arr.shape) != dims:
        count = int(np.prod(dims, dtype=np.int64))
        if len(arr.shape) == 1 and arr.shape[0] == count:
            arr = arr.reshape(dims)  # a flat buffer of the declared element count, read in C order
        else:
            flat = f" (a flat buffer must hold exactly {count} elements)" if len(arr.shape) == 1 else ""
            raise err(f"{what} '{name}': expected dims {list(dims)}, got {list(arr.shape)}{flat}")
    if got_dt is not dtype:
        raise err(f"{what} '{name}': expected dtype {dtype}, got {got_dt or getattr(arr, 'dtype', '?')}"
                  f" (convert with .astype({dtype.np.name!r}))")
    if isinstance(arr, np.ndarray) and not arr.flags.c_contiguous:
        arr = np.ascontiguousarray(arr)  # (not for 0-d arrays: that would make them 1-d)
    return arr


def _host_array(value: Any, name: str, what: str, err: type) -> np.ndarray:
    """A buffer-protocol or array-like object as numpy, keeping its own element type (a
    float64 ``array.array`` given for an f32 param is a dtype error, never a silent cast)."""
    try:
        return np.asarray(value)
    except (TypeError, ValueError) as e:
        raise err(f"{what} '{name}': cannot read {type(value).__name__} as an array: {e}") from None


_DTYPES: dict[Any, "DType | None"] = {}  # an array library's dtype object -> its DType


def _dtype_of(arr) -> DType | None:
    """The DType of a numpy, JAX, CuPy, torch or MLX array (``torch.float32``,
    ``mlx.core.float32`` name theirs after a module prefix); None if it has none.
    Memoized per dtype object: a run checks every device input and output with it, and
    working out a torch dtype the first time costs two failed conversions."""
    dt = getattr(arr, "dtype", None)
    if dt is None:
        return None  # (np.dtype(None) would be float64)
    try:
        return _DTYPES[dt]
    except (KeyError, TypeError):  # TypeError: an unhashable dtype object
        pass
    try:
        found = DType.of(np.dtype(dt))
    except Exception:
        try:
            found = DType.of(str(dt).rsplit(".", 1)[-1])
        except Exception:
            found = None
    try:
        _DTYPES[dt] = found
    except TypeError:
        pass
    return found


def value_from_bytes(node: Node, data: bytes, dtype, err: type, what: str) -> np.ndarray:
    """Raw bytes of ``dtype`` as the value of ``node``, widened or narrowed to its dtype."""
    dt = DType.of(dtype)
    name, dims = node.attrs["name"], tuple(node.attrs["dims"])
    count = int(np.prod(dims, dtype=np.int64))
    if len(data) != count * dt.itemsize:
        raise err(f"{what} '{name}': {len(data)} bytes of {dt} is {len(data) / dt.itemsize:g} values, "
                  f"expected {count} ({list(dims)})")
    arr = np.frombuffer(data, dtype=dt.np).reshape(dims)
    from ..reference.elementwise import cast_array
    return cast_array(arr, node.attrs["dtype"])


def _feed_dict(inputs: Any) -> dict:
    """``run``'s inputs (None, a mapping, or (name, value) pairs) as a dict, or InputTypeError."""
    if inputs is None:
        return {}
    if isinstance(inputs, Mapping):
        return dict(inputs.items())
    if isinstance(inputs, (str, bytes, np.ndarray)) or not isinstance(inputs, Iterable):
        raise InputTypeError(f"run(inputs=...) takes a mapping of input name -> array, or (name, array) "
                             f"pairs, got {_describe(inputs)}")
    feeds = {}
    for i, pair in enumerate(inputs):
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2 and isinstance(pair[0], str)):
            raise InputTypeError(f"run(inputs=...): item {i} must be a (name, array) pair, got {_describe(pair)}")
        feeds[pair[0]] = pair[1]
    return feeds


def _describe(a) -> str:
    if isinstance(a, np.ndarray):
        return f"{list(a.shape)} {a.dtype}" + ("" if a.flags.writeable else " (read-only)")
    text = repr(a)
    return f"{type(a).__name__} {text if len(text) <= 40 else text[:37] + '...'}"
