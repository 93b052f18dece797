"""What CI checks of the ``ane`` lowering on Linux, where Core ML cannot run a program.

* :func:`check_lowering` -- every node's MIL values have the graph's dims and dtypes
  (i64 results as int32), and its lowering emitted the MIL op it is built on.
* :func:`convert` -- coremltools converts the program to an ML Program (its MIL passes,
  type checks and serialization), for given compute units; ``load=False`` skips loading
  it into Core ML (which needs macOS).
* :func:`check_roundtrip` -- the serialized program, read back by coremltools' own
  protobuf loader, has the inputs and outputs the bindings say (names, dims, dtypes) and,
  converted without optimization passes, the same ops in the same order as built.
* :func:`evaluate` -- the program's numbers: the graph lowered with its inputs as
  constants, so coremltools' value inference (numpy implementations of the MIL ops,
  written by Apple) computes every value while the program is built. Ops without value
  inference (``conv``, the pools) leave the outputs that depend on them unknown (None).
  This checks the lowering's semantics against the reference; it does not check Core
  ML's kernels.
"""
from __future__ import annotations

import tempfile

import numpy as np

from rlx_core.ir import DType, Graph

from .lower import MIL_DTYPE, Empty, Lowered, coremltools, lower, quiet

__all__ = ["EXPECTED_OPS", "check_lowering", "convert", "check_roundtrip", "evaluate", "COMPUTE_UNITS"]

COMPUTE_UNITS = {"all": "ALL", "cpu_and_gpu": "CPU_AND_GPU", "cpu_and_ne": "CPU_AND_NE", "cpu_only": "CPU_ONLY"}

# Per kind: MIL ops of which the lowering must emit at least one (what "lowered to" means).
EXPECTED_OPS = {
    **{k: {k} for k in ("exp", "log", "sqrt", "rsqrt", "sin", "cos", "tan", "tanh", "atan", "ceil", "floor",
                        "sigmoid", "erf", "abs", "sign", "add", "sub", "mul", "pow", "matmul", "softmax",
                        "cumsum", "conv", "logical_and", "logical_or", "logical_xor", "logical_not")},
    "reciprocal": {"real_div"}, "div": {"real_div"}, "neg": {"mul"}, "relu": {"relu", "maximum"},
    "gelu": {"gelu"}, "gelu_tanh": {"gelu"}, "silu": {"sigmoid"}, "softplus": {"exp"},
    "max": {"maximum"}, "min": {"minimum"}, "eq": {"equal", "logical_xor"}, "ne": {"not_equal", "logical_xor"},
    "lt": {"less"}, "le": {"less_equal"}, "gt": {"greater"}, "ge": {"greater_equal"}, "where": {"select"},
    "cast": {"cast", "not_equal", "select", "identity"},
    **{k: {k, "identity"} for k in ("reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod")},
    "log_softmax": {"reduce_log_sum_exp"}, "layer_norm": {"layer_norm", "reduce_mean"},
    "rms_norm": {"reduce_mean"}, "group_norm": {"reduce_mean"}, "attention": {"matmul"}, "rope": {"concat"},
    "pool2d": {"max_pool", "avg_pool"}, "transpose": {"transpose", "identity"}, "reshape": {"reshape"},
    "slice": {"slice_by_index", "identity"}, "concat": {"concat", "identity"}, "split": {"split", "identity"},
    "expand": {"tile", "identity"}, "pad": {"pad", "slice_by_index", "identity"}, "gather": {"gather"},
    "gather_elements": {"gather_along_axis"}, "constant": {"const"}, "arange": {"const"},
}


def _mil_dtype(var) -> str:
    types = coremltools()[2]
    return types.builtin_to_string(var.dtype)


def check_lowering(lowered: Lowered) -> list[str]:
    """Problems with the values and ops each node was lowered to (empty: none)."""
    problems = []
    for record in lowered.records.values():
        node = record.node
        for i, (value, shape) in enumerate(zip(record.values, node.outputs)):
            what = f"{node.label} output {i}"
            if value is None or isinstance(value, np.ndarray):
                continue
            if isinstance(value, Empty):
                if value.shape != shape:
                    problems.append(f"{what}: empty value of {value.shape}, the graph says {shape}")
                continue
            dims = tuple(int(d) for d in value.shape)
            if dims != shape.dims:
                problems.append(f"{what}: MIL dims {dims}, the graph says {shape.dims}")
            if _mil_dtype(value) != MIL_DTYPE.get(shape.dtype):
                problems.append(f"{what}: MIL dtype {_mil_dtype(value)}, the graph says {shape.dtype}")
        expected = EXPECTED_OPS.get(node.kind)
        lowered_to_mil = any(v is not None and not isinstance(v, (Empty, np.ndarray)) for v in record.values)
        if expected and lowered_to_mil and not record.folded and not set(record.ops) & expected:
            problems.append(f"{node.label}: lowered to {record.ops or 'no ops'}, expected one of {sorted(expected)}")
    return problems


