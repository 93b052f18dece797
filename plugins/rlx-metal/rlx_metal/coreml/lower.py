"""RLX graph -> Core ML ML Program, built with coremltools' MIL builder (``mb``).

One MIL function ``main`` per graph, for the iOS 17 / macOS 14 opset (Core ML 7):

* **inputs**: one placeholder per graph input that a lowered node reads, named
  ``input_<i>`` (``i``: its position among the graph's inputs). f32, f16 and i32 are fed
  as they are; bool as int32 (``!= 0`` inside); i64 -- only ever index tensors here, see
  ``support`` -- as int32; a scalar as shape ``(1,)``.
* **params** are constants of the program (Core ML compiles weights in, and some ops --
  ``layer_norm``'s gamma and beta -- take constants only): the executable rebuilds the
  model after ``set_param``. Before any value is set they are zeros, which is enough to
  build and validate the program.
* **outputs**: ``output_<j>`` for graph output ``j`` computed by the program; bool as
  int32 (``!= 0`` on the host), scalars as ``(1,)``. Outputs that are graph inputs, params, constants or empty tensors never go
  through Core ML: the host returns them (a copy).
* **empty tensors** (a 0 dim) cannot exist in Core ML: they are tracked here as
  :class:`Empty`; a node with an empty input whose other inputs are known (constants,
  params) is evaluated at build time by the reference kernel (``sum`` of nothing is 0),
  ``concat`` drops empty parts, attention over no keys gives zeros.

Each node's lowering is a short composition of MIL ops whose documented definitions give
the reference's numbers; :data:`LOWERINGS` maps kinds to them and :class:`Lowered` keeps,
per node, the MIL ops it emitted and the values standing for its outputs (what
``rlx_metal.coreml.validate`` checks). With ``feeds``, graph inputs become constants, so
coremltools' value inference computes every value as the program is built (see
``validate.evaluate``).
"""
from __future__ import annotations

import contextlib
import logging
import math
import threading
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from rlx_core.errors import UnsupportedOpError
from rlx_core.ir import DType, Graph, Node, Ref, Shape
from rlx_core.ir.ops.nn import attention_visibility
from rlx_core.reference import RefContext, run_node

from .support import MAX_RANK

__all__ = ["coremltools", "quiet", "Empty", "InputBinding", "OutputBinding", "NodeRecord", "Lowered", "lower",
           "LOWERINGS", "MIL_DTYPE", "OPSET"]

BACKEND = "coreml-ane"
MIL_DTYPE = {DType.F32: "fp32", DType.F16: "fp16", DType.I32: "int32", DType.BOOL: "bool", DType.I64: "int32"}
_NP = {"fp32": np.float32, "fp16": np.float16, "int32": np.int32, "bool": np.bool_}
_LOCK = threading.RLock()


# --- coremltools, imported quietly --------------------------------------------------------------
class _NoCollect:
    """Stands in for the ``gc`` module inside ``ct.convert``, which ends every conversion
    with a full ``gc.collect()`` -- 0.2 s in a process with torch loaded, 90% of a small
    program's conversion. Skipping it changes nothing but the time."""

    @staticmethod
    def collect(*args, **kwargs) -> int:
        return 0


@contextlib.contextmanager
def quiet():
    """coremltools without its noise and its stall: import-time warnings (no Core ML
    runtime off macOS, untested torch versions), the progress bars of its pass pipelines,
    and the full garbage collection after each conversion. Restored on exit."""
    with _LOCK:
        log = logging.getLogger("coremltools")
        level = log.level
        log.setLevel(logging.ERROR)
        patched = []
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                import coremltools.converters._converters_entry as entry
                import coremltools.converters.mil.mil.passes.pass_pipeline as pipeline
            patched = [(pipeline, "tqdm", pipeline.tqdm), (entry, "gc", entry.gc)]
            pipeline.tqdm = lambda iterable, *args, **kwargs: iterable
            entry.gc = _NoCollect
            yield
        finally:
            for module, name, value in patched:
                setattr(module, name, value)
            log.setLevel(level)


def coremltools():
    """``(ct, mb, types, Function, Program)``: coremltools and its MIL builder (imported on
    first use; a few seconds)."""
    with quiet():
        import coremltools as ct
        from coremltools.converters.mil.mil import Builder as mb
        from coremltools.converters.mil.mil import Function, Program, types
    return ct, mb, types, Function, Program


