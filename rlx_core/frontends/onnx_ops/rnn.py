"""Recurrent layers (RNN, GRU, LSTM) and the newer recurrences LinearAttention and
CausalConvWithState, on the IR's ``scan``.

Per direction, the input projection ``X W^T + Wb`` of all time steps is one matmul
before the scan; the scan body carries the hidden (and cell) state plus the recurrent
weights (subgraphs see only their operands) and applies ONNX's gate equations. With
``sequence_lens``, steps past a sequence's length keep its state and output zeros; the
reverse direction reverses each sequence within its own length.
"""
from __future__ import annotations

import numpy as np

from ...ir.dtypes import DType
from ..onnx import onnx_op
from .tensor import reverse_within_lengths

# activation name -> f(g, x, alpha, beta); the defaults of alpha/beta are ONNX's
_ACTIVATIONS = {
    "Relu": (lambda g, x, a, b: g.relu(x), None, None),
    "Tanh": (lambda g, x, a, b: g.tanh(x), None, None),
    "Sigmoid": (lambda g, x, a, b: g.sigmoid(x), None, None),
    "Affine": (lambda g, x, a, b: x * a + b, 1.0, 0.0),
    "LeakyRelu": (lambda g, x, a, b: g.where(x < 0, x * a, x), 0.01, None),
    "ThresholdedRelu": (lambda g, x, a, b: g.where(x > a, x, 0.0), 1.0, None),
    "ScaledTanh": (lambda g, x, a, b: g.tanh(x * b) * a, 1.0, 1.0),
    "HardSigmoid": (lambda g, x, a, b: g.min(g.max(x * a + b, 0.0), 1.0), 0.2, 0.5),
    "Elu": (lambda g, x, a, b: g.where(x < 0, (g.exp(x) - 1.0) * a, x), 1.0, None),
    "Softsign": (lambda g, x, a, b: x / (g.abs(x) + 1.0), None, None),
    "Softplus": (lambda g, x, a, b: g.softplus(x), None, None),
}
_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
_DEFAULT_ACTIVATIONS = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}


def _activations(ctx, directions: int):
    """Per direction, the layer's activation functions ``f(g, x)`` (ONNX lists them for
    every direction in turn, alpha/beta consumed by the functions that take them)."""
    names = ctx.attr("activations") or _DEFAULT_ACTIVATIONS[ctx.op_type] * directions
    alphas, betas = list(ctx.attr("activation_alpha", [])), list(ctx.attr("activation_beta", []))
    per_layer = len(_DEFAULT_ACTIVATIONS[ctx.op_type])
    if len(names) != per_layer * directions:
        raise ctx.error(f"{ctx.op_type} needs {per_layer} activations per direction, got {names}")
    funcs = []
    for name in names:
        if name not in _ACTIVATIONS:
            raise ctx.unsupported(f"activation {name!r}")
        fn, alpha, beta = _ACTIVATIONS[name]
        a = alphas.pop(0) if alpha is not None and alphas else alpha
        b = betas.pop(0) if beta is not None and betas else beta
        funcs.append(lambda g, x, fn=fn, a=a, b=b: fn(g, x, a, b))
    return [funcs[d * per_layer:(d + 1) * per_layer] for d in range(directions)]


@onnx_op("RNN", "GRU", "LSTM")
def recurrent(ctx):
    g = ctx.g
    op = ctx.op_type
    x, w, r = ctx.input(0), ctx.input(1), ctx.input(2)
    if ctx.attr("layout", 0):
        x = g.transpose(x, [1, 0, 2])  # [batch, seq, in] -> [seq, batch, in]
    seq, batch, _ = x.dims
    hidden = ctx.attr("hidden_size") or r.dims[-1]
    direction = ctx.attr("direction", "forward")
    directions = 2 if direction == "bidirectional" else 1
    gates = _GATES[op]
    lens = ctx.input(4)
    lens = None if lens is None else g.cast(lens, DType.I64)
    funcs = _activations(ctx, directions)
    ys, finals = [], []
    for d in range(directions):
        reverse = direction == "reverse" or d == 1
        w_d, r_d = _pick(g, w, d), _pick(g, r, d)
        wb = rb = None
        if ctx.has(3):
            biases = _pick(g, ctx.input(3), d)
            wb, rb = g.split(biases, [gates * hidden, gates * hidden])
        projected = g.matmul(x, g.transpose(w_d))  # [seq, batch, gates*hidden]
        if wb is not None:
            projected = projected + wb
        if reverse:
            projected = _reverse_time(g, projected, lens)
        state = [_initial(ctx, 5, d, batch, hidden, x.dtype)]
        if op == "LSTM":
            state.append(_initial(ctx, 6, d, batch, hidden, x.dtype))
        y, final = _scan(ctx, op, projected, state, r_d, rb, _pick(g, ctx.input(7), d) if op == "LSTM"
                         and ctx.has(7) else None, lens, funcs[d], hidden)
        ys.append(_reverse_time(g, y, lens) if reverse else y)
        finals.append(final)
    y = g.concat([g.unsqueeze(t, [1]) for t in ys], axis=1) if directions > 1 else g.unsqueeze(ys[0], [1])
    outs = [y] + [g.concat([g.unsqueeze(f[i], [0]) for f in finals], axis=0) for i in range(len(finals[0]))]
    if ctx.attr("layout", 0):  # Y [batch, seq, dirs, hidden]; Y_h, Y_c [batch, dirs, hidden]
        outs = [g.transpose(outs[0], [2, 0, 1, 3])] + [g.transpose(o, [1, 0, 2]) for o in outs[1:]]
    return outs


