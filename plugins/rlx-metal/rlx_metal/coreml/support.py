"""What the ``ane`` backend claims (op kind -> dtypes, keyed as legalize keys them) and the
finer per-node checks. Cheap: imports no coremltools.

Core ML ML Programs compute on fp32, fp16, int32 and bool. RLX's other dtypes are
rejected, with two exact exceptions: i64 *indices* (``gather`` / ``gather_elements``
indices, i64 constants within the int32 range) travel as int32 -- every defined index is
in ``[-n, n)``, so nothing is lost; and values that never reach Core ML
(graph inputs returned as outputs, empty tensors, whose results follow from their
shapes) are handled on the host.

A kind is claimed when it lowers to MIL ops whose documented definitions give the
reference's numbers (within the conformance tolerances); the rest is rejected with the
reason. Claimed is not run: Core ML prediction needs macOS, and this project has never
run it (the MIL tests check the lowering on Linux).
"""
from __future__ import annotations

from rlx_core.ir import DType, Node

__all__ = ["supported_ops", "claimed_ops", "check_node", "MIL_DTYPES", "MAX_RANK", "REJECTED", "claims_table"]

F, H, I, B = DType.F32, DType.F16, DType.I32, DType.BOOL
FLOATS = frozenset({F, H})
MIL_DTYPES = frozenset({F, H, I, B})
MAX_RANK = 5  # Core ML tensors have rank <= 5
INT32 = (-(1 << 31), (1 << 31) - 1)

_UNARY_FLOAT = ("exp", "log", "sqrt", "rsqrt", "reciprocal", "sin", "cos", "tan", "tanh", "atan", "ceil", "floor",
                "sigmoid", "erf", "gelu", "gelu_tanh", "silu", "softplus", "abs", "neg")
_BINARY_FLOAT = ("add", "sub", "mul", "div", "pow")
_NN = ("softmax", "log_softmax", "layer_norm", "rms_norm", "group_norm", "attention", "rope", "conv", "pool2d",
       "cumsum", "reduce_sum", "reduce_mean", "reduce_prod", "matmul")
_MOVERS = ("transpose", "reshape", "slice", "concat", "split", "expand")

# Kinds the schema accepts that this backend rejects, with the reason (shown by legalize).
REJECTED = {
    "round": "Core ML's round does not define how ties break (RLX rounds half to even)",
    "mod": "Core ML's mod is not defined for negative operands as RLX's (floor) mod is",
    "atan2": "Core ML has no atan2 (a decomposition is not exact at the axes)",
    "if": "control flow is not lowered to Core ML", "while": "control flow is not lowered to Core ML",
    "scan": "control flow is not lowered to Core ML",
    "rng_uniform": "Core ML's random ops are not Philox: RLX's numbers cannot be reproduced",
    "rng_normal": "Core ML's random ops are not Philox: RLX's numbers cannot be reproduced",
    "fft": "Core ML has no FFT", "rfft": "Core ML has no FFT", "irfft": "Core ML has no FFT",
    "dense_solve": "Core ML has no linear solver",
    "quantize": "not lowered to Core ML", "dequantize": "not lowered to Core ML",
    "conv_transpose2d": "not lowered to Core ML", "scatter_add": "not lowered to Core ML",
    "frame": "not lowered to Core ML",
    "argmax": "Core ML's reduce_argmax does not say which index a tie gives (RLX: the lowest)",
    "argmin": "Core ML's reduce_argmin does not say which index a tie gives (RLX: the lowest)",
    "topk": "Core ML's topk does not define the order of equal values (RLX: lower index first) nor where NaN sorts",
}


def supported_ops() -> dict[str, frozenset[DType] | None]:
    table: dict[str, frozenset[DType] | None] = {}
    table.update({k: FLOATS for k in _UNARY_FLOAT + _BINARY_FLOAT + _NN})
    table.update({"sign": FLOATS | {I}, "relu": FLOATS | {I}, "max": FLOATS | {I}, "min": FLOATS | {I},
                  "reduce_max": FLOATS | {I}, "reduce_min": FLOATS | {I}})
    table.update({k: FLOATS | {I, B} for k in ("eq", "ne")})
    table.update({k: FLOATS | {I} for k in ("lt", "le", "gt", "ge")})
    table.update({k: frozenset({B}) for k in ("logical_and", "logical_or", "logical_xor", "logical_not", "where")})
    table["cast"] = MIL_DTYPES
    table.update({k: MIL_DTYPES for k in _MOVERS})
    table["pad"] = FLOATS
    table.update({"gather": FLOATS | {I}, "gather_elements": FLOATS | {I}})
    table.update({"constant": MIL_DTYPES | {DType.I64}, "arange": frozenset({F, H, I})})
    # Listed so that legalize gives check_node's reason (Core ML cannot express them exactly).
    table.update({kind: None for kind in REJECTED})
    return table