def OPSET():
    return coremltools()[0].target.iOS17


# --- what a lowering produces -------------------------------------------------------------------
@dataclass(frozen=True)
class Empty:
    """A value with a 0 dim (Core ML has none): only its shape is known."""

    shape: Shape

    def array(self) -> np.ndarray:
        return np.empty(self.shape.dims, self.shape.dtype.np)


@dataclass(frozen=True)
class InputBinding:
    name: str           # graph input name
    program_name: str   # the program's input
    shape: Shape        # declared shape
    mil_dtype: str      # what the program takes
    dims: tuple         # the program input's dims (scalars: (1,))


@dataclass(frozen=True)
class OutputBinding:
    """Where graph output ``index`` comes from: ``"program"`` (``program_name``) or the host:
    ``"input"``/``"param"`` (``name``), ``"constant"`` / ``"empty"`` (``value``)."""

    index: int
    source: str
    shape: Shape
    program_name: str = ""
    name: str = ""
    value: Any = None


@dataclass
class NodeRecord:
    node: Node
    ops: list[str]    # MIL op types emitted for it, in order
    values: list      # per output: a MIL Var, or Empty, or a host constant (np.ndarray)
    folded: bool = False  # computed at build time (an empty input): no op of its own


@dataclass
class Lowered:
    graph: Graph
    program: Any                      # coremltools Program, or None when nothing runs in Core ML
    inputs: list[InputBinding]
    outputs: list[OutputBinding]
    records: dict[int, NodeRecord] = field(default_factory=dict)
    dummy_input: str | None = None    # an unused (1,) fp32 input for programs that read none

    @property
    def program_outputs(self) -> list[OutputBinding]:
        return [o for o in self.outputs if o.source == "program"]


# --- the lowering ------------------------------------------------------------------------------
def lower(graph: Graph, params: dict[str, np.ndarray] | None = None, feeds: dict[str, np.ndarray] | None = None
          ) -> Lowered:
    """The ML Program of ``graph`` (legalized for ``ane``). ``params``: values of the graph's
    params (missing ones are zeros). ``feeds``: graph inputs as constants (for evaluation
    by value inference; the program then has no inputs)."""
    with quiet():
        return _Lowerer(graph, params or {}, feeds).run()


