"""What the wgpu backend claims: op kind -> dtypes (keyed as legalize keys them: the
first input's dtype, or the output's for source ops), plus the finer per-node checks.

Everything claimed here is implemented exactly as the reference defines it (within the
conformance tolerances); what is not claimed is rejected by legalize with the reason.
"""
from __future__ import annotations

from rlx_core.ir import DType, Node, Shape, all_schemas
from rlx_core.ir.ops.elementwise import BINARY, COMPARE, UNARY

from .codegen.elementwise import supports
from .codegen.fft import MAX_DIRECT, is_power_of_two
from .codegen.movement import movable
from .codegen.nn import attention_workgroup_bytes
from .codegen.quant import QUANT_DTYPES
from .layout import COMPUTE_TYPES, exact_nbytes

__all__ = ["supported_ops", "check_node", "compute_dtypes"]

ALL = None  # every dtype the kind accepts
_PASSTHROUGH = {"input": ALL, "param": ALL, "constant": ALL, "arange": ALL, "reshape": ALL}
_ALONG_AXIS = ("reduce_sum", "reduce_mean", "reduce_prod", "reduce_max", "reduce_min", "argmax", "argmin",
               "softmax", "log_softmax", "cumsum", "topk")
_FLOAT_KINDS = ("layer_norm", "rms_norm", "group_norm", "attention", "rope", "conv", "conv_transpose2d", "pool2d")
_MOVERS = ("transpose", "slice", "concat", "split", "expand", "pad", "frame", "gather", "gather_elements")


def compute_dtypes(f16: bool) -> frozenset[DType]:
    """Dtypes kernels compute on: f32, i32, u32, bool, c64, i64 (emulated exactly, see
    ``rlx_wgpu.codegen.int64``), and f16 with ``shader-f16``."""
    return frozenset(d for d in COMPUTE_TYPES if f16 or d is not DType.F16)


def supported_ops(f16: bool) -> dict[str, frozenset[DType] | None]:
    computed = compute_dtypes(f16)
    table: dict[str, frozenset[DType] | None] = dict(_PASSTHROUGH)
    schemas = all_schemas()
    for kind in list(UNARY) + list(BINARY) + list(COMPARE):
        table[kind] = frozenset(d for d in schemas[kind].dtypes & computed if supports(kind, d, d))
    table["cast"] = computed
    movers = frozenset(d for d in DType if movable(d, f16))
    table.update({kind: movers for kind in _MOVERS})
    table["scatter_add"] = computed
    table["matmul"] = frozenset({DType.F32, DType.I32, DType.U32}) | ({DType.F16} if f16 else set())
    table["dense_solve"] = frozenset({DType.F32})
    floats = computed & {DType.F32, DType.F16}
    table.update({"fft": frozenset({DType.C64}), "irfft": frozenset({DType.C64}), "rfft": floats})
    table.update({kind: ALL for kind in ("rng_uniform", "rng_normal")})  # checked on their output dtype
    table["dequantize"] = QUANT_DTYPES
    table["quantize"] = floats
    table.update({"if": ALL, "while": ALL, "scan": ALL})  # operands are copied as bytes; bodies are checked
    table.update({kind: floats for kind in _FLOAT_KINDS})
    for kind in _ALONG_AXIS:
        table[kind] = schemas[kind].dtypes & computed
    table["where"] = frozenset({DType.BOOL})
    return {kind: dtypes for kind, dtypes in table.items() if dtypes is None or dtypes}


def check_node(node: Node, gpu) -> str | None:
    """Why this backend cannot run ``node`` beyond its kind and dtype, or None."""
    computed = compute_dtypes(gpu.f16)
    if node.kind in ("rng_uniform", "rng_normal") and node.outputs[0].dtype not in computed & {DType.F32, DType.F16}:
        return f"{node.kind} producing {node.outputs[0].dtype} is not supported by the wgpu backend (f32, f16 only)"
    if node.kind == "dequantize" and node.outputs[0].dtype not in computed & {DType.F32, DType.F16}:
        return f"dequantize to {node.outputs[0].dtype} is not supported by the wgpu backend (f32, f16 only)"
    if node.kind in ("cast", "where") and node.outputs[0].dtype not in computed:
        return (f"{node.kind} producing {node.outputs[0].dtype} is not supported by the wgpu backend "
                f"(it computes on {', '.join(sorted(d.value for d in computed))})")
    if node.kind in ("fft", "rfft", "irfft"):
        n = node.attrs["n"]
        if not is_power_of_two(n) and n > MAX_DIRECT:
            return (f"{node.kind} of length {n}: the wgpu backend runs powers of two (radix-2 FFT) and other "
                    f"lengths up to {MAX_DIRECT} (direct DFT); pad to {1 << (n - 1).bit_length()} instead")
    if node.kind == "scan":
        return _scan_slices(node)
    if node.kind == "attention" and attention_workgroup_bytes(node.outputs[0].dims[3]) > gpu.workgroup_bytes:
        return (f"attention with value dim {node.outputs[0].dims[3]} needs more workgroup memory than this device's "
                f"{gpu.workgroup_bytes} bytes")
    return None


def _scan_slices(node: Node) -> str | None:
    """scan copies one step of each xs / ys as bytes: each step must be whole 32-bit words."""
    nc = node.attrs["num_carry"]
    steps = [n.outputs[0] for n in node.attrs["body"].input_nodes[nc:]] + \
            [Shape(y.dims[1:], y.dtype) for y in node.outputs[nc:]]
    odd = [s for s in steps if exact_nbytes(s) % 4]
    if odd:
        return (f"scan steps of {odd[0]} are {exact_nbytes(odd[0])} bytes; the wgpu backend copies scan steps as "
                f"whole 32-bit words")
    return None


def claims_table(f16: bool) -> str:
    """The claimed op kinds and dtypes as a Markdown table (``python -m rlx_wgpu.support``)."""
    computed = ", ".join(sorted(d.value for d in compute_dtypes(f16)))
    floats = "f16, f32" if f16 else "f32"
    notes = {"cast": f" (to {computed})", "where": f" (values: {computed})",
             "rng_uniform": f"any template; output {floats}", "rng_normal": f"any template; output {floats}",
             "if": "any operands (moved as bytes; the bodies are checked)", "while": "any carried values (as bytes)",
             "scan": "any operands whose steps are whole 32-bit words", "dequantize": f" (to {floats})"}
    rows = []
    for kind, dtypes in sorted(supported_ops(f16).items()):
        text = "every dtype (data only)" if dtypes is None else ", ".join(sorted(d.value for d in dtypes))
        note = notes.get(kind, "")
        text = note if dtypes is None and note else text + (note if note.startswith(" ") else "")
        rows.append(f"| `{kind}` | {text} |")
    return "\n".join(["| op kind | dtypes (of the first input; of the output for sources) |", "|---|---|", *rows])


if __name__ == "__main__":
    import sys
    print(claims_table(f16="--no-f16" not in sys.argv))
