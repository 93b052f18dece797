"""The CUDA C every generated kernel starts with: 16-bit float conversions, complex
numbers, and one overloaded device function per elementwise semantics.

It includes no header (NVRTC then needs no include path): f16 conversions are single
PTX ``cvt`` instructions and bf16 conversions are bit operations (round to nearest
even, NaN kept quiet), exactly what numpy + ml_dtypes do on the host. Integer
add/sub/mul/neg go through unsigned arithmetic so that overflow wraps (signed
overflow is undefined in C++). Float semantics follow numpy: ``max``/``min``
propagate NaN, ``mod`` is floor-mod with the divisor's sign, ``round`` is half to even.
"""
from __future__ import annotations

__all__ = ["PREAMBLE", "KERNEL_NAME", "BLOCK_REDUCE"]

KERNEL_NAME = "rlx_kernel"

PREAMBLE = r"""
#define RLX_D __device__ __forceinline__
struct __align__(8) rlx_c64 { float re, im; };
struct __align__(16) rlx_c128 { double re, im; };

RLX_D float rlx_inf_f() { return __int_as_float(0x7f800000); }
RLX_D float rlx_nan_f() { return __int_as_float(0x7fc00000); }
RLX_D double rlx_inf_d() { return __longlong_as_double(0x7ff0000000000000LL); }
RLX_D double rlx_nan_d() { return __longlong_as_double(0x7ff8000000000000LL); }
RLX_D float rlx_nan(float) { return rlx_nan_f(); }
RLX_D double rlx_nan(double) { return rlx_nan_d(); }

/* ---- 16-bit floats ------------------------------------------------------------ */
RLX_D float rlx_h2f(unsigned short h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
RLX_D unsigned short rlx_f2h(float f) { unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
RLX_D unsigned short rlx_f2h(double d) { unsigned short h; asm("cvt.rn.f16.f64 %0, %1;" : "=h"(h) : "d"(d)); return h; }
RLX_D float rlx_bf2f(unsigned short b) { return __uint_as_float(((unsigned int)b) << 16); }
RLX_D unsigned short rlx_f2bf(float f) {
  unsigned int u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
}
RLX_D unsigned short rlx_f2bf(double d) { return rlx_f2bf((float)d); }
RLX_D float rlx_round_f16(float v) { return rlx_h2f(rlx_f2h(v)); }
RLX_D float rlx_round_bf16(float v) { return rlx_bf2f(rlx_f2bf(v)); }

/* ---- complex ---------------------------------------------------------------------- */
RLX_D rlx_c64 rlx_cplx(float re, float im) { rlx_c64 z; z.re = re; z.im = im; return z; }
RLX_D rlx_c128 rlx_cplx(double re, double im) { rlx_c128 z; z.re = re; z.im = im; return z; }
#define RLX_COMPLEX_OPS(C, R, HYPOT)                                                         \
  RLX_D C rlx_add(C a, C b) { return rlx_cplx(a.re + b.re, a.im + b.im); }                  \
  RLX_D C rlx_sub(C a, C b) { return rlx_cplx(a.re - b.re, a.im - b.im); }                  \
  RLX_D C rlx_mul(C a, C b) { return rlx_cplx(a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re); } \
  RLX_D C rlx_div(C a, C b) {                                                                  \
    R s = HYPOT(b.re, b.im);                                                                    \
    R br = b.re / s, bi = b.im / s;                                                             \
    return rlx_cplx((a.re * br + a.im * bi) / s, (a.im * br - a.re * bi) / s);                  \
  }                                                                                             \
  RLX_D C rlx_neg(C a) { return rlx_cplx(-a.re, -a.im); }                                      \
  RLX_D R rlx_abs(C a) { return HYPOT(a.re, a.im); }                                           \
  RLX_D bool rlx_eq(C a, C b) { return a.re == b.re && a.im == b.im; }                         \
  RLX_D bool rlx_ne(C a, C b) { return !(a.re == b.re && a.im == b.im); }
RLX_COMPLEX_OPS(rlx_c64, float, hypotf)
RLX_COMPLEX_OPS(rlx_c128, double, hypot)

/* ---- arithmetic ------------------------------------------------------------------- */
template <typename T> RLX_D T rlx_add(T a, T b) { return (T)(a + b); }
template <typename T> RLX_D T rlx_sub(T a, T b) { return (T)(a - b); }
template <typename T> RLX_D T rlx_mul(T a, T b) { return (T)(a * b); }
template <typename T> RLX_D T rlx_neg(T a) { return (T)(-a); }
#define RLX_WRAPPING(T, U)                                                          \
  RLX_D T rlx_add(T a, T b) { return (T)((U)a + (U)b); }                           \
  RLX_D T rlx_sub(T a, T b) { return (T)((U)a - (U)b); }                           \
  RLX_D T rlx_mul(T a, T b) { return (T)((U)a * (U)b); }                           \
  RLX_D T rlx_neg(T a) { return (T)((U)0 - (U)a); }
RLX_WRAPPING(int, unsigned int)
RLX_WRAPPING(long long, unsigned long long)
RLX_D signed char rlx_mul(signed char a, signed char b) { return (signed char)((int)a * (int)b); }
RLX_D short rlx_mul(short a, short b) { return (short)((int)a * (int)b); }
RLX_D unsigned char rlx_mul(unsigned char a, unsigned char b) { return (unsigned char)((unsigned)a * (unsigned)b); }

template <typename T> RLX_D T rlx_div(T a, T b) { return (T)(a / b); }
template <typename T> RLX_D T rlx_abs(T a) { return a < 0 ? rlx_neg(a) : a; }
RLX_D float rlx_abs(float a) { return fabsf(a); }
RLX_D double rlx_abs(double a) { return fabs(a); }

template <typename T> RLX_D T rlx_max(T a, T b) { return a > b ? a : b; }
template <typename T> RLX_D T rlx_min(T a, T b) { return a < b ? a : b; }
#define RLX_NAN_MINMAX(T)                                                                    \
  RLX_D T rlx_max(T a, T b) { return (isnan(a) || isnan(b)) ? rlx_nan(a) : (a > b ? a : b); } \
  RLX_D T rlx_min(T a, T b) { return (isnan(a) || isnan(b)) ? rlx_nan(a) : (a < b ? a : b); }
RLX_NAN_MINMAX(float)
RLX_NAN_MINMAX(double)

/* floor-mod (sign of b) and C fmod (sign of a) */
template <typename T> RLX_D T rlx_mod(T a, T b) {
  T r = (T)(a % b);
  return (r != 0 && ((r < 0) != (b < 0))) ? (T)(r + b) : r;
}
template <typename T> RLX_D T rlx_fmod(T a, T b) { return (T)(a % b); }
#define RLX_FLOAT_MOD(T, FMOD, COPYSIGN)                                                   \
  RLX_D T rlx_fmod(T a, T b) { return FMOD(a, b); }                                       \
  RLX_D T rlx_mod(T a, T b) {                                                               \
    T r = FMOD(a, b);                                                                        \
    if (b == 0) return r;                                                                    \
    if (r != 0) { if ((b < 0) != (r < 0)) r += b; } else { r = COPYSIGN((T)0, b); }         \
    return r;                                                                                \
  }
RLX_FLOAT_MOD(float, fmodf, copysignf)
RLX_FLOAT_MOD(double, fmod, copysign)

template <typename T> RLX_D T rlx_clamp(T x, T lo, T hi) { return x < lo ? lo : (x > hi ? hi : x); }
template <typename T> RLX_D T rlx_sign(T x) { return (T)((x > 0) - (x < 0)); }
RLX_D float rlx_sign(float x) { return isnan(x) ? x : (float)((x > 0) - (x < 0)); }
RLX_D double rlx_sign(double x) { return isnan(x) ? x : (double)((x > 0) - (x < 0)); }
template <typename T> RLX_D T rlx_relu(T x) { return x > 0 ? x : (T)0; }
RLX_D float rlx_relu(float x) { return (x > 0 || isnan(x)) ? x : 0.0f; }
RLX_D double rlx_relu(double x) { return (x > 0 || isnan(x)) ? x : 0.0; }

/* ---- transcendental functions, overloaded on float / double ----------------------- */
#define RLX_UNARY_MATH(NAME, FF, FD)                   \
  RLX_D float NAME(float x) { return FF(x); }          \
  RLX_D double NAME(double x) { return FD(x); }
RLX_UNARY_MATH(rlx_exp, expf, exp)
RLX_UNARY_MATH(rlx_log, logf, log)
RLX_UNARY_MATH(rlx_sqrt, sqrtf, sqrt)
RLX_UNARY_MATH(rlx_sin, sinf, sin)
RLX_UNARY_MATH(rlx_cos, cosf, cos)
RLX_UNARY_MATH(rlx_tan, tanf, tan)
RLX_UNARY_MATH(rlx_atan, atanf, atan)
RLX_UNARY_MATH(rlx_tanh, tanhf, tanh)
RLX_UNARY_MATH(rlx_erf, erff, erf)
RLX_UNARY_MATH(rlx_floor, floorf, floor)
RLX_UNARY_MATH(rlx_ceil, ceilf, ceil)
RLX_UNARY_MATH(rlx_round, rintf, rint)
RLX_UNARY_MATH(rlx_log1p, log1pf, log1p)
RLX_D float rlx_pow(float a, float b) { return powf(a, b); }
RLX_D double rlx_pow(double a, double b) { return pow(a, b); }
RLX_D float rlx_atan2(float a, float b) { return atan2f(a, b); }
RLX_D double rlx_atan2(double a, double b) { return atan2(a, b); }

template <typename T> RLX_D T rlx_rsqrt(T x) { return (T)1 / rlx_sqrt(x); }
template <typename T> RLX_D T rlx_reciprocal(T x) { return (T)1 / x; }
template <typename T> RLX_D T rlx_sigmoid(T x) {
  T e = rlx_exp(-rlx_abs(x));
  return x >= 0 ? (T)1 / ((T)1 + e) : e / ((T)1 + e);
}
template <typename T> RLX_D T rlx_silu(T x) { return x * rlx_sigmoid(x); }
template <typename T> RLX_D T rlx_softplus(T x) { return rlx_max(x, (T)0) + rlx_log1p(rlx_exp(-rlx_abs(x))); }
template <typename T> RLX_D T rlx_gelu(T x) { return (T)0.5 * x * ((T)1 + rlx_erf(x / (T)1.4142135623730951)); }
template <typename T> RLX_D T rlx_gelu_tanh(T x) {
  return (T)0.5 * x * ((T)1 + rlx_tanh((T)0.7978845608028654 * (x + (T)0.044715 * (x * x * x))));
}
"""

# Block-wide reduction over ``blockDim.x`` (a power of two) threads, for kernels that
# define ``RLX_ACC`` (the accumulator type) and ``rlx_combine(RLX_ACC, RLX_ACC)``.
BLOCK_REDUCE = r"""
RLX_D RLX_ACC rlx_block_reduce(RLX_ACC v, RLX_ACC* sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sh[threadIdx.x] = rlx_combine(sh[threadIdx.x], sh[threadIdx.x + s]);
    __syncthreads();
  }
  RLX_ACC r = sh[0];
  __syncthreads();
  return r;
}
"""