class _Lowerer:
    def __init__(self, graph: Graph, params, feeds):
        self.ct, self.mb, self.types, self.Function, self.Program = coremltools()
        self.graph = graph
        self.params = params
        self.feeds = feeds
        self.values: dict[Ref, Any] = {}
        self.records: dict[int, NodeRecord] = {}

    # -- helpers used by the lowerings ------------------------------------------------------
    def const(self, value, dtype: str):
        return self.mb.const(val=np.asarray(value, dtype=_NP[dtype]))

    def scalar(self, value, like) -> Any:
        """A scalar constant of ``like``'s MIL dtype."""
        return self.mb.const(val=_NP[self.dtype_of(like)](value))

    def dtype_of(self, var) -> str:
        return self.types.builtin_to_string(var.dtype)

    def shape(self, ref: Ref) -> Shape:
        return self.graph.shape_of(ref)

    # -- driver ---------------------------------------------------------------------------
    def run(self) -> Lowered:
        g = self.graph
        for n in g.input_nodes + g.param_nodes:
            if len(n.outputs[0].dims) > MAX_RANK:
                raise UnsupportedOpError(BACKEND, [(g.describe(n), f"{n.kind} of rank {len(n.outputs[0].dims)}: "
                                                                   f"Core ML tensors have rank <= {MAX_RANK}")])
        used = self._used_inputs()
        inputs, placeholders = [], {}
        for i, n in enumerate(g.input_nodes):
            s = n.outputs[0]
            if n.id not in used or 0 in s.dims or self.feeds is not None:
                continue
            if s.dtype not in MIL_DTYPE:
                raise UnsupportedOpError(BACKEND, [(g.describe(n), f"input of {s.dtype}: Core ML programs take "
                                                                   f"f32, f16, i32 (bool and i64 indices converted)")])
            dtype = "int32" if s.dtype in (DType.BOOL, DType.I64) else MIL_DTYPE[s.dtype]
            dims = s.dims or (1,)
            name = f"input_{i}"
            placeholders[name] = self.mb.placeholder(shape=dims, dtype=self.types.string_to_builtin(dtype))
            inputs.append(InputBinding(n.attrs["name"], name, s, dtype, dims))
        dummy = None
        if not placeholders and self.feeds is None:
            dummy = "unused_input"
            placeholders[dummy] = self.mb.placeholder(shape=(1,), dtype=self.types.fp32)
        program = self.Program()
        with self.Function(placeholders, opset_version=OPSET()) as func:
            self.func = func
            for b in inputs:
                node = self._input_node(b.name)
                self.values[Ref(node.id)] = self._from_placeholder(func.inputs[b.program_name], b.shape)
            for node in g.nodes:
                self._lower(node)
            outputs, program_vars = self._outputs()
            if program_vars:
                func.set_outputs(program_vars)
                program.add_function("main", func)
        if not program_vars:
            program, inputs, dummy = None, [], None
        return Lowered(g, program, inputs, outputs, self.records, dummy)

    def _input_node(self, name: str) -> Node:
        return next(n for n in self.graph.input_nodes if n.attrs["name"] == name)

    def _used_inputs(self) -> set[int]:
        used = set()
        for node in self.graph.nodes:
            used.update(r.node for r in node.inputs)
        return used

    def _from_placeholder(self, var, shape: Shape):
        mb = self.mb
        if shape.dtype is DType.BOOL:
            var = mb.not_equal(x=var, y=np.int32(0))
        if not shape.dims:
            var = mb.squeeze(x=var, axes=[0])
        return var

    def _lower(self, node: Node) -> None:
        g = self.graph
        if node.kind == "input" and Ref(node.id) in self.values:
            return
        start = len(self.func.operations)
        folded = False
        if node.kind == "input":  # unused, empty, or fed as a constant
            s = node.outputs[0]
            if 0 in s.dims:
                results = [Empty(s)]
            elif self.feeds is not None:
                results = [self._constant(np.asarray(self.feeds[node.attrs["name"]]), s)]
            else:
                results = [None]  # never read
        elif node.kind == "param":
            s = node.outputs[0]
            value = self.params.get(node.attrs["name"])
            value = np.zeros(s.dims, s.dtype.np) if value is None else np.asarray(value)
            results = [Empty(s) if 0 in s.dims else self._constant(value, s) if s.dtype in MIL_DTYPE else None]
        elif all(0 in s.dims for s in node.outputs):
            results = [Empty(s) for s in node.outputs]
        else:
            args = [self.values[r] for r in node.inputs]
            if any(isinstance(a, Empty) for a in args):
                results = self._with_empty(node, args)
                folded = True
            else:
                fn = LOWERINGS.get(node.kind)
                if fn is None:
                    raise UnsupportedOpError(BACKEND, [(g.describe(node), f"op kind '{node.kind}' has no Core ML "
                                                                          f"lowering")])
                out = fn(self, node, *args)
                results = list(out) if isinstance(out, (list, tuple)) else [out]
        for i, value in enumerate(results):
            self.values[Ref(node.id, i)] = value
        ops = [op.op_type for op in list(self.func.operations)[start:]]
        self.records[node.id] = NodeRecord(node, ops, results, folded)

    def _constant(self, value: np.ndarray, shape: Shape):
        if shape.dtype not in MIL_DTYPE:
            return None
        return self.const(np.asarray(value).reshape(shape.dims), MIL_DTYPE[shape.dtype])

    def _known(self, value, shape: Shape) -> np.ndarray | None:
        """The host value of a lowered value when it is known at build time, else None."""
        if isinstance(value, Empty):
            return value.array()
        val = getattr(value, "val", None)
        if val is None or getattr(value.op, "op_type", "") != "const":
            return None
        return np.asarray(val).astype(shape.dtype.np).reshape(shape.dims)

    def _with_empty(self, node: Node, args) -> list:
        shapes = [self.shape(r) for r in node.inputs]
        known = [self._known(a, s) for a, s in zip(args, shapes)]
        if all(k is not None for k in known):
            outs = run_node(node, known, RefContext())
            return [Empty(s) if 0 in s.dims else self._constant(o, s) for o, s in zip(outs, node.outputs)]
        if node.kind == "concat":
            parts = [a for a in args if not isinstance(a, Empty)]
            return [parts[0] if len(parts) == 1 else self.mb.concat(values=parts, axis=node.attrs["axis"])]
        if node.kind == "rope" and not isinstance(args[0], Empty):  # nothing to rotate (n_rot 0)
            return [self.mb.identity(x=args[0])]
        if node.kind == "attention":  # no keys: every query row outputs zeros
            s = node.outputs[0]
            return [self.const(np.zeros(s.dims), MIL_DTYPE[s.dtype])]
        raise UnsupportedOpError(BACKEND, [(self.graph.describe(node), "an empty input next to inputs only known at "
                                                                       "run time: Core ML tensors cannot be empty")])

    def _outputs(self):
        g, mb = self.graph, self.mb
        outputs, program_vars = [], []
        for j, ref in enumerate(g.outputs):
            s = g.shape_of(ref)
            producer = g.nodes[ref.node]
            value = self.values.get(ref)
            if producer.kind == "input":
                outputs.append(OutputBinding(j, "input", s, name=producer.attrs["name"]))
            elif producer.kind == "param":
                outputs.append(OutputBinding(j, "param", s, name=producer.attrs["name"]))
            elif isinstance(value, Empty):
                outputs.append(OutputBinding(j, "empty", s, value=value.array()))
            elif self.feeds is None and self._known(value, s) is not None:
                outputs.append(OutputBinding(j, "constant", s, value=self._known(value, s)))
            else:
                var = value
                if s.dtype is DType.BOOL:
                    var = mb.cast(x=var, dtype="int32")
                if not s.dims:
                    var = mb.reshape(x=var, shape=[1])
                name = f"output_{j}"
                var = mb.identity(x=var, name=name)
                program_vars.append(var)
                outputs.append(OutputBinding(j, "program", s, program_name=name))
        return outputs, program_vars