def _pick(g, v, d):
    """Direction ``d`` of a ``[directions, ...]`` input."""
    return g.reshape(g.slice(v, [d], [d + 1], axes=[0]), v.dims[1:])


def _initial(ctx, index, d, batch, hidden, dtype):
    v = ctx.input(index)
    return _pick(ctx.g, v, d) if v is not None else ctx.g.constant(np.zeros((batch, hidden), dtype.np))


def _reverse_time(g, v, lens):
    """Reverse the time axis (0); with ``lens [batch]``, each sequence within its length."""
    if lens is None:
        seq = v.dims[0]
        return g.slice(v, [seq - 1], [-seq - 1], [-1], axes=[0])
    return reverse_within_lengths(g, v, lens, 0, 1)


def _scan(ctx, op, projected, state, r, rb, peep, lens, funcs, hidden):
    """Run the recurrence; returns the per-step outputs [seq, batch, hidden] and the
    final state values."""
    g = ctx.g
    seq = projected.dims[0]
    xs = [projected] + ([g.constant(np.arange(seq, dtype=np.int64))] if lens is not None else [])
    extras = [r] + [v for v in (rb, peep, lens) if v is not None]
    n_state = len(state)
    clip = ctx.attr("clip")
    linear_before_reset = bool(ctx.attr("linear_before_reset", 0))
    input_forget = bool(ctx.attr("input_forget", 0))

    def body(sub, *args):
        carry, rest = list(args[:n_state]), args[n_state:]
        r_, rest = rest[0], list(rest[1:])
        rb_ = rest.pop(0) if rb is not None else None
        peep_ = rest.pop(0) if peep is not None else None
        lens_ = rest.pop(0) if lens is not None else None
        xt = rest[0]
        t = rest[1] if lens is not None else None
        gate_in = (lambda v: sub.min(sub.max(v, -clip), clip)) if clip else (lambda v: v)
        new = _cell(sub, op, xt, carry, r_, rb_, peep_, funcs, hidden, gate_in, linear_before_reset,
                    input_forget)
        if lens_ is not None:
            live = sub.reshape(t < lens_, [-1, 1])  # [batch, 1]
            new = [sub.where(live, n, c) for n, c in zip(new, carry)]
            out = sub.where(live, new[0], sub.as_value(0.0, new[0].dtype))
        else:
            out = new[0]
        return new + [r_] + [v for v in (rb_, peep_, lens_) if v is not None], out

    final, y = g.scan(body, state + extras, xs)
    return y, list(final[:n_state])


