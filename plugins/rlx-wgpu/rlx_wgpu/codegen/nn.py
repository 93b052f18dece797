"""Normalizations, attention and rope.

Norms run one workgroup per normalized group (a contiguous row of ``x``): a workgroup
fold for the mean, another for the variance (or mean square), then every element is
written. Attention runs one workgroup per query row with an online softmax over chunks
of keys (see :func:`attention`). Everything is computed in f32 (16-bit floats rounded
once).
"""
from __future__ import annotations

import math


from .base import KernelContext, generator
from .reduce import acc_load, acc_store, row_kernel, strided_loop, tree, workgroup_for
from .wgsl import WORKGROUP, broadcast_index, f32, grid, linear_id, shader, u32


def _mean_fold(name: str, term: str, length: int, wg: int) -> list[str]:
    """Lines leaving ``name`` = the mean of ``term`` (over ``r``) across the row."""
    return [f"var {name}_sum = 0.0f;", strided_loop("r", length, wg, f"{name}_sum = {name}_sum + {term};"),
            f"part[lid] = {name}_sum;",
            *tree("part", "{0} + {1}", wg), f"let {name} = part[0] / {f32(length)};", "workgroupBarrier();"]


def _norm(k: KernelContext, groups: int, length: int, gamma_at: str, centered: bool) -> None:
    x = k.ins[0]
    wg = workgroup_for(length)
    value = acc_load(x.dtype, "x[base + r]")
    has_beta = len(k.ins) > 2
    lines = ["let base = row * " + u32(length) + ";"]
    if centered:
        lines += _mean_fold("mean", value, length, wg)
        lines += _mean_fold("var_", f"({value} - mean) * ({value} - mean)", length, wg)
        y = f"({value} - mean) / sqrt(var_ + {f32(k.attrs['eps'])})"
    else:
        lines += _mean_fold("ms", f"{value} * {value}", length, wg)
        y = f"{value} / sqrt(ms + {f32(k.attrs['eps'])})"
    y = f"{y} * {acc_load(x.dtype, f'gamma[{gamma_at}]')}"
    if has_beta:
        y = f"{y} + {acc_load(x.dtype, f'beta[{gamma_at}]')}"
    lines.append(strided_loop("r", length, wg, f"out[base + r] = {acc_store(x.dtype, y)};"))
    st = k.storage(x.dtype)
    names = ["x", "gamma"] + (["beta"] if has_beta else []) + ["out"]
    row_kernel(k, groups if length else 0, wg, [(n, st) for n in names],
               [k.input(i) for i in range(len(k.ins))] + [k.output()], f"var<workgroup> part: array<f32, {wg}>;\n",
               lines)


@generator("layer_norm", "rms_norm")
def layer_norm(k: KernelContext) -> None:
    dims, axis = k.ins[0].dims, k.attrs["axis"]
    _norm(k, math.prod(dims[:axis]), math.prod(dims[axis:]), "r", k.node.kind == "layer_norm")


@generator("group_norm")
def group_norm(k: KernelContext) -> None:
    """Each (sample, group) is a contiguous row; channel of element r: group's first + r / spatial."""
    dims, groups = k.ins[0].dims, k.attrs["num_groups"]
    spatial = math.prod(dims[2:])
    per_group = dims[1] // groups
    channel = f"(row % {u32(groups)}) * {u32(per_group)} + r / {u32(spatial)}"
    _norm(k, dims[0] * groups, per_group * spatial, channel, True)


KEY_CHUNK = 256  # keys whose scores a workgroup holds at once


def attention_workgroup_bytes(dv: int) -> int:
    """Workgroup memory attention needs: a chunk of scores, a fold buffer, the output row."""
    return 4 * (KEY_CHUNK + 256 + dv)