# --- the lowerings ---------------------------------------------------------------------------------
LOWERINGS: dict[str, Callable] = {}


def lowering(*kinds: str):
    def deco(fn):
        for kind in kinds:
            LOWERINGS[kind] = fn
        return fn
    return deco


def _direct(op_name: str, **fixed):
    def fn(L, node, x):
        kwargs = {k: (v(L, x) if callable(v) else v) for k, v in fixed.items()}
        return getattr(L.mb, op_name)(x=x, **kwargs)
    return fn


for _kind, _op in {"exp": "exp", "sqrt": "sqrt", "sin": "sin", "cos": "cos", "tan": "tan", "tanh": "tanh",
                   "atan": "atan", "ceil": "ceil", "floor": "floor", "sigmoid": "sigmoid", "erf": "erf",
                   "abs": "abs", "sign": "sign"}.items():
    LOWERINGS[_kind] = _direct(_op)
# log and rsqrt add an epsilon unless told not to: 0 keeps them exact.
LOWERINGS["log"] = _direct("log", epsilon=lambda L, x: L.scalar(0, x).val)
LOWERINGS["rsqrt"] = _direct("rsqrt", epsilon=lambda L, x: L.scalar(0, x).val)
LOWERINGS["gelu"] = _direct("gelu", mode="EXACT")
LOWERINGS["gelu_tanh"] = _direct("gelu", mode="TANH_APPROXIMATION")


@lowering("reciprocal")
def _reciprocal(L, node, x):
    return L.mb.real_div(x=L.scalar(1, x), y=x)  # mb.inverse adds an epsilon


@lowering("neg")
def _neg(L, node, x):
    return L.mb.mul(x=x, y=L.scalar(-1, x))


@lowering("relu")
def _relu(L, node, x):
    if L.dtype_of(x) == "int32":
        return L.mb.maximum(x=x, y=L.scalar(0, x))
    return L.mb.relu(x=x)


@lowering("silu")
def _silu(L, node, x):
    return L.mb.mul(x=x, y=L.mb.sigmoid(x=x))


@lowering("softplus")
def _softplus(L, node, x):
    """max(x, 0) + log(1 + exp(-|x|)): no overflow for large x (log(1 + exp(x)) has one)."""
    mb = L.mb
    tail = mb.log(x=mb.add(x=L.scalar(1, x), y=mb.exp(x=mb.mul(x=mb.abs(x=x), y=L.scalar(-1, x)))),
                  epsilon=L.scalar(0, x).val)
    return mb.add(x=mb.relu(x=x), y=tail)


_BINARY = {"add": "add", "sub": "sub", "mul": "mul", "div": "real_div", "max": "maximum", "min": "minimum",
           "lt": "less", "le": "less_equal", "gt": "greater", "ge": "greater_equal",
           "logical_and": "logical_and", "logical_or": "logical_or", "logical_xor": "logical_xor"}
