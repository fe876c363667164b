#ifndef KILN_CUDA_PRELUDE
#define KILN_CUDA_PRELUDE
// ---- kiln prelude: op semantics shared by every kernel (codegen/src/cuda_math.cpp) ----
#define KILN_DF __device__ __forceinline__
KILN_DF int kiln_add(int a, int b) { return (int)((unsigned)a + (unsigned)b); }
KILN_DF long long kiln_add(long long a, long long b) { return (long long)((unsigned long long)a + (unsigned long long)b); }
KILN_DF int kiln_sub(int a, int b) { return (int)((unsigned)a - (unsigned)b); }
KILN_DF long long kiln_sub(long long a, long long b) { return (long long)((unsigned long long)a - (unsigned long long)b); }
KILN_DF int kiln_mul(int a, int b) { return (int)((unsigned)a * (unsigned)b); }
KILN_DF long long kiln_mul(long long a, long long b) { return (long long)((unsigned long long)a * (unsigned long long)b); }
KILN_DF int kiln_neg(int a) { return (int)(0u - (unsigned)a); }
KILN_DF long long kiln_neg(long long a) { return (long long)(0ull - (unsigned long long)a); }
KILN_DF int kiln_abs(int a) { return a < 0 ? kiln_neg(a) : a; }
KILN_DF long long kiln_abs(long long a) { return a < 0 ? kiln_neg(a) : a; }
KILN_DF int kiln_max(int a, int b) { return a > b ? a : b; }
KILN_DF long long kiln_max(long long a, long long b) { return a > b ? a : b; }
KILN_DF int kiln_min(int a, int b) { return a < b ? a : b; }
KILN_DF long long kiln_min(long long a, long long b) { return a < b ? a : b; }
KILN_DF long long kiln_udiv(long long a, long long b) { return (long long)((unsigned long long)a / (unsigned long long)b); }
KILN_DF long long kiln_umod(long long a, long long b) { return (long long)((unsigned long long)a % (unsigned long long)b); }
// Four consecutive floats; one 128-bit access where the address is 16-byte aligned.
struct alignas(16) kiln_f4 { float x, y, z, w; };
KILN_DF kiln_f4 kiln_load4(const float* p) {
  if (((unsigned long long)p & 15) == 0) return *reinterpret_cast<const kiln_f4*>(p);
  return kiln_f4{p[0], p[1], p[2], p[3]};
}
KILN_DF void kiln_store4(float* p, kiln_f4 v) {
  if (((unsigned long long)p & 15) == 0) *reinterpret_cast<kiln_f4*>(p) = v;
  else { p[0] = v.x; p[1] = v.y; p[2] = v.z; p[3] = v.w; }
}
KILN_DF float kiln_max(float a, float b) {
  if (a != a || b != b) return a + b;
  if (a == b) return __float_as_int(a) < 0 ? b : a;
  return a > b ? a : b;
}
KILN_DF double kiln_max(double a, double b) {
  if (a != a || b != b) return a + b;
  if (a == b) return __double_as_longlong(a) < 0 ? b : a;
  return a > b ? a : b;
}
KILN_DF float kiln_min(float a, float b) {
  if (a != a || b != b) return a + b;
  if (a == b) return __float_as_int(a) < 0 ? a : b;
  return a < b ? a : b;
}
KILN_DF double kiln_min(double a, double b) {
  if (a != a || b != b) return a + b;
  if (a == b) return __double_as_longlong(a) < 0 ? a : b;
  return a < b ? a : b;
}
KILN_DF int kiln_to_i32(double x) {
  if (x != x) return 0;
  if (x >= 2147483648.0) return 2147483647;
  if (x <= -2147483649.0) return -2147483647 - 1;
  return (int)x;
}
KILN_DF long long kiln_to_i64(double x) {
  if (x != x) return 0;
  if (x >= 9223372036854775808.0) return 9223372036854775807LL;
  if (x < -9223372036854775808.0) return -9223372036854775807LL - 1;
  return (long long)x;
}
template <class T> KILN_DF T kiln_ipow(T x, T e) {
  typedef unsigned long long U;
  const int w = (int)sizeof(T) * 8;
  U r = 1, base = (U)x;
  for (int bit = 0; bit + 1 < w; ++bit) {
    if ((e >> bit) & 1) r = r * base;
    base = base * base;
  }
  if (e >= 0) return (T)r;
  if (x == 1) return 1;
  if (x == -1) return (e & 1) ? -1 : 1;
  return 0;
}
KILN_DF unsigned long long kiln_random_bits(unsigned long long seed, long long counter) {
  unsigned long long z = seed * 0x9e3779b97f4a7c15ull + (unsigned long long)counter * 0xd1b54a32d192ed03ull + 0x632be59bd9b4e019ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
KILN_DF float kiln_uniform_f32(unsigned long long seed, long long c) { return (float)(kiln_random_bits(seed, c) >> 40) * 0x1p-24f; }
KILN_DF double kiln_uniform_f64(unsigned long long seed, long long c) { return (double)(kiln_random_bits(seed, c) >> 11) * 0x1p-53; }
__device__ __forceinline__ float kiln_pow2_f32(int n) {
  return __int_as_float((int)((unsigned int)(n + 127) << 23));
}
__device__ __forceinline__ float kiln_exp_f32(float x) {
  const float xc = fminf(fmaxf(x, (-0x1.ap+6f)), 0x1.64p+6f);
  const float nf = rintf(xc * 0x1.715476p+0f);
  const float r = fmaf(-nf, 0x1.7f7d1cp-20f, fmaf(-nf, 0x1.62e4p-1f, xc));
  float q = 0x1.a01a02p-16f;
  q = fmaf(q, r, 0x1.a01a02p-13f);
  q = fmaf(q, r, 0x1.6c16c2p-10f);
  q = fmaf(q, r, 0x1.111112p-7f);
  q = fmaf(q, r, 0x1.555556p-5f);
  q = fmaf(q, r, 0x1.555556p-3f);
  q = fmaf(q, r, 0x1p-1f);
  const float er = fmaf(r * r, q, r);
  const float p = 0x1p+0f + er;
  const int n = (int)nf;
  const int n1 = n >> 1;
  const float y = (p * kiln_pow2_f32(n1)) * kiln_pow2_f32(n - n1);
  return x != x ? x : y;
}
__device__ __forceinline__ float kiln_expm1_f32(float x) {
  const float xc = fminf(fmaxf(x, (-0x1.4p+4f)), 0x1.6p+6f);
  const float nf = rintf(xc * 0x1.715476p+0f);
  const float r = fmaf(-nf, 0x1.7f7d1cp-20f, fmaf(-nf, 0x1.62e4p-1f, xc));
  float q = 0x1.a01a02p-16f;
  q = fmaf(q, r, 0x1.a01a02p-13f);
  q = fmaf(q, r, 0x1.6c16c2p-10f);
  q = fmaf(q, r, 0x1.111112p-7f);
  q = fmaf(q, r, 0x1.555556p-5f);
  q = fmaf(q, r, 0x1.555556p-3f);
  q = fmaf(q, r, 0x1p-1f);
  const float er = fmaf(r * r, q, r);
  const float t = kiln_pow2_f32((int)nf);
  const float y = fmaf(t, er, t - 0x1p+0f);
  return x != x ? x : (x > 0x1.6p+6f ? __int_as_float(0x7f800000) : y);
}
__device__ __forceinline__ float kiln_log_f32(float x) {
  const bool tiny = x < 0x1p-126f;
  const float xs = tiny ? x * 0x1p+24f : x;
  const unsigned int bits = (unsigned int)__float_as_int(xs) + 0x4afb0du;
  const int k = (int)(bits >> 23) - 127 + (tiny ? -24 : 0);
  const float f = __int_as_float((int)((bits & 0x7fffffu) + 0x3f3504f3u)) - 0x1p+0f;
  const float s = f / (0x1p+1f + f);
  const float z = s * s;
  float h = 0x1.745d18p-3f;
  h = fmaf(h, z, 0x1.c71c72p-3f);
  h = fmaf(h, z, 0x1.24924ap-2f);
  h = fmaf(h, z, 0x1.99999ap-2f);
  h = fmaf(h, z, 0x1.555556p-1f);
  const float hfsq = (0x1p-1f * f) * f;
  const float kf = (float)k;
  const float tail = fmaf(s, fmaf(z, h, hfsq), kf * 0x1.7f7d1cp-20f);
  const float y = fmaf(kf, 0x1.62e4p-1f, f - (hfsq - tail));
  if (x != x) return x;
  if (x == __int_as_float(0x7f800000)) return x;
  if (x < 0x0p+0f) return __int_as_float(0x7fc00000);
  return x == 0x0p+0f ? -__int_as_float(0x7f800000) : y;
}
__device__ __forceinline__ float kiln_sin_f32(float x) {
  const bool finite = fabsf(x) < __int_as_float(0x7f800000);
  const double xd = (double)(finite ? x : 0x0p+0f);
  const double nf = rint(xd * 0x1.45f306dc9c883p-1);
  double rd = fma(-nf, 0x1.921fb544p+0, xd);
  rd = fma(-nf, 0x1.0b4611a626331p-34, rd);
  rd = fmin(fmax(rd, (-0x1.921ff2e48e8a7p-1)), 0x1.921ff2e48e8a7p-1);
  const float r = (float)rd;
  const int q = (int)(nf - 4.0 * floor(nf * 0.25));
  const float z = r * r;
  float ps = (-0x1.ae6456p-26f);
  ps = fmaf(ps, z, 0x1.71de3ap-19f);
  ps = fmaf(ps, z, (-0x1.a01a02p-13f));
  ps = fmaf(ps, z, 0x1.111112p-7f);
  ps = fmaf(ps, z, (-0x1.555556p-3f));
  float pc = (-0x1.27e4fcp-22f);
  pc = fmaf(pc, z, 0x1.a01a02p-16f);
  pc = fmaf(pc, z, (-0x1.6c16c2p-10f));
  pc = fmaf(pc, z, 0x1.555556p-5f);
  pc = fmaf(pc, z, (-0x1p-1f));
  const float s = fmaf(r * z, ps, r);
  const float c = fmaf(z, pc, 0x1p+0f);
  float v = (q & 1) ? c : s;
  v = (q & 2) ? -v : v;
  v = x == 0x0p+0f ? x : v;
  return finite ? v : __int_as_float(0x7fc00000);
}
__device__ __forceinline__ float kiln_cos_f32(float x) {
  const bool finite = fabsf(x) < __int_as_float(0x7f800000);
  const double xd = (double)(finite ? x : 0x0p+0f);
  const double nf = rint(xd * 0x1.45f306dc9c883p-1);
  double rd = fma(-nf, 0x1.921fb544p+0, xd);
  rd = fma(-nf, 0x1.0b4611a626331p-34, rd);
  rd = fmin(fmax(rd, (-0x1.921ff2e48e8a7p-1)), 0x1.921ff2e48e8a7p-1);
  const float r = (float)rd;
  const int q = (int)(nf - 4.0 * floor(nf * 0.25)) + 1;
  const float z = r * r;
  float ps = (-0x1.ae6456p-26f);
  ps = fmaf(ps, z, 0x1.71de3ap-19f);
  ps = fmaf(ps, z, (-0x1.a01a02p-13f));
  ps = fmaf(ps, z, 0x1.111112p-7f);
  ps = fmaf(ps, z, (-0x1.555556p-3f));
  float pc = (-0x1.27e4fcp-22f);
  pc = fmaf(pc, z, 0x1.a01a02p-16f);
  pc = fmaf(pc, z, (-0x1.6c16c2p-10f));
  pc = fmaf(pc, z, 0x1.555556p-5f);
  pc = fmaf(pc, z, (-0x1p-1f));
  const float s = fmaf(r * z, ps, r);
  const float c = fmaf(z, pc, 0x1p+0f);
  float v = (q & 1) ? c : s;
  v = (q & 2) ? -v : v;
  return finite ? v : __int_as_float(0x7fc00000);
}
__device__ __forceinline__ float kiln_tanh_f32(float x) {
  const float ax = fabsf(x);
  const float axc = ax > 0x1.4p+3f ? 0x1.4p+3f : ax;
  const float e = kiln_expm1_f32(axc + axc);
  const float t = e / (e + 0x1p+1f);
  const float z = ax * ax;
  float p = 0x1.967e18p-14f;
  p = fmaf(p, z, (-0x1.f57d78p-13f));
  p = fmaf(p, z, 0x1.355824p-11f);
  p = fmaf(p, z, (-0x1.7da364p-10f));
  p = fmaf(p, z, 0x1.d6d3dp-9f);
  p = fmaf(p, z, (-0x1.226e36p-7f));
  p = fmaf(p, z, 0x1.664f48p-6f);
  p = fmaf(p, z, (-0x1.ba1ba2p-5f));
  p = fmaf(p, z, 0x1.111112p-3f);
  p = fmaf(p, z, (-0x1.555556p-2f));
  const float small = fmaf(ax * z, p, ax);
  return copysignf(ax < 0x1.19999ap-1f ? small : t, x);
}
__device__ __forceinline__ double kiln_pow2_f64(long long n) {
  return __longlong_as_double((long long)((unsigned long long)(n + 1023) << 52));
}
__device__ __forceinline__ double kiln_exp_f64(double x) {
  const double xc = fmin(fmax(x, (-0x1.75p+9)), 0x1.63p+9);
  const double nf = rint(xc * 0x1.71547652b82fep+0);
  const double r = fma(-nf, 0x1.a39ef35793c76p-33, fma(-nf, 0x1.62e42feep-1, xc));
  double q = 0x1.93974a8c07c9dp-37;
  q = fma(q, r, 0x1.6124613a86d09p-33);
  q = fma(q, r, 0x1.1eed8eff8d898p-29);
  q = fma(q, r, 0x1.ae64567f544e4p-26);
  q = fma(q, r, 0x1.27e4fb7789f5cp-22);
  q = fma(q, r, 0x1.71de3a556c734p-19);
  q = fma(q, r, 0x1.a01a01a01a01ap-16);
  q = fma(q, r, 0x1.a01a01a01a01ap-13);
  q = fma(q, r, 0x1.6c16c16c16c17p-10);
  q = fma(q, r, 0x1.1111111111111p-7);
  q = fma(q, r, 0x1.5555555555555p-5);
  q = fma(q, r, 0x1.5555555555555p-3);
  q = fma(q, r, 0x1p-1);
  const double er = fma(r * r, q, r);
  const double p = 0x1p+0 + er;
  const long long n = (long long)nf;
  const long long n1 = n >> 1;
  const double y = (p * kiln_pow2_f64(n1)) * kiln_pow2_f64(n - n1);
  return x != x ? x : y;
}
__device__ __forceinline__ double kiln_expm1_f64(double x) {
  const double xc = fmin(fmax(x, (-0x1.4p+5)), 0x1.628p+9);
  const double nf = rint(xc * 0x1.71547652b82fep+0);
  const double r = fma(-nf, 0x1.a39ef35793c76p-33, fma(-nf, 0x1.62e42feep-1, xc));
  double q = 0x1.93974a8c07c9dp-37;
  q = fma(q, r, 0x1.6124613a86d09p-33);
  q = fma(q, r, 0x1.1eed8eff8d898p-29);
  q = fma(q, r, 0x1.ae64567f544e4p-26);
  q = fma(q, r, 0x1.27e4fb7789f5cp-22);
  q = fma(q, r, 0x1.71de3a556c734p-19);
  q = fma(q, r, 0x1.a01a01a01a01ap-16);
  q = fma(q, r, 0x1.a01a01a01a01ap-13);
  q = fma(q, r, 0x1.6c16c16c16c17p-10);
  q = fma(q, r, 0x1.1111111111111p-7);
  q = fma(q, r, 0x1.5555555555555p-5);
  q = fma(q, r, 0x1.5555555555555p-3);
  q = fma(q, r, 0x1p-1);
  const double er = fma(r * r, q, r);
  const double t = kiln_pow2_f64((long long)nf);
  const double y = fma(t, er, t - 0x1p+0);
  return x != x ? x : (x > 0x1.628p+9 ? __longlong_as_double(0x7ff0000000000000LL) : y);
}
__device__ __forceinline__ double kiln_log_f64(double x) {
  const bool tiny = x < 0x1p-1022;
  const double xs = tiny ? x * 0x1p+54 : x;
  const unsigned long long bits = (unsigned long long)__double_as_longlong(xs) + 0x95f6200000000ULL;
  const long long k = (long long)(bits >> 52) - 1023 + (tiny ? -54 : 0);
  const double f = __longlong_as_double((long long)((bits & 0xfffffffffffffULL) + 0x3fe6a09e00000000ULL)) - 0x1p+0;
  const double s = f / (0x1p+1 + f);
  const double z = s * s;
  double h = 0x1.642c8590b2164p-4;
  h = fma(h, z, 0x1.8618618618618p-4);
  h = fma(h, z, 0x1.af286bca1af28p-4);
  h = fma(h, z, 0x1.e1e1e1e1e1e1ep-4);
  h = fma(h, z, 0x1.1111111111111p-3);
  h = fma(h, z, 0x1.3b13b13b13b14p-3);
  h = fma(h, z, 0x1.745d1745d1746p-3);
  h = fma(h, z, 0x1.c71c71c71c71cp-3);
  h = fma(h, z, 0x1.2492492492492p-2);
  h = fma(h, z, 0x1.999999999999ap-2);
  h = fma(h, z, 0x1.5555555555555p-1);
  const double hfsq = (0x1p-1 * f) * f;
  const double kf = (double)k;
  const double tail = fma(s, fma(z, h, hfsq), kf * 0x1.a39ef35793c76p-33);
  const double y = fma(kf, 0x1.62e42feep-1, f - (hfsq - tail));
  if (x != x) return x;
  if (x == __longlong_as_double(0x7ff0000000000000LL)) return x;
  if (x < 0x0p+0) return __longlong_as_double(0x7ff8000000000000LL);
  return x == 0x0p+0 ? -__longlong_as_double(0x7ff0000000000000LL) : y;
}
__device__ __forceinline__ double kiln_sin_f64(double x) {
  const bool finite = fabs(x) < __longlong_as_double(0x7ff0000000000000LL);
  const double xd = (double)(finite ? x : 0x0p+0);
  const double nf = rint(xd * 0x1.45f306dc9c883p-1);
  double rd = fma(-nf, 0x1.921fb544p+0, xd);
  rd = fma(-nf, 0x1.0b4611a6p-34, rd);
  rd = fma(-nf, 0x1.3198a2e037073p-69, rd);
  rd = fmin(fmax(rd, (-0x1.921ff2e48e8a7p-1)), 0x1.921ff2e48e8a7p-1);
  const double r = (double)rd;
  const int q = (int)(nf - 4.0 * floor(nf * 0.25));
  const double z = r * r;
  double ps = (-0x1.2f49b46814157p-57);
  ps = fma(ps, z, 0x1.952c77030ad4ap-49);
  ps = fma(ps, z, (-0x1.ae7f3e733b81fp-41));
  ps = fma(ps, z, 0x1.6124613a86d09p-33);
  ps = fma(ps, z, (-0x1.ae64567f544e4p-26));
  ps = fma(ps, z, 0x1.71de3a556c734p-19);
  ps = fma(ps, z, (-0x1.a01a01a01a01ap-13));
  ps = fma(ps, z, 0x1.1111111111111p-7);
  ps = fma(ps, z, (-0x1.5555555555555p-3));
  double pc = 0x1.e542ba4020225p-62;
  pc = fma(pc, z, (-0x1.6827863b97d97p-53));
  pc = fma(pc, z, 0x1.ae7f3e733b81fp-45);
  pc = fma(pc, z, (-0x1.93974a8c07c9dp-37));
  pc = fma(pc, z, 0x1.1eed8eff8d898p-29);
  pc = fma(pc, z, (-0x1.27e4fb7789f5cp-22));
  pc = fma(pc, z, 0x1.a01a01a01a01ap-16);
  pc = fma(pc, z, (-0x1.6c16c16c16c17p-10));
  pc = fma(pc, z, 0x1.5555555555555p-5);
  pc = fma(pc, z, (-0x1p-1));
  const double s = fma(r * z, ps, r);
  const double c = fma(z, pc, 0x1p+0);
  double v = (q & 1) ? c : s;
  v = (q & 2) ? -v : v;
  v = x == 0x0p+0 ? x : v;
  return finite ? v : __longlong_as_double(0x7ff8000000000000LL);
}
__device__ __forceinline__ double kiln_cos_f64(double x) {
  const bool finite = fabs(x) < __longlong_as_double(0x7ff0000000000000LL);
  const double xd = (double)(finite ? x : 0x0p+0);
  const double nf = rint(xd * 0x1.45f306dc9c883p-1);
  double rd = fma(-nf, 0x1.921fb544p+0, xd);
  rd = fma(-nf, 0x1.0b4611a6p-34, rd);
  rd = fma(-nf, 0x1.3198a2e037073p-69, rd);
  rd = fmin(fmax(rd, (-0x1.921ff2e48e8a7p-1)), 0x1.921ff2e48e8a7p-1);
  const double r = (double)rd;
  const int q = (int)(nf - 4.0 * floor(nf * 0.25)) + 1;
  const double z = r * r;
  double ps = (-0x1.2f49b46814157p-57);
  ps = fma(ps, z, 0x1.952c77030ad4ap-49);
  ps = fma(ps, z, (-0x1.ae7f3e733b81fp-41));
  ps = fma(ps, z, 0x1.6124613a86d09p-33);
  ps = fma(ps, z, (-0x1.ae64567f544e4p-26));
  ps = fma(ps, z, 0x1.71de3a556c734p-19);
  ps = fma(ps, z, (-0x1.a01a01a01a01ap-13));
  ps = fma(ps, z, 0x1.1111111111111p-7);
  ps = fma(ps, z, (-0x1.5555555555555p-3));
  double pc = 0x1.e542ba4020225p-62;
  pc = fma(pc, z, (-0x1.6827863b97d97p-53));
  pc = fma(pc, z, 0x1.ae7f3e733b81fp-45);
  pc = fma(pc, z, (-0x1.93974a8c07c9dp-37));
  pc = fma(pc, z, 0x1.1eed8eff8d898p-29);
  pc = fma(pc, z, (-0x1.27e4fb7789f5cp-22));
  pc = fma(pc, z, 0x1.a01a01a01a01ap-16);
  pc = fma(pc, z, (-0x1.6c16c16c16c17p-10));
  pc = fma(pc, z, 0x1.5555555555555p-5);
  pc = fma(pc, z, (-0x1p-1));
  const double s = fma(r * z, ps, r);
  const double c = fma(z, pc, 0x1p+0);
  double v = (q & 1) ? c : s;
  v = (q & 2) ? -v : v;
  return finite ? v : __longlong_as_double(0x7ff8000000000000LL);
}
__device__ __forceinline__ double kiln_tanh_f64(double x) {
  const double ax = fabs(x);
  const double axc = ax > 0x1.6p+4 ? 0x1.6p+4 : ax;
  const double e = kiln_expm1_f64(axc + axc);
  const double t = e / (e + 0x1p+1);
  return copysign(t, x);
}
KILN_DF float kiln_sigmoid_f32(float x) {
  const float e = kiln_exp_f32(-fabsf(x));
  const float num = x < 0.0f ? e : 1.0f;
  return num / (1.0f + e);
}
KILN_DF double kiln_sigmoid_f64(double x) {
  const double e = kiln_exp_f64(-fabs(x));
  const double num = x < 0.0 ? e : 1.0;
  return num / (1.0 + e);
}
KILN_DF float kiln_randn_f32(unsigned long long seed, long long c) {
  const float u1 = kiln_uniform_f32(seed, 2 * c), u2 = kiln_uniform_f32(seed, 2 * c + 1);
  const float radius = sqrtf(-2.0f * kiln_log_f32(1.0f - u1));
  return radius * kiln_cos_f32(0x1.921fb6p+2f * u2);
}
KILN_DF double kiln_randn_f64(unsigned long long seed, long long c) {
  const double u1 = kiln_uniform_f64(seed, 2 * c), u2 = kiln_uniform_f64(seed, 2 * c + 1);
  const double radius = sqrt(-2.0 * kiln_log_f64(1.0 - u1));
  return radius * kiln_cos_f64(0x1.921fb54442d18p+2 * u2);
}
#endif // KILN_CUDA_PRELUDE
