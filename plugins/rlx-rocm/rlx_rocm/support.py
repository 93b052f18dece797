"""What the rocm backend claims: op kind -> dtypes (keyed as legalize keys them: the
first input's dtype, or the output's for source ops), plus the finer per-node checks.

Every dtype is stored as numpy stores it and computed exactly as the reference defines
it (16-bit floats in f32, rounded once per op). f64 and c128 need ``cl_khr_fp64``; f16
needs nothing beyond core OpenCL (``vload_half``/``vstore_half_rte``), so it is claimed
on every device. Regenerate the README's table with ``python -m rlx_rocm.support``.
"""
from __future__ import annotations

from rlx_core.ir import DType, Node, all_schemas
from rlx_core.ir.ops.elementwise import BINARY, COMPARE, UNARY

__all__ = ["supported_ops", "check_node", "claims_table", "storable"]

ALL = None
_WIDE = frozenset({DType.F64, DType.C128})
_PASSTHROUGH = ("input", "param", "constant", "arange", "reshape")


def storable(fp64: bool) -> frozenset[DType]:
    return frozenset(d for d in DType if fp64 or d not in _WIDE)


def _accepted(kind: str, fp64: bool) -> frozenset[DType]:
    dts = all_schemas()[kind].dtypes
    return frozenset(dts if dts is not None else DType) & storable(fp64)


def supported_ops(fp64: bool) -> dict[str, frozenset[DType] | None]:
    table: dict[str, frozenset[DType] | None] = {k: ALL for k in _PASSTHROUGH}
    for kind in list(UNARY) + list(BINARY) + list(COMPARE) + ["cast", "where"]:
        table[kind] = _accepted(kind, fp64)
    movers = storable(fp64)
    for kind in ("transpose", "slice", "expand", "concat", "split", "pad", "frame", "gather", "gather_elements"):
        table[kind] = movers
    table["scatter_add"] = _accepted("scatter_add", fp64)
    for kind in ("reduce_sum", "reduce_mean", "reduce_prod", "reduce_max", "reduce_min", "argmax", "argmin",
                 "softmax", "log_softmax", "cumsum", "topk"):
        table[kind] = _accepted(kind, fp64)
    table["matmul"] = _accepted("matmul", fp64)
    for kind in ("layer_norm", "rms_norm", "group_norm", "rope", "attention", "conv", "conv_transpose2d", "pool2d"):
        table[kind] = _accepted(kind, fp64)
    table["dense_solve"] = frozenset({DType.F32, DType.C64} | ({DType.F64, DType.C128} if fp64 else set()))
    table["quantize"] = _accepted("quantize", fp64)
    table["dequantize"] = _accepted("dequantize", fp64)
    table.update({"rng_uniform": ALL, "rng_normal": ALL})
    table.update({"if": ALL, "while": ALL, "scan": ALL})  # operands move as bytes; bodies are checked  # keyed by a template's dtype; outputs checked below
    if fp64:  # transforms accumulate in double precision, as the reference does
        table.update({"fft": _accepted("fft", fp64), "irfft": _accepted("irfft", fp64),
                      "rfft": _accepted("rfft", fp64)})
    return {kind: dts for kind, dts in table.items() if dts is None or dts}


def check_node(node: Node, fp64: bool) -> str | None:
    """Why this backend cannot run ``node`` beyond its kind and dtype, or None."""
    if not fp64:
        wide = [s for s in node.outputs if s.dtype in _WIDE]
        if wide:
            return (f"{node.kind} producing {wide[0].dtype} needs double precision (cl_khr_fp64), which this "
                    f"OpenCL device lacks")
    return None


def claims_table(fp64: bool = True) -> str:
    rows = []
    for kind, dtypes in sorted(supported_ops(fp64).items()):
        text = "every dtype (data only)" if dtypes is None else ", ".join(sorted(d.value for d in dtypes))
        rows.append(f"| `{kind}` | {text} |")
    return "\n".join(["| op kind | dtypes (of the first input; of the output for sources) |", "|---|---|", *rows])


if __name__ == "__main__":
    import sys
    print(claims_table(fp64="--no-fp64" not in sys.argv))