for _kind, _op in _BINARY.items():
    LOWERINGS[_kind] = (lambda op: lambda L, node, a, b: getattr(L.mb, op)(x=a, y=b))(_op)


@lowering("eq", "ne")
def _equality(L, node, a, b):
    mb = L.mb
    if L.dtype_of(a) == "bool":
        differ = mb.logical_xor(x=a, y=b)
        return differ if node.kind == "ne" else mb.logical_not(x=differ)
    return (mb.equal if node.kind == "eq" else mb.not_equal)(x=a, y=b)


@lowering("logical_not")
def _not(L, node, x):
    return L.mb.logical_not(x=x)


@lowering("pow")
def _pow(L, node, a, b):
    """pow of |a| (defined everywhere), with the sign and NaN of a negative base restored
    as C's pow defines them: an integer exponent keeps (even) or flips (odd) the sign,
    any other exponent gives NaN. (Metal's pow is undefined for negative bases.)"""
    mb = L.mb
    r = mb.pow(x=mb.abs(x=a), y=b)
    is_int = mb.equal(x=mb.floor(x=b), y=b)
    half = mb.mul(x=b, y=L.scalar(0.5, b))
    odd = mb.logical_and(x=is_int, y=mb.not_equal(x=mb.floor(x=half), y=half))
    signed = mb.select(cond=odd, a=mb.mul(x=r, y=L.scalar(-1, r)), b=r)
    negative = mb.select(cond=is_int, a=signed, b=L.scalar(np.nan, r))
    return mb.select(cond=mb.less(x=a, y=L.scalar(0, a)), a=negative, b=r)


@lowering("where")
def _where(L, node, c, a, b):
    # coremltools types select's result by a and b alone: give a the full result dims.
    dims = list(node.outputs[0].dims)
    if list(a.shape) != dims:
        a = _broadcast_to(L, a, dims)
    return L.mb.select(cond=c, a=a, b=b)


def _broadcast_to(L, x, target: list[int]):
    """``numpy.broadcast_to(x, target)`` as reshape + tile (or nothing)."""
    mb = L.mb
    dims = list(x.shape)
    if len(dims) < len(target):
        dims = [1] * (len(target) - len(dims)) + dims
        x = mb.reshape(x=x, shape=dims if dims else np.zeros(0, np.int32))
    reps = [t if d == 1 else 1 for d, t in zip(dims, target)]
    if all(r == 1 for r in reps):
        return mb.identity(x=x)
    return mb.tile(x=x, reps=reps)


@lowering("cast")
def _cast(L, node, x):
    mb = L.mb
    src, to = L.dtype_of(x), MIL_DTYPE[node.attrs["to"]]
    if src == to:
        return mb.identity(x=x)
    if to == "bool":
        return mb.not_equal(x=x, y=L.scalar(0, x))
    return mb.cast(x=x, dtype=to)  # bool -> 0/1; float -> int truncates; f32 <-> f16 rounds to nearest even


@lowering("matmul")
def _matmul(L, node, a, b):
    mb = L.mb
    a_vec, b_vec = len(a.shape) == 1, len(b.shape) == 1
    if a_vec:
        a = mb.expand_dims(x=a, axes=[0])
    if b_vec:
        b = mb.expand_dims(x=b, axes=[-1])
    out = mb.matmul(x=a, y=b)
    if a_vec or b_vec:
        dims = list(node.outputs[0].dims)
        out = mb.reshape(x=out, shape=dims if dims else np.zeros(0, np.int32))
    return out


def _axes(node, rank: int) -> list[int]:
    axes = node.attrs["axes"]
    return list(range(rank)) if axes is None else [int(a) for a in axes]


@lowering("reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod")
def _reduce(L, node, x):
    axes = _axes(node, len(x.shape))
    if not axes:
        return L.mb.identity(x=x)
    return getattr(L.mb, node.kind)(x=x, axes=axes, keep_dims=node.attrs["keepdims"])


@lowering("softmax")
def _softmax(L, node, x):
    return L.mb.softmax(x=x, axis=node.attrs["axis"])


@lowering("log_softmax")
def _log_softmax(L, node, x):
    mb = L.mb
    return mb.sub(x=x, y=mb.reduce_log_sum_exp(x=x, axes=[node.attrs["axis"]], keep_dims=True))