def claimed_ops() -> dict[str, frozenset[DType]]:
    """What the backend runs: the table less the kinds it rejects whatever their dtype."""
    return {k: v for k, v in supported_ops().items() if k not in REJECTED}


_I64_OUTPUTS = {"constant": (0,)}


def check_node(node: Node) -> str | None:
    """Why the ``ane`` backend cannot run ``node`` beyond its kind and dtype, or None.

    Only the node is known here (not its inputs' shapes): its outputs' dtypes and ranks
    are checked, and the inputs follow from the kind (every claimed kind's inputs share
    the first input's dtype, or are bool masks/conditions or index tensors). Graph
    inputs and params are checked when the program is built."""
    if node.kind in REJECTED:
        return REJECTED[node.kind]
    for i, s in enumerate(node.outputs):
        problem = _shape_problem(s, f"output {i}", node.kind in _I64_OUTPUTS and i in _I64_OUTPUTS[node.kind])
        if problem:
            return problem
    a = node.attrs
    if node.kind == "constant" and node.outputs[0].dtype is DType.I64:
        value = a["value"]
        if value.size and (value.min() < INT32[0] or value.max() > INT32[1]):
            return "an i64 constant outside the int32 range (Core ML has no int64; indices travel as int32)"
    if node.kind == "cast" and a["to"] not in MIL_DTYPES:
        return f"cast to {a['to']}: Core ML computes on f32, f16, i32, bool"
    if node.kind == "where" and node.outputs[0].dtype not in MIL_DTYPES:
        return f"where on {node.outputs[0].dtype} values: Core ML computes on f32, f16, i32, bool"
    if node.kind == "pool2d":
        if any(d != 1 for d in a["dilations"]):
            return "pool2d with dilations: Core ML pools have none"
        if a["mode"] == "avg" and a["ceil_mode"]:
            return "average pool2d in ceil mode: Core ML counts the window positions past the end differently"
    if node.kind == "pad" and a["mode"] != "constant":
        out = node.outputs[0].dims
        grow = [(i, max(b, 0), max(e, 0)) for i, (b, e) in enumerate(zip(a["pads"][0::2], a["pads"][1::2]))
                if b > 0 or e > 0]
        if any(i < len(out) - 2 for i, _, _ in grow):
            return f"{a['mode']} padding of axes before the last two: Core ML pads those in constant mode only"
        if a["mode"] == "edge" and any(max(b, e) > out[i] - b - e for i, b, e in grow):
            return "edge padding wider than the axis: Core ML's replicate pads at most the axis size"
    return None


def _shape_problem(shape, what: str, i64_ok: bool) -> str | None:
    if shape.dtype not in MIL_DTYPES and not (i64_ok and shape.dtype is DType.I64):
        return f"{what} is {shape.dtype}: Core ML computes on f32, f16, i32 and bool"
    if len(shape.dims) > MAX_RANK:
        return f"{what} has rank {len(shape.dims)}: Core ML tensors have rank <= {MAX_RANK}"
    return None


def claims_table() -> str:
    """The claimed kinds and dtypes as a Markdown table (``python -m rlx_metal.coreml.support``)."""
    rows = [f"| `{k}` | {', '.join(sorted(d.value for d in v))} |" for k, v in sorted(claimed_ops().items())]
    rejected = [f"| `{k}` | {why} |" for k, why in sorted(REJECTED.items())]
    return "\n".join(["| op kind | dtypes (of the first input; of the output for sources) |", "|---|---|", *rows,
                      "", "| rejected kind | reason |", "|---|---|", *rejected])


if __name__ == "__main__":
    print(claims_table())