def convert(lowered: Lowered, units: str = "all", load: bool = False, optimize: bool = True):
    """The ``MLModel`` of ``lowered``'s program (``ct.convert``): fp32 math stays fp32
    (``compute_precision=FLOAT32``; f16 graphs are f16 already); ``optimize=False`` runs no
    MIL optimization passes (the program's ops as built)."""
    ct = coremltools()[0]
    kwargs = {} if optimize else {"pass_pipeline": ct.PassPipeline.EMPTY}
    with quiet():
        return ct.convert(lowered.program, convert_to="mlprogram", minimum_deployment_target=ct.target.macOS14,
                          compute_precision=ct.precision.FLOAT32,
                          compute_units=getattr(ct.ComputeUnit, COMPUTE_UNITS[units]),
                          skip_model_load=not load, **kwargs)


_PROTO_DTYPES = {"FLOAT32": "fp32", "FLOAT16": "fp16", "INT32": "int32"}


def check_roundtrip(lowered: Lowered, model, built_ops: list[str] | None = None) -> list[str]:
    """Problems with the serialized program ``model`` (empty: none): its signature against
    the bindings and, given ``built_ops``, its ops against those built."""
    from coremltools.converters.mil.frontend.milproto.load import load as load_milproto
    problems = []
    spec = model.get_spec()
    want_in = {b.program_name: (tuple(b.dims), b.mil_dtype) for b in lowered.inputs}
    if lowered.dummy_input:
        want_in[lowered.dummy_input] = ((1,), "fp32")
    got_in = {f.name: (tuple(f.type.multiArrayType.shape),
                       _PROTO_DTYPES.get(spec.description.input[0].type.multiArrayType.DESCRIPTOR.enum_types_by_name[
                           "ArrayDataType"].values_by_number[f.type.multiArrayType.dataType].name))
              for f in spec.description.input}
    if got_in != want_in:
        problems.append(f"program inputs {got_in}, expected {want_in}")
    want_out = {}
    for b in lowered.program_outputs:
        dims = b.shape.dims or (1,)
        dtype = "int32" if b.shape.dtype in (DType.BOOL, DType.I64) else MIL_DTYPE[b.shape.dtype]
        want_out[b.program_name] = (tuple(dims), dtype)
    got_out = {f.name: (tuple(f.type.multiArrayType.shape),
                        _PROTO_DTYPES.get(f.type.multiArrayType.DESCRIPTOR.enum_types_by_name[
                            "ArrayDataType"].values_by_number[f.type.multiArrayType.dataType].name))
               for f in spec.description.output}
    if got_out != want_out:
        problems.append(f"program outputs {got_out}, expected {want_out}")
    with quiet():
        program = load_milproto(spec, specification_version=spec.specificationVersion,
                                file_weights_dir=model.weights_dir or tempfile.gettempdir())
    if built_ops is not None:
        ops = [op.op_type for op in program.functions["main"].operations]
        if _canonical(ops) != _canonical(built_ops):
            problems.append(f"serialized ops {ops} differ from those built {built_ops}")
    return problems


# Rewrites coremltools' backend passes make even without optimization passes.
_BACKEND_FUSIONS = ((("sigmoid", "mul"), "silu"),)


def _canonical(ops: list[str]) -> list[str]:
    ops = [o for o in ops if o != "const"]
    out, i = [], 0
    while i < len(ops):
        for pattern, fused in _BACKEND_FUSIONS:
            if tuple(ops[i:i + len(pattern)]) == pattern:
                out.append(fused)
                i += len(pattern)
                break
        else:
            out.append(ops[i])
            i += 1
    return out


def built_ops(lowered: Lowered) -> list[str]:
    """The op types of the program as built, in order."""
    return [op.op_type for op in lowered.program.functions["main"].operations]


def evaluate(graph: Graph, inputs: dict[str, np.ndarray], params: dict[str, np.ndarray] | None = None
             ) -> list[np.ndarray | None]:
    """The graph's outputs computed by coremltools' value inference of the lowered MIL ops
    (see the module docstring); None for an output whose ops have no value inference."""
    lowered = lower(graph, params, feeds=inputs)
    results = []
    for binding in lowered.outputs:
        s = binding.shape
        if binding.source == "input":
            results.append(np.array(inputs[binding.name]))
        elif binding.source == "param":
            results.append(np.array((params or {})[binding.name]))
        elif binding.source in ("empty", "constant"):
            results.append(np.array(binding.value))
        else:
            var = lowered.records[graph.outputs[binding.index].node].values[graph.outputs[binding.index].index]
            val = getattr(var, "val", None) if not isinstance(var, np.ndarray) else var
            results.append(None if val is None else np.asarray(val).astype(s.dtype.np).reshape(s.dims))
    return results