def _normalized(L, x, axes, eps):
    """(x - mean) / sqrt(var + eps) over ``axes`` (biased variance)."""
    mb = L.mb
    centered = mb.sub(x=x, y=mb.reduce_mean(x=x, axes=axes, keep_dims=True))
    var = mb.reduce_mean(x=mb.mul(x=centered, y=centered), axes=axes, keep_dims=True)
    return mb.real_div(x=centered, y=mb.sqrt(x=mb.add(x=var, y=L.scalar(eps, var))))


def _affine(L, y, gamma, beta):
    y = L.mb.mul(x=y, y=gamma)
    return y if beta is None else L.mb.add(x=y, y=beta)


@lowering("layer_norm")
def _layer_norm(L, node, x, gamma, beta=None):
    axes = list(range(node.attrs["axis"], len(x.shape)))
    eps = node.attrs["eps"]
    constant = gamma.val is not None and (beta is None or beta.val is not None)
    if constant:  # Core ML's own layer_norm (its gamma and beta must be constants)
        kwargs = {"gamma": gamma.val} if beta is None else {"gamma": gamma.val, "beta": beta.val}
        return L.mb.layer_norm(x=x, axes=axes, epsilon=L.scalar(eps, x).val, **kwargs)
    return _affine(L, _normalized(L, x, axes, eps), gamma, beta)


@lowering("rms_norm")
def _rms_norm(L, node, x, gamma, beta=None):
    mb = L.mb
    axes = list(range(node.attrs["axis"], len(x.shape)))
    mean_square = mb.reduce_mean(x=mb.mul(x=x, y=x), axes=axes, keep_dims=True)
    y = mb.real_div(x=x, y=mb.sqrt(x=mb.add(x=mean_square, y=L.scalar(node.attrs["eps"], x))))
    return _affine(L, y, gamma, beta)