def _cell(g, op, xt, carry, r, rb, peep, funcs, hidden, gate_in, linear_before_reset, input_forget):
    """One time step: ONNX's RNN / GRU / LSTM equations. ``xt`` already holds ``X W^T + Wb``."""
    h = carry[0]
    split = lambda v: g.split(v, [hidden] * (v.dims[-1] // hidden), axis=-1)  # noqa: E731
    if op == "RNN":
        pre = xt + g.matmul(h, g.transpose(r))
        return [funcs[0](g, gate_in(pre + rb if rb is not None else pre))]
    if op == "GRU":
        # The recurrent products of the gates that read h itself in ONE matmul: z and r,
        # and h's (linear_before_reset) -- a step's cost on the CPU is mostly per call.
        xz, xr, xh = split(xt)
        together = 3 if linear_before_reset else 2
        rec = g.matmul(h, g.transpose(r if together == 3 else g.slice(r, [0], [2 * hidden], axes=[0])))
        bh = None
        if rb is not None:
            rec = rec + (rb if together == 3 else g.slice(rb, [0], [2 * hidden]))
            bh = g.slice(rb, [2 * hidden], [3 * hidden])
        hz, hr, *h_h = split(rec)
        z = funcs[0](g, gate_in(xz + hz))
        reset = funcs[0](g, gate_in(xr + hr))
        if linear_before_reset:
            candidate = xh + reset * h_h[0]
        else:
            candidate = xh + g.matmul(reset * h, g.transpose(g.slice(r, [2 * hidden], [3 * hidden], axes=[0])))
            candidate = candidate if bh is None else candidate + bh
        hh = funcs[1](g, gate_in(candidate))
        return [(1.0 - z) * hh + z * h]
    c = carry[1]  # LSTM: gates i, o, f, c
    pre = xt + g.matmul(h, g.transpose(r))
    if rb is not None:
        pre = pre + rb
    pi, po, pf, pc = split(pre)
    peep_i, peep_o, peep_f = g.split(peep, [hidden] * 3) if peep is not None else (None, None, None)
    i = funcs[0](g, gate_in(pi + c * peep_i if peep is not None else pi))
    f = 1.0 - i if input_forget else funcs[0](g, gate_in(pf + c * peep_f if peep is not None else pf))
    c_new = f * c + i * funcs[1](g, gate_in(pc))
    o = funcs[0](g, gate_in(po + c_new * peep_o if peep is not None else po))
    return [o * funcs[2](g, c_new), c_new]


# --- newer recurrences ----------------------------------------------------------------------
@onnx_op("CausalConvWithState")
def causal_conv_with_state(ctx):
    """Depthwise causal 1-D convolution over ``[past_state (or zeros), input]``, an
    optional SiLU, and the last ``k - 1`` positions of that padded input as the new state."""
    g = ctx.g
    x, w, b, past = ctx.input(0), ctx.input(1), ctx.input(2), ctx.input(3)
    batch, channels, _ = x.dims
    k = w.dims[2]
    if past is None:
        past = g.constant(np.zeros((batch, channels, k - 1), x.dtype.np))
    padded = g.concat([past, x], axis=2)
    y = g.conv(padded, w, b, groups=channels)
    activation = ctx.attr("activation", "none")
    if activation in ("silu", "swish"):
        y = g.silu(y)
    elif activation != "none":
        raise ctx.error(f"activation must be none, silu or swish, got {activation!r}")
    length = padded.dims[2]
    return [y, g.slice(padded, [length - (k - 1)], [length], axes=[2])]


@onnx_op("LinearAttention")
def linear_attention(ctx):
    """Linear attention with a ``[B, Hkv, dk, dv]`` state, step by step (an IR scan over
    time): decay ``S *= exp(g_t)`` (gated rules), delta correction ``v_t <- beta_t (v_t -
    S^T k_t)`` (delta rules), write ``S += k_t v_t^T``, read ``o_t = scale q_t S`` (query
    head h reads KV head h // (Hq / Hkv)). Computed in f32."""
    g = ctx.g
    rule = ctx.attr("update_rule", "gated_delta")
    if rule not in ("linear", "gated", "delta", "gated_delta"):
        raise ctx.error(f"update_rule must be linear, gated, delta or gated_delta, got {rule!r}")
    hq, hkv = ctx.attr("q_num_heads"), ctx.attr("kv_num_heads")
    q, k, v, past, decay, beta = (ctx.input(i) for i in range(6))
    out_dtype = q.dtype
    q, k, v = (_heads_first(g, t, h) for t, h in ((q, hq), (k, hkv), (v, hkv)))  # [T, B, H, d]
    steps, batch, _, dk = k.dims
    dv = v.dims[-1]
    state_dtype = past.dtype if past is not None else out_dtype
    state = g.cast(past, DType.F32) if past is not None else g.constant(np.zeros((batch, hkv, dk, dv), np.float32))
    scale = ctx.attr("scale") or 1 / np.sqrt(dk)
    xs = [q, k, v]
    gated, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    if gated:
        per_head = decay.dims[-1] == hkv
        xs.append(_heads_first(g, decay, hkv) if not per_head else
                  g.reshape(g.transpose(g.cast(decay, DType.F32), [1, 0, 2]), [steps, batch, hkv, 1]))
    if delta:
        xs.append(g.reshape(g.transpose(g.cast(beta, DType.F32), [1, 0, 2]), [steps, batch, beta.dims[-1], 1]))

    def body(sub, s, q_t, k_t, v_t, *rest):
        rest = list(rest)
        if gated:
            s = s * sub.unsqueeze(sub.exp(rest.pop(0)), [-1])
        if delta:
            retrieved = sub.reshape(sub.matmul(sub.unsqueeze(k_t, [2]), s), v_t.dims)  # [B, H, dv]
            v_t = rest.pop(0) * (v_t - retrieved)
        s = s + sub.unsqueeze(k_t, [-1]) * sub.unsqueeze(v_t, [2])
        read = s if hq == hkv else sub.reshape(sub.expand(sub.unsqueeze(s, [2]), (batch, hkv, hq // hkv, dk, dv)),
                                               (batch, hq, dk, dv))
        out = sub.reshape(sub.matmul(sub.unsqueeze(q_t, [2]), read), (batch, hq, dv)) * float(scale)
        return s, out

    final, outs = g.scan(body, state, xs)  # outs [T, B, Hq, dv]
    y = g.reshape(g.transpose(outs, [1, 0, 2, 3]), [batch, steps, hq * dv])
    return [g.cast(y, out_dtype), g.cast(final, state_dtype)]


def _heads_first(g, t, heads):
    """``[B, T, H*d]`` -> ``[T, B, H, d]`` in f32 (time first, for the scan)."""
    b, steps, width = t.dims
    return g.transpose(g.reshape(g.cast(t, DType.F32), [b, steps, heads, width // heads]), [1, 0, 2, 3])