@generator("attention")
def attention(k: KernelContext) -> None:
    """Keys are taken in chunks of ``KEY_CHUNK``: scores into workgroup memory, the chunk's
    maximum folded in, exponentials rescaled by the running maximum (online softmax), and
    each output feature accumulated by the invocation that owns it -- so no scores matrix
    is ever stored."""
    a = k.attrs
    q, key, v = k.ins[:3]
    b, hq, sq, d = q.dims
    hkv, sk, dv = key.dims[1], key.dims[2], v.dims[3]
    rows_ = b * hq * sq
    if rows_ == 0 or dv == 0:
        return
    chunk = min(KEY_CHUNK, max(sk, 1))
    wg = workgroup_for(max(chunk, dv))
    neg_inf = "bitcast<f32>(0xff800000u)"
    q_at, k_at, v_at = "Q[q0 + t]", f"K[k0 + j * {u32(d)} + t]", f"V[v0 + j * {u32(dv)} + e]"
    score = ["let j = c0 + jj;", "var s = 0.0f;",
             f"for (var t = 0u; t < {u32(d)}; t = t + 1u) {{ s = s + {acc_load(q.dtype, q_at)} * "
             f"{acc_load(q.dtype, k_at)}; }}", f"s = s * {f32(a['scale'])};"]
    if a["softcap"] is not None:
        score.append(f"s = {f32(a['softcap'])} * rlx_tanh(s / {f32(a['softcap'])});")
    score += _mask_lines(k, a, q.dims, sk) + ["sc[jj] = s;", "cm = rlx_max(cm, s);"]
    accumulate = (f"var acc = out_row[e] * alpha; for (var jj = 0u; jj < n; jj = jj + 1u) "
                  f"{{ let j = c0 + jj; acc = acc + sc[jj] * {acc_load(v.dtype, v_at)}; }} out_row[e] = acc;")
    lines = [f"let bi = row / {u32(hq * sq)};", f"let h = (row / {u32(sq)}) % {u32(hq)};", f"let i = row % {u32(sq)};",
             f"let kv = bi * {u32(hkv)} + h / {u32(hq // hkv)};", f"let q0 = row * {u32(d)};",
             f"let k0 = kv * {u32(sk * d)};", f"let v0 = kv * {u32(sk * dv)};",
             f"let p = i32(i) + {sk - sq}i;",  # the query's position among the keys
             strided_loop("e", dv, wg, "out_row[e] = 0.0f;"),
             f"var m = {neg_inf};", "var l = 0.0f;",
             f"for (var c0 = 0u; c0 < {u32(sk)}; c0 = c0 + {u32(chunk)}) {{",
             f"  let n = min({u32(chunk)}, {u32(sk)} - c0);",
             f"  var cm = {neg_inf};",
             f"  for (var jj = lid; jj < n; jj = jj + {u32(wg)}) {{ {' '.join(score)} }}",
             "  part[lid] = cm;", *[f"  {x}" for x in tree("part", "rlx_max({0}, {1})", wg)],
             "  let top = rlx_max(m, part[0]);", "  workgroupBarrier();",
             f"  let shift = select(top, 0.0f, top == {neg_inf});",  # nothing visible yet: weights 0
             "  let alpha = exp(m - shift);",
             "  var cs = 0.0f;",
             f"  for (var jj = lid; jj < n; jj = jj + {u32(wg)}) "
             "{ let w = exp(sc[jj] - shift); sc[jj] = w; cs = cs + w; }",
             "  part[lid] = cs;", *[f"  {x}" for x in tree("part", "{0} + {1}", wg)],
             "  l = l * alpha + part[0];", "  m = top;",
             f"  {strided_loop('e', dv, wg, accumulate)}",
             "  workgroupBarrier();", "}",
             "let total = select(l, 1.0f, l == 0.0f);",
             strided_loop("e", dv, wg, f"O[row * {u32(dv)} + e] = {acc_store(q.dtype, 'out_row[e] / total')};")]
    st = k.storage(q.dtype)
    bindings, slots = [("Q", st), ("K", st), ("V", st)], [k.input(0), k.input(1), k.input(2)]
    if len(k.ins) == 4:
        bindings.append(("M", k.storage(k.ins[3].dtype)))
        slots.append(k.input(3))
    decls = (f"var<workgroup> part: array<f32, {wg}>;\nvar<workgroup> sc: array<f32, {chunk}>;\n"
             f"var<workgroup> out_row: array<f32, {dv}>;\n")
    row_kernel(k, rows_, wg, bindings + [("O", st)], slots + [k.output()], decls, lines)


def _mask_lines(k: KernelContext, a, q_dims, sk: int) -> list[str]:
    """Lines applying the mask to score ``s`` of key ``j`` (query position ``p``)."""
    mode = a["mask"]
    if mode == "none":
        return []
    hide = "s = bitcast<f32>(0xff800000u);"
    if mode == "causal":
        return [f"if (i32(j) > p) {{ {hide} }}"]
    if mode == "sliding":
        return [f"if (i32(j) > p || i32(j) <= p - {a['window']}i) {{ {hide} }}"]
    scores_dims = tuple(q_dims[:3]) + (sk,)
    at = broadcast_index("(row * " + u32(sk) + " + j)", scores_dims, k.ins[3].dims)
    if mode == "custom":
        return [f"if (M[{at}] == 0u) {{ {hide} }}"]
    return [f"s = s + {acc_load(k.ins[3].dtype, f'M[{at}]')};"]


@generator("rope")
def rope(k: KernelContext) -> None:
    x = k.ins[0]
    if x.size == 0:
        return
    seq, d = x.dims[-2:]
    n_rot = k.attrs["n_rot"]
    half = n_rot // 2
    value = lambda at: acc_load(x.dtype, f"x[{at}]")  # noqa: E731
    if k.attrs["style"] == "half":
        first, pair, partner = f"f < {u32(half)}", f"f % {u32(max(half, 1))}", \
            f"select(i - {u32(half)}, i + {u32(half)}, f < {u32(half)})"
    else:
        first, pair, partner = "f % 2u == 0u", "f / 2u", "select(i - 1u, i + 1u, f % 2u == 0u)"
    cs = f"s * {u32(half)} + {pair}"
    body = (f"  let i = {linear_id()};\n  if (i >= {u32(x.size)}) {{ return; }}\n"
            f"  let f = i % {u32(d)};\n  let s = (i / {u32(d)}) % {u32(seq)};\n"
            f"  if (f >= {u32(n_rot)}) {{ out[i] = x[i]; return; }}\n"
            f"  let c = {acc_load(x.dtype, f'cosv[{cs}]')};\n  let sn = {acc_load(x.dtype, f'sinv[{cs}]')};\n"
            f"  let own = {value('i')};\n  let other = {value(partner)};\n"
            f"  let y = select(own * c + other * sn, own * c - other * sn, {first});\n"
            f"  out[i] = {acc_store(x.dtype, 'y')};")
    st = k.storage(x.dtype)
    k.emit(shader([("x", st), ("cosv", st), ("sinv", st), ("out", st)], body),
           [k.input(0), k.input(1), k.input(2), k.output()], grid(x.size, WORKGROUP, k.max_grid))
