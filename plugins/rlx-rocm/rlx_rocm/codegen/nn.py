"""Normalizations, rotary embeddings and attention.

* ``layer_norm``/``rms_norm``/``group_norm``: one work-group per normalized group (a
  work-item per group when groups are short): the mean, then the centered variance (two
  passes, as the reference), then the affine write.
* ``rope``: one work-item per output element.
* ``attention``: no score matrix. One work-group per query row walks the keys in tiles
  of ``L``: each work-item scores one key of the tile (softcap, mask or bias applied),
  the tile's maximum updates the row's running maximum (online softmax), and each
  work-item accumulates its share of the ``Dv`` outputs in registers. A row without a
  visible key outputs zeros, as the reference does.
"""
from __future__ import annotations

import math

from rlx_core.ir import DType, Ref
from rlx_core.ir.ops.nn import attention_visibility  # noqa: F401  (the semantics implemented here)

from .base import KernelContext, groups, idx_type, linear_loop, strides_of
from .elementwise import broadcast_index
from .reduce import local_size, pairwise_sum, wg_reduce
from .types import ctype, literal, load, store

__all__ = ["GENERATORS"]


def _norm(k: KernelContext, rows: int, n: int, x_at, gamma_at, kind: str) -> None:
    """``rows`` groups of ``n`` elements; ``x_at(j)``/``gamma_at(j)``: index expressions
    of element ``j`` of group ``o``."""
    node = k.node
    dt = k.out.dtype
    t = ctype(dt)
    if rows == 0:
        return
    eps = literal(dt, node.attrs["eps"])
    beta = len(node.inputs) > 2
    params = [(k.buf("x", dt, True), node.inputs[0]), (k.buf("gamma", dt, True), node.inputs[1])]
    if beta:
        params.append((k.buf("beta", dt, True), node.inputs[2]))
    params.append((k.buf("out", dt), Ref(node.id)))
    count = f"({t}){n}"
    xj = load(dt, "x", x_at("JJ"))
    g = load(dt, "gamma", gamma_at("j"))
    b = f" + {load(dt, 'beta', gamma_at('j'))}" if beta else ""
    if kind == "rms":
        y = f"(({xj}) / d) * {g}{b}"
    else:
        y = f"(({xj} - mean) / d) * {g}{b}"
    size = local_size(n, min(256, k.dev.max_work_group)) if n >= 32 else 1
    idx = idx_type(rows * n)
    add = lambda p, q: f"(({p}) + ({q}))"  # noqa: E731
    stride = 1 if size == 1 else size
    start = "0" if size == 1 else "lid"

    def total(var, expr):
        if size == 1:
            return pairwise_sum(var, t, n, lambda j: expr.replace("JJ", f"({j})"), idx)
        expr = expr.replace("JJ", "j")
        text = f"    {t} {var} = 0;\n    for ({idx} j = {start}; j < {n}; j += {stride}) {var} += {expr};\n"
        if size > 1:
            text += wg_reduce(var, "red", size, add) + "\n"
        return text
    body = ""
    if kind == "rms":
        body += total("s2", f"({xj}) * ({xj})")
        body += f"    const {t} d = sqrt(s2 / {count} + {eps});\n"
    else:
        body += total("s", xj)
        body += f"    const {t} mean = s / {count};\n"
        body += total("s2", f"({xj} - mean) * ({xj} - mean)")
        body += f"    const {t} d = sqrt(s2 / {count} + {eps});\n"
    body += f"    for ({idx} j = {start}; j < {n}; j += {stride}) {{ {store(dt, 'out', x_at('j'), y.replace('JJ', 'j'))} }}"
    if size == 1:
        k.kernel(params, linear_loop("o", rows, idx, body), groups(rows, k.wg, k.max_groups()), k.wg)
        return
    text = (f"  __local {t} red[{size}];\n  const int lid = get_local_id(0);\n"
            f"  for ({idx} o = get_group_id(0); o < {rows}; o += get_num_groups(0)) {{\n{body}\n  }}")
    k.kernel(params, text, min(rows, k.max_groups()) * size, size)