@lowering("group_norm")
def _group_norm(L, node, x, gamma, beta):
    mb = L.mb
    dims = tuple(x.shape)
    n, c, groups = dims[0], dims[1], node.attrs["num_groups"]
    grouped = mb.reshape(x=x, shape=[n, groups, math.prod(dims) // (n * groups)])
    y = mb.reshape(x=_normalized(L, grouped, [2], node.attrs["eps"]), shape=list(dims))
    per_channel = [c] + [1] * (len(dims) - 2)
    return _affine(L, y, mb.reshape(x=gamma, shape=per_channel), mb.reshape(x=beta, shape=per_channel))


@lowering("attention")
def _attention(L, node, q, k, v, mask=None):
    """The reference's definition step by step: scores, soft cap, mask, a softmax whose
    rows without a visible key give zeros, the weighted values."""
    mb, a = L.mb, node.attrs
    b, hq, sq, _ = q.shape
    hkv, sk = k.shape[1], k.shape[2]
    if hq != hkv:  # query head h reads KV head h // group
        group = hq // hkv
        k = _repeat_heads(L, k, group)
        v = _repeat_heads(L, v, group)
    scores = mb.mul(x=mb.matmul(x=q, y=k, transpose_y=True), y=L.scalar(a["scale"], q))
    if a["softcap"] is not None:
        cap = L.scalar(a["softcap"], scores)
        scores = mb.mul(x=mb.tanh(x=mb.real_div(x=scores, y=cap)), y=cap)
    if a["mask"] == "bias":
        scores = mb.add(x=scores, y=mask)
    else:
        visible = mask if a["mask"] == "custom" else attention_visibility(a["mask"], sq, sk, a["window"])
        if visible is not None:
            if isinstance(visible, np.ndarray):
                visible = mb.const(val=np.ascontiguousarray(visible, np.bool_))
            scores = mb.select(cond=visible, a=scores, b=L.scalar(-np.inf, scores))
    top = mb.reduce_max(x=scores, axes=[-1], keep_dims=True)
    top = mb.select(cond=mb.equal(x=top, y=L.scalar(-np.inf, top)), a=L.scalar(0, top), b=top)
    weights = mb.exp(x=mb.sub(x=scores, y=top))
    total = mb.reduce_sum(x=weights, axes=[-1], keep_dims=True)
    total = mb.select(cond=mb.equal(x=total, y=L.scalar(0, total)), a=L.scalar(1, total), b=total)
    return mb.real_div(x=mb.matmul(x=weights, y=v), y=total)


def _repeat_heads(L, x, group: int):
    mb = L.mb
    b, h, s, d = x.shape
    x = mb.tile(x=mb.expand_dims(x=x, axes=[2]), reps=[1, 1, group, 1, 1])
    return mb.reshape(x=x, shape=[b, h * group, s, d])


def _slice_last(L, x, start: int, stop: int, step: int = 1):
    rank = len(x.shape)
    begin, end = [0] * rank, list(x.shape)
    begin[-1], end[-1] = start, stop
    stride = [1] * (rank - 1) + [step]
    return L.mb.slice_by_index(x=x, begin=begin, end=end, stride=stride)


@lowering("rope")
def _rope(L, node, x, cos, sin):
    mb, a = L.mb, node.attrs
    d = x.shape[-1]
    n_rot = a["n_rot"] if a["n_rot"] is not None else d
    half = n_rot // 2
    if a["style"] == "half":
        first, second = _slice_last(L, x, 0, half), _slice_last(L, x, half, n_rot)
    else:
        first, second = _slice_last(L, x, 0, n_rot, 2), _slice_last(L, x, 1, n_rot, 2)
    out1 = mb.sub(x=mb.mul(x=first, y=cos), y=mb.mul(x=second, y=sin))
    out2 = mb.add(x=mb.mul(x=second, y=cos), y=mb.mul(x=first, y=sin))
    if a["style"] == "half":
        rotated = mb.concat(values=[out1, out2], axis=-1)
    else:  # pairs (2i, 2i+1): stack on a new last axis, then merge it
        pairs = mb.concat(values=[mb.expand_dims(x=out1, axes=[-1]), mb.expand_dims(x=out2, axes=[-1])], axis=-1)
        rotated = mb.reshape(x=pairs, shape=list(x.shape[:-1]) + [n_rot])
    if n_rot == d:
        return rotated
    return mb.concat(values=[rotated, _slice_last(L, x, n_rot, d)], axis=-1)


def _pairs(pads, n: int) -> list[int]:
    """RLX's (begins..., ends...) as MIL's (begin, end) per axis."""
    return [int(p) for i in range(n) for p in (pads[i], pads[n + i])]


@lowering("conv")
def _conv(L, node, x, w, bias=None):
    a = node.attrs
    n = len(x.shape) - 2
    kwargs = {} if bias is None else {"bias": bias}
    return L.mb.conv(x=x, weight=w, strides=list(a["strides"]), pad_type="custom", pad=_pairs(a["pads"], n),
                     dilations=list(a["dilations"]), groups=a["groups"], **kwargs)


@lowering("pool2d")
def _pool(L, node, x):
    a, mb = node.attrs, L.mb
    common = {"kernel_sizes": list(a["kernel"]), "strides": list(a["strides"]), "pad_type": "custom",
              "pad": _pairs(a["pads"], 2), "ceil_mode": a["ceil_mode"]}
    if a["mode"] == "max":
        return mb.max_pool(x=x, **common)
    return mb.avg_pool(x=x, exclude_padding_from_average=not a["count_include_pad"], **common)


@lowering("cumsum")
def _cumsum(L, node, x):
    """Inclusive sums by Core ML's cumsum; an exclusive one is the inclusive sum of all but
    the last (first, reversed) element, shifted by a zero -- the same additions as the
    reference's."""
    mb, a = L.mb, node.attrs
    axis, reverse = a["axis"] % len(x.shape), a["reverse"]
    if not a["exclusive"]:
        return mb.cumsum(x=x, axis=axis, reverse=reverse)
    dims = list(x.shape)
    n = dims[axis]
    zero_dims = dims[:axis] + [1] + dims[axis + 1:]
    zeros = L.const(np.zeros(zero_dims), L.dtype_of(x))
    if n == 1:
        return mb.identity(x=zeros)
    begin, end = [0] * len(dims), list(dims)
    if reverse:
        begin[axis] = 1
    else:
        end[axis] = n - 1
    part = mb.cumsum(x=mb.slice_by_index(x=x, begin=begin, end=end), axis=axis, reverse=reverse)
    return mb.concat(values=[part, zeros] if reverse else [zeros, part], axis=axis)


@lowering("transpose")
def _transpose(L, node, x):
    perm = [int(p) for p in node.attrs["perm"]]
    if perm == sorted(perm):
        return L.mb.identity(x=x)
    return L.mb.transpose(x=x, perm=perm)


@lowering("reshape")
def _reshape(L, node, x):
    dims = list(node.outputs[0].dims)
    if not dims:
        return L.mb.reshape(x=x, shape=np.zeros(0, np.int32))
    return L.mb.reshape(x=x, shape=dims)


@lowering("slice")
def _slice(L, node, x):
    a = node.attrs
    rank = len(x.shape)
    if rank == 0:
        return L.mb.identity(x=x)
    begin, end, stride, end_mask = [], [], [], []
    for axis in range(rank):
        start, stop, step = a["starts"][axis], a["stops"][axis], (a["steps"] or [1] * rank)[axis]
        begin.append(int(start))
        through_zero = step < 0 and stop < 0  # numpy's "-n-1": up to and including index 0
        end.append(0 if through_zero else int(stop))
        end_mask.append(through_zero)
        stride.append(int(step))
    return L.mb.slice_by_index(x=x, begin=begin, end=end, stride=stride, end_mask=end_mask)


@lowering("concat")
def _concat(L, node, *xs):
    if len(xs) == 1:
        return L.mb.identity(x=xs[0])
    return L.mb.concat(values=list(xs), axis=node.attrs["axis"])


@lowering("split")
def _split(L, node, x):
    sizes = [int(s) for s in node.attrs["sizes"]]
    kept = [s for s in sizes if s]
    parts = [L.mb.identity(x=x)] if len(kept) == 1 else \
        list(L.mb.split(x=x, split_sizes=kept, axis=node.attrs["axis"]))
    it = iter(parts)
    return [next(it) if s else Empty(out) for s, out in zip(sizes, node.outputs)]


@lowering("expand")
def _expand(L, node, x):
    return _broadcast_to(L, x, list(node.outputs[0].dims))


@lowering("pad")
def _pad(L, node, x):
    mb, a = L.mb, node.attrs
    pads = [int(p) for p in a["pads"]]
    rank = len(x.shape)
    if any(p < 0 for p in pads):  # crop first
        begin = [max(-pads[2 * i], 0) for i in range(rank)]
        end = [x.shape[i] - max(-pads[2 * i + 1], 0) for i in range(rank)]
        x = mb.slice_by_index(x=x, begin=begin, end=end)
        pads = [max(p, 0) for p in pads]
    if not any(pads):
        return mb.identity(x=x)
    mode = {"constant": "constant", "reflect": "reflect", "edge": "replicate"}[a["mode"]]
    if mode != "constant":  # only the padded trailing axes (support.check_node: at most the last two)
        first = next(i for i in range(rank) if pads[2 * i] or pads[2 * i + 1])
        pads = pads[2 * first:]
    value = a["value"] if mode == "constant" else 0
    return mb.pad(x=x, pad=pads, mode=mode, constant_val=L.scalar(value, x).val)


def _wrapped(L, indices, n: int):
    """Indices with negative entries counted from the end (``i + n``), as RLX defines them."""
    mb = L.mb
    return mb.select(cond=mb.less(x=indices, y=np.int32(0)), a=mb.add(x=indices, y=np.int32(n)), b=indices)


@lowering("gather")
def _gather(L, node, table, indices):
    mb = L.mb
    axis = node.attrs["axis"]
    idx = _wrapped(L, indices, table.shape[axis])
    if not indices.shape:  # a scalar index drops the axis
        out = mb.gather(x=table, indices=mb.expand_dims(x=idx, axes=[0]), axis=axis, validate_indices=False)
        return mb.squeeze(x=out, axes=[axis])
    return mb.gather(x=table, indices=idx, axis=axis, validate_indices=False)


@lowering("gather_elements")
def _gather_elements(L, node, x, indices):
    mb = L.mb
    axis = node.attrs["axis"]
    target = list(indices.shape)
    if any(t != s for i, (t, s) in enumerate(zip(target, x.shape)) if i != axis):
        end = [t if i != axis else s for i, (t, s) in enumerate(zip(target, x.shape))]
        x = mb.slice_by_index(x=x, begin=[0] * len(end), end=end)
    idx = _wrapped(L, indices, x.shape[axis])
    return mb.gather_along_axis(x=x, indices=idx, axis=axis, validate_indices=False)


@lowering("constant")
def _constant_node(L, node):
    return L._constant(node.attrs["value"], node.outputs[0])


@lowering("arange")
def _arange(L, node):
    return L._constant(run_node(node, [], RefContext())[0], node.outputs[0])