def layer_norm(k: KernelContext) -> None:
    x = k.inputs[0]
    axis = k.node.attrs["axis"]
    n = math.prod(x.dims[axis:])
    _norm(k, math.prod(x.dims[:axis]), n, lambda j: f"o * {n} + {j}", lambda j: j,
          "rms" if k.node.kind == "rms_norm" else "layer")


def group_norm(k: KernelContext) -> None:
    x = k.inputs[0]
    g = k.node.attrs["num_groups"]
    c = x.dims[1]
    spatial = math.prod(x.dims[2:])
    n = (c // g) * spatial
    _norm(k, x.dims[0] * g, n, lambda j: f"o * {n} + {j}",
          lambda j: f"(o % {g}) * {c // g} + ({j}) / {spatial}", "layer")


def rope(k: KernelContext) -> None:
    x, out = k.inputs[0], k.out
    a = k.node.attrs
    dt = out.dtype
    t = ctype(dt)
    s_len, d = x.dims[-2:]
    nrot = a["n_rot"]
    half = nrot // 2
    n = out.size
    if n == 0:
        return
    idx = idx_type(n)
    params = [(k.buf("x", dt, True), k.node.inputs[0]), (k.buf("cs", dt, True), k.node.inputs[1]),
              (k.buf("sn", dt, True), k.node.inputs[2]), (k.buf("out", dt), Ref(k.node.id))]
    if half == 0:
        body = f"    {store(dt, 'out', 'e', load(dt, 'x', 'e'))}"
    else:
        if a["style"] == "half":
            first = f"dd < {half}"
            pair, partner = f"(dd < {half} ? dd : dd - {half})", f"(dd < {half} ? e + {half} : e - {half})"
        else:
            first = "(dd % 2) == 0"
            pair, partner = "(dd / 2)", "((dd % 2) == 0 ? e + 1 : e - 1)"
        body = (f"    const {idx} dd = e % {d}, s = (e / {d}) % {s_len};\n"
                f"    const {t} v = {load(dt, 'x', 'e')};\n"
                f"    if (dd >= {nrot}) {{ {store(dt, 'out', 'e', 'v')} }}\n"
                f"    else {{\n"
                f"      const {idx} i = {pair};\n"
                f"      const {t} cv = {load(dt, 'cs', f's * {half} + i')}, sv = {load(dt, 'sn', f's * {half} + i')};\n"
                f"      const {t} w = {load(dt, 'x', partner)};\n"
                f"      const {t} r = ({first}) ? (v * cv - w * sv) : (v * cv + w * sv);\n"
                f"      {store(dt, 'out', 'e', 'r')}\n    }}")
    k.kernel(params, linear_loop("e", n, idx, body), groups(n, k.wg, k.max_groups()), k.wg)


def attention(k: KernelContext) -> None:
    node = k.node
    a = node.attrs
    q, kk, v = k.inputs[:3]
    out = k.out
    dt = out.dtype
    t = ctype(dt)
    b, hq, sq, d = q.dims
    hkv, sk = kk.dims[1], kk.dims[2]
    dv = v.dims[3]
    rows = b * hq * sq
    if rows == 0 or dv == 0:
        return
    group = hq // hkv
    size = 64 if not k.dev.software else 16
    size = min(size, k.dev.max_work_group)
    regs = -(-dv // size)
    mode = a["mask"]
    params = [(k.buf("Q", dt, True), node.inputs[0]), (k.buf("K", dt, True), node.inputs[1]),
              (k.buf("V", dt, True), node.inputs[2])]
    if mode in ("custom", "bias"):
        mdt = k.graph.shape_of(node.inputs[3]).dtype
        params.append((k.buf("M", mdt, True), node.inputs[3]))
    params.append((k.buf("O", dt), Ref(node.id)))
    scale = literal(dt, a["scale"])
    score = f"s * {scale}"
    lines = []
    if a["softcap"] is not None:
        c = literal(dt, a["softcap"])
        lines.append(f"        s = {c} * tanh(s / {c});")
    if mode in ("causal", "sliding"):
        cond = f"j <= pos" + (f" && j > pos - {a['window']}" if mode == "sliding" else "")
        lines.append(f"        if (!({cond})) s = -INFINITY;")
    elif mode in ("custom", "bias"):
        mshape = k.graph.shape_of(node.inputs[3])
        at = broadcast_index((b, hq, sq, sk), mshape.dims, ["bb", "h", "i", "j"])
        if mode == "custom":
            lines.append(f"        if (!M[{at}]) s = -INFINITY;")
        else:
            lines.append(f"        s = s + {load(mdt, 'M', at)};")
    mask_code = "\n".join(lines)
    qload = load(dt, "Q", "qo + c")
    kload = load(dt, "K", "ko + (long)j * " + str(d) + " + c")
    vload = load(dt, "V", f"vo + (long)jj * {dv} + dd")
    body = f"""  __local {t} qs[{max(d, 1)}];
  __local {t} ps[{size}];
  __local {t} red[{size}];
  const int lid = get_local_id(0);
  for (long row = get_group_id(0); row < {rows}; row += get_num_groups(0)) {{
    const long i = row % {sq}, h = (row / {sq}) % {hq}, bb = row / {sq * hq};
    const long kvh = h / {group};
    const long qo = row * {d}, ko = (bb * {hkv} + kvh) * {sk * d}, vo = (bb * {hkv} + kvh) * {sk * dv};
    const long pos = i + {sk - sq};
    for (int c = lid; c < {d}; c += {size}) qs[c] = {qload};
    barrier(CLK_LOCAL_MEM_FENCE);
    {t} m = -INFINITY, l = 0;
    {t} acc[{regs}];
    for (int r = 0; r < {regs}; r++) acc[r] = 0;
    for (long j0 = 0; j0 < {sk}; j0 += {size}) {{
      const long j = j0 + lid;
      {t} s = -INFINITY;
      if (j < {sk}) {{
        s = 0;
        for (int c = 0; c < {d}; c++) s += qs[c] * {kload};
        s = {score};
{mask_code}
      }}
      {t} tm = s;
{wg_reduce('tm', 'red', size, lambda p, q: f"(({p}) > ({q}) || isnan({p})) ? ({p}) : ({q})")}
      const {t} mn = (m > tm || isnan(m)) ? m : tm;
      const {t} base = (mn == -INFINITY) ? ({t})0 : mn;
      const {t} f = exp(m - base);
      const {t} p = exp(s - base);
      ps[lid] = p;
      {t} tl = p;
{wg_reduce('tl', 'red', size, lambda p_, q_: f"(({p_}) + ({q_}))")}
      l = l * f + tl;
      m = mn;
      const int nk = min((long){size}, {sk} - j0);
      for (int r = 0; r < {regs}; r++) {{
        const int dd = lid + r * {size};
        if (dd < {dv}) {{
          {t} sum = 0;
          for (int u = 0; u < nk; u++) {{ const long jj = j0 + u; sum += ps[u] * {vload}; }}
          acc[r] = acc[r] * f + sum;
        }}
      }}
      barrier(CLK_LOCAL_MEM_FENCE);
    }}
    const {t} denom = (l == 0) ? ({t})1 : l;
    for (int r = 0; r < {regs}; r++) {{
      const int dd = lid + r * {size};
      if (dd < {dv}) {{ {store(dt, 'O', f'row * {dv} + dd', 'acc[r] / denom')} }}
    }}
    barrier(CLK_LOCAL_MEM_FENCE);
  }}"""
    k.kernel(params, body, min(rows, k.max_groups()) * size, size)


GENERATORS = {"layer_norm": layer_norm, "rms_norm": layer_norm, "group_norm": group_norm, "rope": rope,
              "attention": attention}
