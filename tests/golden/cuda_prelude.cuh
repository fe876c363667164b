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
// PyTorch's remainder: fmod, plus b where it is non-zero and its sign differs from b's.
KILN_DF float kiln_remainder(float a, float b) {
  float m = fmodf(a, b);
  return (m != 0 && ((b < 0) != (m < 0))) ? m + b : m;
}
KILN_DF double kiln_remainder(double a, double b) {
  double m = fmod(a, b);
  return (m != 0 && ((b < 0) != (m < 0))) ? m + b : m;
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
#endif // KILN_CUDA_PRELUDE
// ---- kiln's math functions and random numbers (codegen/src/math_body.h) ----
#ifndef KILN_CUDA_FN_kiln_exp_f64
#define KILN_CUDA_FN_kiln_exp_f64
KILN_DF double kiln_exp_f64(double x) {
  const bool t0 = !(x >= (-0x1.75p+9));
  const double t1 = t0 ? 0x0p+0 : x;
  const double t2 = fmin(t1, 0x1.63p+9);
  const double t3 = t2 * 0x1.71547652b82fep+0;
  const double t4 = rint(t3);
  const double t5 = -t4;
  const double t6 = fma(t5, 0x1.62e42feep-1, t2);
  const double t7 = -t4;
  const double t8 = fma(t7, 0x1.a39ef35793c76p-33, t6);
  const double t9 = fma(0x1.93974a8c07c9dp-37, t8, 0x1.6124613a86d09p-33);
  const double t10 = fma(t9, t8, 0x1.1eed8eff8d898p-29);
  const double t11 = fma(t10, t8, 0x1.ae64567f544e4p-26);
  const double t12 = fma(t11, t8, 0x1.27e4fb7789f5cp-22);
  const double t13 = fma(t12, t8, 0x1.71de3a556c734p-19);
  const double t14 = fma(t13, t8, 0x1.a01a01a01a01ap-16);
  const double t15 = fma(t14, t8, 0x1.a01a01a01a01ap-13);
  const double t16 = fma(t15, t8, 0x1.6c16c16c16c17p-10);
  const double t17 = fma(t16, t8, 0x1.1111111111111p-7);
  const double t18 = fma(t17, t8, 0x1.5555555555555p-5);
  const double t19 = fma(t18, t8, 0x1.5555555555555p-3);
  const double t20 = fma(t19, t8, 0x1p-1);
  const double t21 = t8 * t8;
  const double t22 = fma(t21, t20, t8);
  const double t23 = 0x1p+0 + t22;
  const long long t24 = (long long)t4;
  const long long t25 = t24 >> 1;
  const long long t26 = (long long)((unsigned long long)t24 - (unsigned long long)t25);
  const long long t27 = (long long)((unsigned long long)t26 + (unsigned long long)1023LL);
  const long long t28 = (long long)((unsigned long long)t27 << 52);
  const double t29 = __longlong_as_double(t28);
  const long long t30 = (long long)((unsigned long long)t25 + (unsigned long long)1023LL);
  const long long t31 = (long long)((unsigned long long)t30 << 52);
  const double t32 = __longlong_as_double(t31);
  const double t33 = t23 * t32;
  const double t34 = t33 * t29;
  const bool t35 = 0x0p+0 > x;
  const double t36 = t35 ? 0x0p+0 : x;
  const double t37 = t0 ? t36 : t34;
  return t37;
}
#endif
#ifndef KILN_CUDA_FN_kiln_exp_f32
#define KILN_CUDA_FN_kiln_exp_f32
KILN_DF float kiln_exp_f32(float x) {
  const bool t0 = !(x >= (-0x1.ap+6f));
  const float t1 = t0 ? 0x0p+0f : x;
  const float t2 = fminf(t1, 0x1.64p+6f);
  const float t3 = t2 * 0x1.715476p+0f;
  const float t4 = rintf(t3);
  const float t5 = -t4;
  const float t6 = fmaf(t5, 0x1.62e4p-1f, t2);
  const float t7 = -t4;
  const float t8 = fmaf(t7, 0x1.7f7d1cp-20f, t6);
  const float t9 = fmaf(0x1.a01a02p-16f, t8, 0x1.a01a02p-13f);
  const float t10 = fmaf(t9, t8, 0x1.6c16c2p-10f);
  const float t11 = fmaf(t10, t8, 0x1.111112p-7f);
  const float t12 = fmaf(t11, t8, 0x1.555556p-5f);
  const float t13 = fmaf(t12, t8, 0x1.555556p-3f);
  const float t14 = fmaf(t13, t8, 0x1p-1f);
  const float t15 = t8 * t8;
  const float t16 = fmaf(t15, t14, t8);
  const float t17 = 0x1p+0f + t16;
  const int t18 = (int)t4;
  const int t19 = t18 >> 1;
  const int t20 = (int)((unsigned)t18 - (unsigned)t19);
  const int t21 = (int)((unsigned)t20 + (unsigned)127);
  const int t22 = (int)((unsigned)t21 << 23);
  const float t23 = __int_as_float(t22);
  const int t24 = (int)((unsigned)t19 + (unsigned)127);
  const int t25 = (int)((unsigned)t24 << 23);
  const float t26 = __int_as_float(t25);
  const float t27 = t17 * t26;
  const float t28 = t27 * t23;
  const bool t29 = 0x0p+0f > x;
  const float t30 = t29 ? 0x0p+0f : x;
  const float t31 = t0 ? t30 : t28;
  return t31;
}
#endif
#ifndef KILN_CUDA_FN_kiln_expm1_f64
#define KILN_CUDA_FN_kiln_expm1_f64
KILN_DF double kiln_expm1_f64(double x) {
  const double t0 = fmax(x, (-0x1.4p+5));
  const double t1 = fmin(t0, 0x1.63p+9);
  const double t2 = t1 * 0x1.71547652b82fep+0;
  const double t3 = rint(t2);
  const double t4 = -t3;
  const double t5 = fma(t4, 0x1.62e42feep-1, t1);
  const double t6 = -t3;
  const double t7 = fma(t6, 0x1.a39ef35793c76p-33, t5);
  const double t8 = fma(0x1.93974a8c07c9dp-37, t7, 0x1.6124613a86d09p-33);
  const double t9 = fma(t8, t7, 0x1.1eed8eff8d898p-29);
  const double t10 = fma(t9, t7, 0x1.ae64567f544e4p-26);
  const double t11 = fma(t10, t7, 0x1.27e4fb7789f5cp-22);
  const double t12 = fma(t11, t7, 0x1.71de3a556c734p-19);
  const double t13 = fma(t12, t7, 0x1.a01a01a01a01ap-16);
  const double t14 = fma(t13, t7, 0x1.a01a01a01a01ap-13);
  const double t15 = fma(t14, t7, 0x1.6c16c16c16c17p-10);
  const double t16 = fma(t15, t7, 0x1.1111111111111p-7);
  const double t17 = fma(t16, t7, 0x1.5555555555555p-5);
  const double t18 = fma(t17, t7, 0x1.5555555555555p-3);
  const double t19 = fma(t18, t7, 0x1p-1);
  const double t20 = t7 * t7;
  const double t21 = fma(t20, t19, t7);
  const long long t22 = (long long)t3;
  const long long t23 = (long long)((unsigned long long)t22 + (unsigned long long)1023LL);
  const long long t24 = (long long)((unsigned long long)t23 << 52);
  const double t25 = __longlong_as_double(t24);
  const double t26 = t25 - 0x1p+0;
  const double t27 = fma(t25, t21, t26);
  const double t28 = 0x1p+0 + t21;
  const long long t29 = (long long)t3;
  const long long t30 = t29 >> 1;
  const long long t31 = (long long)((unsigned long long)t29 - (unsigned long long)t30);
  const long long t32 = (long long)((unsigned long long)t31 + (unsigned long long)1023LL);
  const long long t33 = (long long)((unsigned long long)t32 << 52);
  const double t34 = __longlong_as_double(t33);
  const long long t35 = (long long)((unsigned long long)t30 + (unsigned long long)1023LL);
  const long long t36 = (long long)((unsigned long long)t35 << 52);
  const double t37 = __longlong_as_double(t36);
  const double t38 = t28 * t37;
  const double t39 = t38 * t34;
  const bool t40 = t3 > 0x1p+6;
  const double t41 = t40 ? t39 : t27;
  const bool t42 = x > 0x1.63p+9;
  const double t43 = t42 ? __longlong_as_double(0x7ff0000000000000LL) : t41;
  const bool t44 = x == 0x0p+0;
  const double t45 = t44 ? x : t43;
  const bool t46 = x != x;
  const double t47 = t46 ? x : t45;
  return t47;
}
#endif
#ifndef KILN_CUDA_FN_kiln_expm1_f32
#define KILN_CUDA_FN_kiln_expm1_f32
KILN_DF float kiln_expm1_f32(float x) {
  const float t0 = fmaxf(x, (-0x1.4p+4f));
  const float t1 = fminf(t0, 0x1.64p+6f);
  const float t2 = t1 * 0x1.715476p+0f;
  const float t3 = rintf(t2);
  const float t4 = -t3;
  const float t5 = fmaf(t4, 0x1.62e4p-1f, t1);
  const float t6 = -t3;
  const float t7 = fmaf(t6, 0x1.7f7d1cp-20f, t5);
  const float t8 = fmaf(0x1.a01a02p-16f, t7, 0x1.a01a02p-13f);
  const float t9 = fmaf(t8, t7, 0x1.6c16c2p-10f);
  const float t10 = fmaf(t9, t7, 0x1.111112p-7f);
  const float t11 = fmaf(t10, t7, 0x1.555556p-5f);
  const float t12 = fmaf(t11, t7, 0x1.555556p-3f);
  const float t13 = fmaf(t12, t7, 0x1p-1f);
  const float t14 = t7 * t7;
  const float t15 = fmaf(t14, t13, t7);
  const int t16 = (int)t3;
  const int t17 = (int)((unsigned)t16 + (unsigned)127);
  const int t18 = (int)((unsigned)t17 << 23);
  const float t19 = __int_as_float(t18);
  const float t20 = t19 - 0x1p+0f;
  const float t21 = fmaf(t19, t15, t20);
  const float t22 = 0x1p+0f + t15;
  const int t23 = (int)t3;
  const int t24 = t23 >> 1;
  const int t25 = (int)((unsigned)t23 - (unsigned)t24);
  const int t26 = (int)((unsigned)t25 + (unsigned)127);
  const int t27 = (int)((unsigned)t26 << 23);
  const float t28 = __int_as_float(t27);
  const int t29 = (int)((unsigned)t24 + (unsigned)127);
  const int t30 = (int)((unsigned)t29 << 23);
  const float t31 = __int_as_float(t30);
  const float t32 = t22 * t31;
  const float t33 = t32 * t28;
  const bool t34 = t3 > 0x1p+5f;
  const float t35 = t34 ? t33 : t21;
  const bool t36 = x > 0x1.64p+6f;
  const float t37 = t36 ? __int_as_float(0x7f800000) : t35;
  const bool t38 = x == 0x0p+0f;
  const float t39 = t38 ? x : t37;
  const bool t40 = x != x;
  const float t41 = t40 ? x : t39;
  return t41;
}
#endif
#ifndef KILN_CUDA_FN_kiln_log_f64
#define KILN_CUDA_FN_kiln_log_f64
KILN_DF double kiln_log_f64(double x) {
  const bool t0 = x < 0x1p-1022;
  const double t1 = x * 0x1p+54;
  const double t2 = t0 ? t1 : x;
  const long long t3 = t0 ? (-54LL) : 0LL;
  const long long t4 = __double_as_longlong(t2);
  const long long t5 = (long long)((unsigned long long)t4 + (unsigned long long)(long long)0x95f6200000000ULL);
  const long long t6 = (long long)((unsigned long long)t5 >> 52);
  const long long t7 = (long long)((unsigned long long)t6 - (unsigned long long)1023LL);
  const long long t8 = (long long)((unsigned long long)t7 + (unsigned long long)t3);
  const long long t9 = t5 & (long long)0xfffffffffffffULL;
  const long long t10 = (long long)((unsigned long long)t9 + (unsigned long long)(long long)0x3fe6a09e00000000ULL);
  const double t11 = __longlong_as_double(t10);
  const double t12 = t11 - 0x1p+0;
  const double t13 = 0x1p+1 + t12;
  const double t14 = t12 / t13;
  const double t15 = t14 * t14;
  const double t16 = fma(0x1.642c8590b2164p-4, t15, 0x1.8618618618618p-4);
  const double t17 = fma(t16, t15, 0x1.af286bca1af28p-4);
  const double t18 = fma(t17, t15, 0x1.e1e1e1e1e1e1ep-4);
  const double t19 = fma(t18, t15, 0x1.1111111111111p-3);
  const double t20 = fma(t19, t15, 0x1.3b13b13b13b14p-3);
  const double t21 = fma(t20, t15, 0x1.745d1745d1746p-3);
  const double t22 = fma(t21, t15, 0x1.c71c71c71c71cp-3);
  const double t23 = fma(t22, t15, 0x1.2492492492492p-2);
  const double t24 = fma(t23, t15, 0x1.999999999999ap-2);
  const double t25 = fma(t24, t15, 0x1.5555555555555p-1);
  const double t26 = 0x1p-1 * t12;
  const double t27 = t26 * t12;
  const double t28 = (double)t8;
  const double t29 = fma(t15, t25, t27);
  const double t30 = t28 * 0x1.a39ef35793c76p-33;
  const double t31 = fma(t14, t29, t30);
  const double t32 = t27 - t31;
  const double t33 = t12 - t32;
  const double t34 = fma(t28, 0x1.62e42feep-1, t33);
  const bool t35 = x == 0x0p+0;
  const double t36 = t35 ? (-__longlong_as_double(0x7ff0000000000000LL)) : t34;
  const bool t37 = x < 0x0p+0;
  const double t38 = t37 ? __longlong_as_double(0x7ff8000000000000LL) : t36;
  const bool t39 = x == __longlong_as_double(0x7ff0000000000000LL);
  const double t40 = t39 ? __longlong_as_double(0x7ff0000000000000LL) : t38;
  const bool t41 = x != x;
  const double t42 = t41 ? x : t40;
  return t42;
}
#endif
#ifndef KILN_CUDA_FN_kiln_log_f32
#define KILN_CUDA_FN_kiln_log_f32
KILN_DF float kiln_log_f32(float x) {
  const bool t0 = x < 0x1p-126f;
  const float t1 = x * 0x1p+24f;
  const float t2 = t0 ? t1 : x;
  const int t3 = t0 ? (-24) : 0;
  const int t4 = __float_as_int(t2);
  const int t5 = (int)((unsigned)t4 + (unsigned)4913933);
  const int t6 = (int)((unsigned)t5 >> 23);
  const int t7 = (int)((unsigned)t6 - (unsigned)127);
  const int t8 = (int)((unsigned)t7 + (unsigned)t3);
  const int t9 = t5 & 8388607;
  const int t10 = (int)((unsigned)t9 + (unsigned)1060439283);
  const float t11 = __int_as_float(t10);
  const float t12 = t11 - 0x1p+0f;
  const float t13 = 0x1p+1f + t12;
  const float t14 = t12 / t13;
  const float t15 = t14 * t14;
  const float t16 = fmaf(0x1.745d18p-3f, t15, 0x1.c71c72p-3f);
  const float t17 = fmaf(t16, t15, 0x1.24924ap-2f);
  const float t18 = fmaf(t17, t15, 0x1.99999ap-2f);
  const float t19 = fmaf(t18, t15, 0x1.555556p-1f);
  const float t20 = 0x1p-1f * t12;
  const float t21 = t20 * t12;
  const float t22 = (float)t8;
  const float t23 = fmaf(t15, t19, t21);
  const float t24 = t22 * 0x1.7f7d1cp-20f;
  const float t25 = fmaf(t14, t23, t24);
  const float t26 = t21 - t25;
  const float t27 = t12 - t26;
  const float t28 = fmaf(t22, 0x1.62e4p-1f, t27);
  const bool t29 = x == 0x0p+0f;
  const float t30 = t29 ? (-__int_as_float(0x7f800000)) : t28;
  const bool t31 = x < 0x0p+0f;
  const float t32 = t31 ? __int_as_float(0x7fc00000) : t30;
  const bool t33 = x == __int_as_float(0x7f800000);
  const float t34 = t33 ? __int_as_float(0x7f800000) : t32;
  const bool t35 = x != x;
  const float t36 = t35 ? x : t34;
  return t36;
}
#endif
#ifndef KILN_CUDA_FN_kiln_log1p_f64
#define KILN_CUDA_FN_kiln_log1p_f64
KILN_DF double kiln_log1p_f64(double x) {
  const double t0 = 0x1p+0 + x;
  const double t1 = fabs(x);
  const bool t2 = t1 > 0x1p+0;
  const double t3 = t0 - 0x1p+0;
  const double t4 = x - t3;
  const double t5 = t0 - x;
  const double t6 = 0x1p+0 - t5;
  const double t7 = t2 ? t6 : t4;
  const double t8 = t7 / t0;
  const bool t9 = t0 < 0x1p-1022;
  const double t10 = t0 * 0x1p+54;
  const double t11 = t9 ? t10 : t0;
  const long long t12 = t9 ? (-54LL) : 0LL;
  const long long t13 = __double_as_longlong(t11);
  const long long t14 = (long long)((unsigned long long)t13 + (unsigned long long)(long long)0x95f6200000000ULL);
  const long long t15 = (long long)((unsigned long long)t14 >> 52);
  const long long t16 = (long long)((unsigned long long)t15 - (unsigned long long)1023LL);
  const long long t17 = (long long)((unsigned long long)t16 + (unsigned long long)t12);
  const long long t18 = t14 & (long long)0xfffffffffffffULL;
  const long long t19 = (long long)((unsigned long long)t18 + (unsigned long long)(long long)0x3fe6a09e00000000ULL);
  const double t20 = __longlong_as_double(t19);
  const double t21 = t20 - 0x1p+0;
  const double t22 = 0x1p+1 + t21;
  const double t23 = t21 / t22;
  const double t24 = t23 * t23;
  const double t25 = fma(0x1.642c8590b2164p-4, t24, 0x1.8618618618618p-4);
  const double t26 = fma(t25, t24, 0x1.af286bca1af28p-4);
  const double t27 = fma(t26, t24, 0x1.e1e1e1e1e1e1ep-4);
  const double t28 = fma(t27, t24, 0x1.1111111111111p-3);
  const double t29 = fma(t28, t24, 0x1.3b13b13b13b14p-3);
  const double t30 = fma(t29, t24, 0x1.745d1745d1746p-3);
  const double t31 = fma(t30, t24, 0x1.c71c71c71c71cp-3);
  const double t32 = fma(t31, t24, 0x1.2492492492492p-2);
  const double t33 = fma(t32, t24, 0x1.999999999999ap-2);
  const double t34 = fma(t33, t24, 0x1.5555555555555p-1);
  const double t35 = 0x1p-1 * t21;
  const double t36 = t35 * t21;
  const double t37 = (double)t17;
  const double t38 = fma(t24, t34, t36);
  const double t39 = t37 * 0x1.a39ef35793c76p-33;
  const double t40 = t39 + t8;
  const double t41 = fma(t23, t38, t40);
  const double t42 = t36 - t41;
  const double t43 = t21 - t42;
  const double t44 = fma(t37, 0x1.62e42feep-1, t43);
  const bool t45 = t0 == 0x0p+0;
  const double t46 = t45 ? (-__longlong_as_double(0x7ff0000000000000LL)) : t44;
  const bool t47 = t0 < 0x0p+0;
  const double t48 = t47 ? __longlong_as_double(0x7ff8000000000000LL) : t46;
  const bool t49 = t0 == __longlong_as_double(0x7ff0000000000000LL);
  const double t50 = t49 ? __longlong_as_double(0x7ff0000000000000LL) : t48;
  const bool t51 = t0 != t0;
  const double t52 = t51 ? t0 : t50;
  const bool t53 = t0 == 0x1p+0;
  const double t54 = t53 ? x : t52;
  return t54;
}
#endif
#ifndef KILN_CUDA_FN_kiln_log1p_f32
#define KILN_CUDA_FN_kiln_log1p_f32
KILN_DF float kiln_log1p_f32(float x) {
  const double t0 = (double)x;
  const double t1 = 0x1p+0 + t0;
  const double t2 = fabs(t0);
  const bool t3 = t2 > 0x1p+0;
  const double t4 = t1 - 0x1p+0;
  const double t5 = t0 - t4;
  const double t6 = t1 - t0;
  const double t7 = 0x1p+0 - t6;
  const double t8 = t3 ? t7 : t5;
  const double t9 = t8 / t1;
  const bool t10 = t1 < 0x1p-1022;
  const double t11 = t1 * 0x1p+54;
  const double t12 = t10 ? t11 : t1;
  const long long t13 = t10 ? (-54LL) : 0LL;
  const long long t14 = __double_as_longlong(t12);
  const long long t15 = (long long)((unsigned long long)t14 + (unsigned long long)(long long)0x95f6200000000ULL);
  const long long t16 = (long long)((unsigned long long)t15 >> 52);
  const long long t17 = (long long)((unsigned long long)t16 - (unsigned long long)1023LL);
  const long long t18 = (long long)((unsigned long long)t17 + (unsigned long long)t13);
  const long long t19 = t15 & (long long)0xfffffffffffffULL;
  const long long t20 = (long long)((unsigned long long)t19 + (unsigned long long)(long long)0x3fe6a09e00000000ULL);
  const double t21 = __longlong_as_double(t20);
  const double t22 = t21 - 0x1p+0;
  const double t23 = 0x1p+1 + t22;
  const double t24 = t22 / t23;
  const double t25 = t24 * t24;
  const double t26 = fma(0x1.642c8590b2164p-4, t25, 0x1.8618618618618p-4);
  const double t27 = fma(t26, t25, 0x1.af286bca1af28p-4);
  const double t28 = fma(t27, t25, 0x1.e1e1e1e1e1e1ep-4);
  const double t29 = fma(t28, t25, 0x1.1111111111111p-3);
  const double t30 = fma(t29, t25, 0x1.3b13b13b13b14p-3);
  const double t31 = fma(t30, t25, 0x1.745d1745d1746p-3);
  const double t32 = fma(t31, t25, 0x1.c71c71c71c71cp-3);
  const double t33 = fma(t32, t25, 0x1.2492492492492p-2);
  const double t34 = fma(t33, t25, 0x1.999999999999ap-2);
  const double t35 = fma(t34, t25, 0x1.5555555555555p-1);
  const double t36 = 0x1p-1 * t22;
  const double t37 = t36 * t22;
  const double t38 = (double)t18;
  const double t39 = fma(t25, t35, t37);
  const double t40 = t38 * 0x1.a39ef35793c76p-33;
  const double t41 = t40 + t9;
  const double t42 = fma(t24, t39, t41);
  const double t43 = t37 - t42;
  const double t44 = t22 - t43;
  const double t45 = fma(t38, 0x1.62e42feep-1, t44);
  const bool t46 = t1 == 0x0p+0;
  const double t47 = t46 ? (-__longlong_as_double(0x7ff0000000000000LL)) : t45;
  const bool t48 = t1 < 0x0p+0;
  const double t49 = t48 ? __longlong_as_double(0x7ff8000000000000LL) : t47;
  const bool t50 = t1 == __longlong_as_double(0x7ff0000000000000LL);
  const double t51 = t50 ? __longlong_as_double(0x7ff0000000000000LL) : t49;
  const bool t52 = t1 != t1;
  const double t53 = t52 ? t1 : t51;
  const bool t54 = t1 == 0x1p+0;
  const double t55 = t54 ? t0 : t53;
  const float t56 = (float)t55;
  return t56;
}
#endif
#ifndef KILN_CUDA_FN_kiln_sin_f64
#define KILN_CUDA_FN_kiln_sin_f64
KILN_DF double kiln_sin_f64(double x) {
  const double t0 = fabs(x);
  const bool t1 = t0 < __longlong_as_double(0x7ff0000000000000LL);
  const double t2 = t1 ? x : 0x0p+0;
  const double t3 = t2 * 0x1.45f306dc9c883p-1;
  const double t4 = rint(t3);
  const double t5 = -t4;
  const double t6 = fma(t5, 0x1.921fb544p+0, t2);
  const double t7 = -t4;
  const double t8 = fma(t7, 0x1.0b4611a6p-34, t6);
  const double t9 = -t4;
  const double t10 = fma(t9, 0x1.3198a2e037073p-69, t8);
  const double t11 = fmax(t10, (-0x1.921ff2e48e8a7p-1));
  const double t12 = fmin(t11, 0x1.921ff2e48e8a7p-1);
  const double t13 = t4 * 0x1p-2;
  const double t14 = floor(t13);
  const double t15 = 0x1p+2 * t14;
  const double t16 = t4 - t15;
  const int t17 = (int)t16;
  const double t18 = t12 * t12;
  const double t19 = fma((-0x1.2f49b46814157p-57), t18, 0x1.952c77030ad4ap-49);
  const double t20 = fma(t19, t18, (-0x1.ae7f3e733b81fp-41));
  const double t21 = fma(t20, t18, 0x1.6124613a86d09p-33);
  const double t22 = fma(t21, t18, (-0x1.ae64567f544e4p-26));
  const double t23 = fma(t22, t18, 0x1.71de3a556c734p-19);
  const double t24 = fma(t23, t18, (-0x1.a01a01a01a01ap-13));
  const double t25 = fma(t24, t18, 0x1.1111111111111p-7);
  const double t26 = fma(t25, t18, (-0x1.5555555555555p-3));
  const double t27 = fma(0x1.e542ba4020225p-62, t18, (-0x1.6827863b97d97p-53));
  const double t28 = fma(t27, t18, 0x1.ae7f3e733b81fp-45);
  const double t29 = fma(t28, t18, (-0x1.93974a8c07c9dp-37));
  const double t30 = fma(t29, t18, 0x1.1eed8eff8d898p-29);
  const double t31 = fma(t30, t18, (-0x1.27e4fb7789f5cp-22));
  const double t32 = fma(t31, t18, 0x1.a01a01a01a01ap-16);
  const double t33 = fma(t32, t18, (-0x1.6c16c16c16c17p-10));
  const double t34 = fma(t33, t18, 0x1.5555555555555p-5);
  const double t35 = fma(t34, t18, (-0x1p-1));
  const double t36 = t12 * t18;
  const double t37 = fma(t36, t26, t12);
  const double t38 = fma(t18, t35, 0x1p+0);
  const int t39 = t17 & 1;
  const bool t40 = t39 != 0;
  const int t41 = t17 & 2;
  const bool t42 = t41 != 0;
  const double t43 = t40 ? t38 : t37;
  const double t44 = -t43;
  const double t45 = t42 ? t44 : t43;
  const bool t46 = x == 0x0p+0;
  const double t47 = t46 ? x : t45;
  const double t48 = t1 ? t47 : __longlong_as_double(0x7ff8000000000000LL);
  return t48;
}
#endif
#ifndef KILN_CUDA_FN_kiln_sin_f32
#define KILN_CUDA_FN_kiln_sin_f32
KILN_DF float kiln_sin_f32(float x) {
  const float t0 = fabsf(x);
  const bool t1 = t0 < __int_as_float(0x7f800000);
  const float t2 = t1 ? x : 0x0p+0f;
  const double t3 = (double)t2;
  const double t4 = t3 * 0x1.45f306dc9c883p-1;
  const double t5 = rint(t4);
  const double t6 = -t5;
  const double t7 = fma(t6, 0x1.921fb544p+0, t3);
  const double t8 = -t5;
  const double t9 = fma(t8, 0x1.0b4611a626331p-34, t7);
  const double t10 = fmax(t9, (-0x1.921ff2e48e8a7p-1));
  const double t11 = fmin(t10, 0x1.921ff2e48e8a7p-1);
  const float t12 = (float)t11;
  const double t13 = t5 * 0x1p-2;
  const double t14 = floor(t13);
  const double t15 = 0x1p+2 * t14;
  const double t16 = t5 - t15;
  const int t17 = (int)t16;
  const float t18 = t12 * t12;
  const float t19 = fmaf((-0x1.ae6456p-26f), t18, 0x1.71de3ap-19f);
  const float t20 = fmaf(t19, t18, (-0x1.a01a02p-13f));
  const float t21 = fmaf(t20, t18, 0x1.111112p-7f);
  const float t22 = fmaf(t21, t18, (-0x1.555556p-3f));
  const float t23 = fmaf((-0x1.27e4fcp-22f), t18, 0x1.a01a02p-16f);
  const float t24 = fmaf(t23, t18, (-0x1.6c16c2p-10f));
  const float t25 = fmaf(t24, t18, 0x1.555556p-5f);
  const float t26 = fmaf(t25, t18, (-0x1p-1f));
  const float t27 = t12 * t18;
  const float t28 = fmaf(t27, t22, t12);
  const float t29 = fmaf(t18, t26, 0x1p+0f);
  const int t30 = t17 & 1;
  const bool t31 = t30 != 0;
  const int t32 = t17 & 2;
  const bool t33 = t32 != 0;
  const float t34 = t31 ? t29 : t28;
  const float t35 = -t34;
  const float t36 = t33 ? t35 : t34;
  const bool t37 = x == 0x0p+0f;
  const float t38 = t37 ? x : t36;
  const float t39 = t1 ? t38 : __int_as_float(0x7fc00000);
  return t39;
}
#endif
#ifndef KILN_CUDA_FN_kiln_cos_f64
#define KILN_CUDA_FN_kiln_cos_f64
KILN_DF double kiln_cos_f64(double x) {
  const double t0 = fabs(x);
  const bool t1 = t0 < __longlong_as_double(0x7ff0000000000000LL);
  const double t2 = t1 ? x : 0x0p+0;
  const double t3 = t2 * 0x1.45f306dc9c883p-1;
  const double t4 = rint(t3);
  const double t5 = -t4;
  const double t6 = fma(t5, 0x1.921fb544p+0, t2);
  const double t7 = -t4;
  const double t8 = fma(t7, 0x1.0b4611a6p-34, t6);
  const double t9 = -t4;
  const double t10 = fma(t9, 0x1.3198a2e037073p-69, t8);
  const double t11 = fmax(t10, (-0x1.921ff2e48e8a7p-1));
  const double t12 = fmin(t11, 0x1.921ff2e48e8a7p-1);
  const double t13 = t4 * 0x1p-2;
  const double t14 = floor(t13);
  const double t15 = 0x1p+2 * t14;
  const double t16 = t4 - t15;
  const int t17 = (int)t16;
  const int t18 = (int)((unsigned)t17 + (unsigned)1);
  const double t19 = t12 * t12;
  const double t20 = fma((-0x1.2f49b46814157p-57), t19, 0x1.952c77030ad4ap-49);
  const double t21 = fma(t20, t19, (-0x1.ae7f3e733b81fp-41));
  const double t22 = fma(t21, t19, 0x1.6124613a86d09p-33);
  const double t23 = fma(t22, t19, (-0x1.ae64567f544e4p-26));
  const double t24 = fma(t23, t19, 0x1.71de3a556c734p-19);
  const double t25 = fma(t24, t19, (-0x1.a01a01a01a01ap-13));
  const double t26 = fma(t25, t19, 0x1.1111111111111p-7);
  const double t27 = fma(t26, t19, (-0x1.5555555555555p-3));
  const double t28 = fma(0x1.e542ba4020225p-62, t19, (-0x1.6827863b97d97p-53));
  const double t29 = fma(t28, t19, 0x1.ae7f3e733b81fp-45);
  const double t30 = fma(t29, t19, (-0x1.93974a8c07c9dp-37));
  const double t31 = fma(t30, t19, 0x1.1eed8eff8d898p-29);
  const double t32 = fma(t31, t19, (-0x1.27e4fb7789f5cp-22));
  const double t33 = fma(t32, t19, 0x1.a01a01a01a01ap-16);
  const double t34 = fma(t33, t19, (-0x1.6c16c16c16c17p-10));
  const double t35 = fma(t34, t19, 0x1.5555555555555p-5);
  const double t36 = fma(t35, t19, (-0x1p-1));
  const double t37 = t12 * t19;
  const double t38 = fma(t37, t27, t12);
  const double t39 = fma(t19, t36, 0x1p+0);
  const int t40 = t18 & 1;
  const bool t41 = t40 != 0;
  const int t42 = t18 & 2;
  const bool t43 = t42 != 0;
  const double t44 = t41 ? t39 : t38;
  const double t45 = -t44;
  const double t46 = t43 ? t45 : t44;
  const double t47 = t1 ? t46 : __longlong_as_double(0x7ff8000000000000LL);
  return t47;
}
#endif
#ifndef KILN_CUDA_FN_kiln_cos_f32
#define KILN_CUDA_FN_kiln_cos_f32
KILN_DF float kiln_cos_f32(float x) {
  const float t0 = fabsf(x);
  const bool t1 = t0 < __int_as_float(0x7f800000);
  const float t2 = t1 ? x : 0x0p+0f;
  const double t3 = (double)t2;
  const double t4 = t3 * 0x1.45f306dc9c883p-1;
  const double t5 = rint(t4);
  const double t6 = -t5;
  const double t7 = fma(t6, 0x1.921fb544p+0, t3);
  const double t8 = -t5;
  const double t9 = fma(t8, 0x1.0b4611a626331p-34, t7);
  const double t10 = fmax(t9, (-0x1.921ff2e48e8a7p-1));
  const double t11 = fmin(t10, 0x1.921ff2e48e8a7p-1);
  const float t12 = (float)t11;
  const double t13 = t5 * 0x1p-2;
  const double t14 = floor(t13);
  const double t15 = 0x1p+2 * t14;
  const double t16 = t5 - t15;
  const int t17 = (int)t16;
  const int t18 = (int)((unsigned)t17 + (unsigned)1);
  const float t19 = t12 * t12;
  const float t20 = fmaf((-0x1.ae6456p-26f), t19, 0x1.71de3ap-19f);
  const float t21 = fmaf(t20, t19, (-0x1.a01a02p-13f));
  const float t22 = fmaf(t21, t19, 0x1.111112p-7f);
  const float t23 = fmaf(t22, t19, (-0x1.555556p-3f));
  const float t24 = fmaf((-0x1.27e4fcp-22f), t19, 0x1.a01a02p-16f);
  const float t25 = fmaf(t24, t19, (-0x1.6c16c2p-10f));
  const float t26 = fmaf(t25, t19, 0x1.555556p-5f);
  const float t27 = fmaf(t26, t19, (-0x1p-1f));
  const float t28 = t12 * t19;
  const float t29 = fmaf(t28, t23, t12);
  const float t30 = fmaf(t19, t27, 0x1p+0f);
  const int t31 = t18 & 1;
  const bool t32 = t31 != 0;
  const int t33 = t18 & 2;
  const bool t34 = t33 != 0;
  const float t35 = t32 ? t30 : t29;
  const float t36 = -t35;
  const float t37 = t34 ? t36 : t35;
  const float t38 = t1 ? t37 : __int_as_float(0x7fc00000);
  return t38;
}
#endif
#ifndef KILN_CUDA_FN_kiln_tanh_f64
#define KILN_CUDA_FN_kiln_tanh_f64
KILN_DF double kiln_tanh_f64(double x) {
  const double t0 = fabs(x);
  const bool t1 = t0 > 0x1.6p+4;
  const double t2 = t1 ? 0x1.6p+4 : t0;
  const double t3 = t2 + t2;
  const double t4 = fmax(t3, (-0x1.4p+5));
  const double t5 = fmin(t4, 0x1.628p+9);
  const double t6 = t5 * 0x1.71547652b82fep+0;
  const double t7 = rint(t6);
  const double t8 = -t7;
  const double t9 = fma(t8, 0x1.62e42feep-1, t5);
  const double t10 = -t7;
  const double t11 = fma(t10, 0x1.a39ef35793c76p-33, t9);
  const double t12 = fma(0x1.93974a8c07c9dp-37, t11, 0x1.6124613a86d09p-33);
  const double t13 = fma(t12, t11, 0x1.1eed8eff8d898p-29);
  const double t14 = fma(t13, t11, 0x1.ae64567f544e4p-26);
  const double t15 = fma(t14, t11, 0x1.27e4fb7789f5cp-22);
  const double t16 = fma(t15, t11, 0x1.71de3a556c734p-19);
  const double t17 = fma(t16, t11, 0x1.a01a01a01a01ap-16);
  const double t18 = fma(t17, t11, 0x1.a01a01a01a01ap-13);
  const double t19 = fma(t18, t11, 0x1.6c16c16c16c17p-10);
  const double t20 = fma(t19, t11, 0x1.1111111111111p-7);
  const double t21 = fma(t20, t11, 0x1.5555555555555p-5);
  const double t22 = fma(t21, t11, 0x1.5555555555555p-3);
  const double t23 = fma(t22, t11, 0x1p-1);
  const double t24 = t11 * t11;
  const double t25 = fma(t24, t23, t11);
  const long long t26 = (long long)t7;
  const long long t27 = (long long)((unsigned long long)t26 + (unsigned long long)1023LL);
  const long long t28 = (long long)((unsigned long long)t27 << 52);
  const double t29 = __longlong_as_double(t28);
  const double t30 = t29 - 0x1p+0;
  const double t31 = fma(t29, t25, t30);
  const bool t32 = t3 != t3;
  const double t33 = t32 ? t3 : t31;
  const double t34 = t33 + 0x1p+1;
  const double t35 = t33 / t34;
  const double t36 = copysign(t35, x);
  return t36;
}
#endif
#ifndef KILN_CUDA_FN_kiln_tanh_f32
#define KILN_CUDA_FN_kiln_tanh_f32
KILN_DF float kiln_tanh_f32(float x) {
  const float t0 = fabsf(x);
  const bool t1 = t0 > 0x1.4p+3f;
  const float t2 = t1 ? 0x1.4p+3f : t0;
  const float t3 = t2 + t2;
  const float t4 = fmaxf(t3, (-0x1.4p+4f));
  const float t5 = fminf(t4, 0x1.6p+6f);
  const float t6 = t5 * 0x1.715476p+0f;
  const float t7 = rintf(t6);
  const float t8 = -t7;
  const float t9 = fmaf(t8, 0x1.62e4p-1f, t5);
  const float t10 = -t7;
  const float t11 = fmaf(t10, 0x1.7f7d1cp-20f, t9);
  const float t12 = fmaf(0x1.a01a02p-16f, t11, 0x1.a01a02p-13f);
  const float t13 = fmaf(t12, t11, 0x1.6c16c2p-10f);
  const float t14 = fmaf(t13, t11, 0x1.111112p-7f);
  const float t15 = fmaf(t14, t11, 0x1.555556p-5f);
  const float t16 = fmaf(t15, t11, 0x1.555556p-3f);
  const float t17 = fmaf(t16, t11, 0x1p-1f);
  const float t18 = t11 * t11;
  const float t19 = fmaf(t18, t17, t11);
  const int t20 = (int)t7;
  const int t21 = (int)((unsigned)t20 + (unsigned)127);
  const int t22 = (int)((unsigned)t21 << 23);
  const float t23 = __int_as_float(t22);
  const float t24 = t23 - 0x1p+0f;
  const float t25 = fmaf(t23, t19, t24);
  const bool t26 = t3 != t3;
  const float t27 = t26 ? t3 : t25;
  const float t28 = t27 + 0x1p+1f;
  const float t29 = t27 / t28;
  const float t30 = t0 * t0;
  const float t31 = fmaf(0x1.967e18p-14f, t30, (-0x1.f57d78p-13f));
  const float t32 = fmaf(t31, t30, 0x1.355824p-11f);
  const float t33 = fmaf(t32, t30, (-0x1.7da364p-10f));
  const float t34 = fmaf(t33, t30, 0x1.d6d3dp-9f);
  const float t35 = fmaf(t34, t30, (-0x1.226e36p-7f));
  const float t36 = fmaf(t35, t30, 0x1.664f48p-6f);
  const float t37 = fmaf(t36, t30, (-0x1.ba1ba2p-5f));
  const float t38 = fmaf(t37, t30, 0x1.111112p-3f);
  const float t39 = fmaf(t38, t30, (-0x1.555556p-2f));
  const float t40 = t0 * t30;
  const float t41 = fmaf(t40, t39, t0);
  const bool t42 = t0 < 0x1.19999ap-1f;
  const float t43 = t42 ? t41 : t29;
  const float t44 = copysignf(t43, x);
  return t44;
}
#endif
#ifndef KILN_CUDA_FN_kiln_sigmoid_f64
#define KILN_CUDA_FN_kiln_sigmoid_f64
KILN_DF double kiln_sigmoid_f64(double x) {
  const double t0 = fabs(x);
  const double t1 = -t0;
  const double t2 = kiln_exp_f64(t1);
  const double t3 = 0x1p+0 + t2;
  const bool t4 = x < 0x0p+0;
  const double t5 = t4 ? t2 : 0x1p+0;
  const double t6 = t5 / t3;
  return t6;
}
#endif
#ifndef KILN_CUDA_FN_kiln_sigmoid_f32
#define KILN_CUDA_FN_kiln_sigmoid_f32
KILN_DF float kiln_sigmoid_f32(float x) {
  const float t0 = fabsf(x);
  const float t1 = -t0;
  const float t2 = kiln_exp_f32(t1);
  const float t3 = 0x1p+0f + t2;
  const bool t4 = x < 0x0p+0f;
  const float t5 = t4 ? t2 : 0x1p+0f;
  const float t6 = t5 / t3;
  return t6;
}
#endif
#ifndef KILN_CUDA_FN_kiln_erf_f64
#define KILN_CUDA_FN_kiln_erf_f64
KILN_DF double kiln_erf_f64(double x) {
  const double t0 = fabs(x);
  const double t1 = fmin(t0, 0x1.8p+2);
  const double t2 = t1 * t1;
  const double t3 = fma(0x1.d70b3537f4765p-50, t2, (-0x1.f56f071a885cfp-46));
  const double t4 = fma(t3, t2, 0x1.f683ae4a97007p-42);
  const double t5 = fma(t4, t2, (-0x1.d8453cb0c46eap-38));
  const double t6 = fma(t5, t2, 0x1.9e6ad5e55a73p-34);
  const double t7 = fma(t6, t2, (-0x1.51d7181c5d36dp-30));
  const double t8 = fma(t7, t2, 0x1.fcc5720624c1cp-27);
  const double t9 = fma(t8, t2, (-0x1.5f742ec43e71ap-23));
  const double t10 = fma(t9, t2, 0x1.b9e6c9dc651a3p-20);
  const double t11 = fma(t10, t2, (-0x1.f4d25c3e0c2ebp-17));
  const double t12 = fma(t11, t2, 0x1.f9a326f9b89b7p-14);
  const double t13 = fma(t12, t2, (-0x1.c02db40040b86p-11));
  const double t14 = fma(t13, t2, 0x1.565bcd0e6a53fp-8);
  const double t15 = fma(t14, t2, (-0x1.b82ce31288b51p-6));
  const double t16 = fma(t15, t2, 0x1.ce2f21a042be2p-4);
  const double t17 = fma(t16, t2, (-0x1.812746b0379e7p-2));
  const double t18 = fma(t17, t2, 0x1.06eba8214db69p-3);
  const double t19 = fma(t1, t18, t1);
  const bool t20 = t1 < 0x1p+0;
  const bool t21 = t1 < 0x1.4p+0;
  const bool t22 = t1 < 0x1.8p+0;
  const bool t23 = t1 < 0x1.cp+0;
  const double t24 = t23 ? 0x1.ap+0 : 0x1.ep+0;
  const double t25 = t22 ? 0x1.6p+0 : t24;
  const double t26 = t21 ? 0x1.2p+0 : t25;
  const double t27 = t20 ? 0x1.cp-1 : t26;
  const double t28 = t1 - t27;
  const double t29 = t23 ? 0x1.7b7c269186d0fp-19 : 0x1.3e58631192517p-19;
  const double t30 = t22 ? (-0x1.8ef85de5e68c4p-19) : t29;
  const double t31 = t21 ? (-0x1.0367fc36cf467p-17) : t30;
  const double t32 = t20 ? 0x1.b2508d667800cp-23 : t31;
  const double t33 = t23 ? (-0x1.63faf4af253acp-17) : 0x1.b5c64438cd3e2p-21;
  const double t34 = t22 ? (-0x1.921e058bbf683p-17) : t33;
  const double t35 = t21 ? 0x1.67a9d4aaf087dp-17 : t34;
  const double t36 = t20 ? 0x1.e7cc73fe79191p-16 : t35;
  const double t37 = fma(t32, t28, t36);
  const double t38 = t23 ? (-0x1.1e9ab9843baf7p-18) : (-0x1.5d07bf672bc0cp-16);
  const double t39 = t22 ? 0x1.5e43917418c74p-15 : t38;
  const double t40 = t21 ? 0x1.9edd4cdd5c251p-15 : t39;
  const double t41 = t20 ? (-0x1.e70fe4fe69605p-16) : t40;
  const double t42 = fma(t37, t28, t41);
  const double t43 = t23 ? 0x1.70f93e04bd30dp-14 : 0x1.2e9cb5a4b81e1p-15;
  const double t44 = t22 ? 0x1.e13333b2abeefp-16 : t43;
  const double t45 = t21 ? (-0x1.28de96372169p-13) : t44;
  const double t46 = t20 ? (-0x1.94ae412712f8bp-13) : t45;
  const double t47 = fma(t42, t28, t46);
  const double t48 = t23 ? (-0x1.07892ddcb78e9p-13) : 0x1.353eeafcf9fccp-14;
  const double t49 = t22 ? (-0x1.6392df39d614dp-12) : t48;
  const double t50 = t21 ? (-0x1.731a0a163486bp-13) : t49;
  const double t51 = t20 ? 0x1.9900077d94d8ap-12 : t50;
  const double t52 = fma(t47, t28, t51);
  const double t53 = t23 ? (-0x1.75457224274f8p-12) : (-0x1.991c209f22659p-12);
  const double t54 = t22 ? 0x1.534f6c4dc679bp-12 : t53;
  const double t55 = t21 ? 0x1.2e527649b7b04p-10 : t54;
  const double t56 = t20 ? 0x1.d6e44e4c09455p-11 : t55;
  const double t57 = fma(t52, t28, t56);
  const double t58 = t23 ? 0x1.71cd78555df62p-10 : 0x1.7bda79657b833p-12;
  const double t59 = t22 ? 0x1.9da3d48ffd0a3p-10 : t58;
  const double t60 = t21 ? (-0x1.79b04d104b47ap-12) : t59;
  const double t61 = t20 ? (-0x1.aae22e15f782dp-9) : t60;
  const double t62 = fma(t57, t28, t61);
  const double t63 = t23 ? (-0x1.2e43eef270fc5p-11) : 0x1.76ff57db443cap-10;
  const double t64 = t22 ? (-0x1.1740474706a1cp-8) : t63;
  const double t65 = t21 ? (-0x1.8b43c43f205b7p-8) : t64;
  const double t66 = t20 ? (-0x1.e3f4d17a9ac97p-10) : t65;
  const double t67 = fma(t62, t28, t66);
  const double t68 = t23 ? (-0x1.954ab0f57a01ep-8) : (-0x1.42fcbaa85e8aap-8);
  const double t69 = t22 ? (-0x1.73ffa9b859606p-10) : t68;
  const double t70 = t21 ? 0x1.3acc78420e9d3p-7 : t69;
  const double t71 = t20 ? 0x1.30ac21937fa54p-6 : t70;
  const double t72 = fma(t67, t28, t71);
  const double t73 = t23 ? 0x1.d857f2c4bc9b6p-7 : 0x1.0d099c7b29ddep-8;
  const double t74 = t22 ? 0x1.6b16f52c58b2bp-6 : t73;
  const double t75 = t21 ? 0x1.fd1c6c11eda72p-7 : t74;
  const double t76 = t20 ? (-0x1.53bb4a5af4fbep-7) : t75;
  const double t77 = fma(t72, t28, t76);
  const double t78 = t23 ? (-0x1.17d430bd57df4p-9) : 0x1.779b1e57043ccp-7;
  const double t79 = t22 ? (-0x1.f572c4c8c7b0cp-6) : t78;
  const double t80 = t21 ? (-0x1.f65d15f1cf8d7p-5) : t79;
  const double t81 = t20 ? (-0x1.1350f4b222ac7p-4) : t80;
  const double t82 = fma(t77, t28, t81);
  const double t83 = t23 ? (-0x1.974c03686729dp-5) : (-0x1.5a316520b81bap-5);
  const double t84 = t22 ? (-0x1.f3b8d52d35665p-6) : t83;
  const double t85 = t21 ? 0x1.ca5083167a246p-6 : t84;
  const double t86 = t20 ? 0x1.cc60567d78c2bp-4 : t85;
  const double t87 = fma(t82, t28, t86);
  const double t88 = t23 ? 0x1.d6631e1a28e9ep-4 : 0x1.143d1c6f4f093p-4;
  const double t89 = t22 ? 0x1.4374d82e04c67p-3 : t88;
  const double t90 = t21 ? 0x1.4cb3cf0aa0b9bp-3 : t89;
  const double t91 = t20 ? 0x1.7c9d756a115bbp-4 : t90;
  const double t92 = fma(t87, t28, t91);
  const double t93 = t23 ? (-0x1.0bcfca21947dbp-3) : (-0x1.01a1c847fa207p-4);
  const double t94 = t22 ? (-0x1.dfbbadedf5d2ep-3) : t93;
  const double t95 = t21 ? (-0x1.6ea6cf452e838p-2) : t94;
  const double t96 = t20 ? (-0x1.d62beb64e8441p-2) : t95;
  const double t97 = fma(t92, t28, t96);
  const double t98 = t23 ? 0x1.499d478bca735p-4 : 0x1.12ceb37ff9bc3p-5;
  const double t99 = t22 ? 0x1.5ce595c455b0ap-3 : t98;
  const double t100 = t21 ? 0x1.45e99bcbb7915p-2 : t99;
  const double t101 = t20 ? 0x1.0cab61f084b93p-1 : t100;
  const double t102 = fma(t97, t28, t101);
  const double t103 = t23 ? (-0x1.3a1ee1406c356p-56) : 0x1.15ded88667618p-55;
  const double t104 = t22 ? 0x1.8b62674f8989p-57 : t103;
  const double t105 = t21 ? (-0x1.ab76d4cba3d05p-57) : t104;
  const double t106 = t20 ? (-0x1.27912dd352f8bp-55) : t105;
  const double t107 = fma(t28, t102, t106);
  const double t108 = t23 ? 0x1.f4f693b67bd77p-1 : 0x1.fbe61eef4cf6ap-1;
  const double t109 = t22 ? 0x1.e5768c3b4a3fcp-1 : t108;
  const double t110 = t21 ? 0x1.c6dad2829ec62p-1 : t109;
  const double t111 = t20 ? 0x1.91724951b8fc6p-1 : t110;
  const double t112 = t111 + t107;
  const double t113 = t1 - 0x1p+2;
  const double t114 = t113 * 0x1p-1;
  const double t115 = fma((-0x1.95801ab50bbc6p-34), t114, 0x1.3394253bd43efp-32);
  const double t116 = fma(t115, t114, (-0x1.3bbdc990f487dp-32));
  const double t117 = fma(t116, t114, 0x1.c318cb71223f1p-31);
  const double t118 = fma(t117, t114, (-0x1.02abb295dc379p-28));
  const double t119 = fma(t118, t114, 0x1.73ed962706112p-27);
  const double t120 = fma(t119, t114, (-0x1.eb1c4dcc2776cp-26));
  const double t121 = fma(t120, t114, 0x1.56eceacb7b08bp-24);
  const double t122 = fma(t121, t114, (-0x1.dd5c919d89e93p-23));
  const double t123 = fma(t122, t114, 0x1.452da583fe7aep-21);
  const double t124 = fma(t123, t114, (-0x1.b4c15e987e8dap-20));
  const double t125 = fma(t124, t114, 0x1.21752bbdab1d2p-18);
  const double t126 = fma(t125, t114, (-0x1.7a306bbcfd67bp-17));
  const double t127 = fma(t126, t114, 0x1.e6bd92d81863ep-16);
  const double t128 = fma(t127, t114, (-0x1.345ef9e14dfd5p-14));
  const double t129 = fma(t128, t114, 0x1.806c8fe3ffebp-13);
  const double t130 = fma(t129, t114, (-0x1.d727479d477dfp-12));
  const double t131 = fma(t130, t114, 0x1.1ba135f321edep-10);
  const double t132 = fma(t131, t114, (-0x1.4f2981c3b5d3fp-9));
  const double t133 = fma(t132, t114, 0x1.8457bbe0864c7p-8);
  const double t134 = fma(t133, t114, (-0x1.b8b6382729fc8p-7));
  const double t135 = fma(t134, t114, 0x1.e9412fa33c875p-6);
  const double t136 = fma(t135, t114, (-0x1.094922737431ap-4));
  const double t137 = fma(t136, t114, 0x1.18932bf08e154p-3);
  const double t138 = -t2;
  const double t139 = kiln_exp_f64(t138);
  const double t140 = t139 * t137;
  const double t141 = 0x1p+0 - t140;
  const bool t142 = t1 < 0x1p+1;
  const double t143 = t142 ? t112 : t141;
  const bool t144 = t1 < 0x1.8p-1;
  const double t145 = t144 ? t19 : t143;
  const double t146 = copysign(t145, x);
  const bool t147 = x != x;
  const double t148 = t147 ? x : t146;
  return t148;
}
#endif
#ifndef KILN_CUDA_FN_kiln_erf_f32
#define KILN_CUDA_FN_kiln_erf_f32
KILN_DF float kiln_erf_f32(float x) {
  const double t0 = (double)x;
  const double t1 = fabs(t0);
  const double t2 = fmin(t1, 0x1.f70a3d70a3d71p+1);
  const double t3 = t2 * t2;
  const double t4 = fma(t3, 0x1.0933685334eddp-3, (-0x1p+0));
  const double t5 = fma((-0x1.6ff1bcde54467p-3), t4, 0x1.7074b5a1899dep-2);
  const double t6 = fma((-0x1.be77c43559c5dp-4), t4, 0x1.11fb978ad6eap-3);
  const double t7 = fma((-0x1.2f98cd9b4aeedp-4), t4, 0x1.730658bef0e8p-4);
  const double t8 = fma((-0x1.663b7bdd82fcdp-5), t4, 0x1.de88189f18a8dp-5);
  const double t9 = fma((-0x1.4eafadeca5e7dp-6), t4, 0x1.f96e8c3241985p-6);
  const double t10 = fma((-0x1.e3ed14f61e437p-8), t4, 0x1.9f7d170cbb6a6p-7);
  const double t11 = fma((-0x1.10c6b5f5206cdp-9), t4, 0x1.09205cf283c0ep-8);
  const double t12 = fma((-0x1.e225a1a4f2611p-12), t4, 0x1.0594ec495e0adp-10);
  const double t13 = fma((-0x1.6e898b5a6e99ep-14), t4, 0x1.c326bd59a5eadp-13);
  const double t14 = fma((-0x1.37f7ffd13fad6p-17), t4, 0x1.82681d8dabc65p-16);
  const double t15 = fma((-0x1.63d8e9ce9fef8p-19), t4, 0x1.101b967b0a45cp-17);
  const double t16 = t4 * t4;
  const double t17 = fma(t6, t16, t5);
  const double t18 = fma(t8, t16, t7);
  const double t19 = fma(t10, t16, t9);
  const double t20 = fma(t12, t16, t11);
  const double t21 = fma(t14, t16, t13);
  const double t22 = t16 * t16;
  const double t23 = fma(t18, t22, t17);
  const double t24 = fma(t20, t22, t19);
  const double t25 = fma(t15, t22, t21);
  const double t26 = t22 * t22;
  const double t27 = fma(t24, t26, t23);
  const double t28 = t26 * t26;
  const double t29 = fma(t25, t28, t27);
  const double t30 = t2 * t29;
  const double t31 = copysign(t30, t0);
  const bool t32 = t0 != t0;
  const double t33 = t32 ? t0 : t31;
  const float t34 = (float)t33;
  return t34;
}
#endif
#ifndef KILN_CUDA_FN_kiln_atan_f64
#define KILN_CUDA_FN_kiln_atan_f64
KILN_DF double kiln_atan_f64(double x) {
  const double t0 = fabs(x);
  const bool t1 = t0 < 0x1.cp-2;
  const bool t2 = t0 < 0x1.6p-1;
  const bool t3 = t0 < 0x1.3p+0;
  const bool t4 = t0 < 0x1.38p+1;
  const double t5 = fma(t0, 0x1p+1, (-0x1p+0));
  const double t6 = t0 - 0x1p+0;
  const double t7 = t0 - 0x1.8p+0;
  const double t8 = 0x1p+1 + t0;
  const double t9 = t0 + 0x1p+0;
  const double t10 = fma(t0, 0x1.8p+0, 0x1p+0);
  const double t11 = t4 ? t7 : (-0x1p+0);
  const double t12 = t4 ? t10 : t0;
  const double t13 = t4 ? 0x1.f730bd281f69bp-1 : 0x1.921fb54442d18p+0;
  const double t14 = t4 ? 0x1.007887af0cbbdp-56 : 0x1.1a62633145c07p-54;
  const double t15 = t3 ? t6 : t11;
  const double t16 = t3 ? t9 : t12;
  const double t17 = t3 ? 0x1.921fb54442d18p-1 : t13;
  const double t18 = t3 ? 0x1.1a62633145c07p-55 : t14;
  const double t19 = t2 ? t5 : t15;
  const double t20 = t2 ? t8 : t16;
  const double t21 = t2 ? 0x1.dac670561bb4fp-2 : t17;
  const double t22 = t2 ? 0x1.a2b7f222f65e2p-56 : t18;
  const double t23 = t1 ? t0 : t19;
  const double t24 = t1 ? 0x1p+0 : t20;
  const double t25 = t1 ? 0x0p+0 : t21;
  const double t26 = t1 ? 0x0p+0 : t22;
  const double t27 = t23 / t24;
  const double t28 = t27 * t27;
  const double t29 = fma(0x1.0ad3ae322da11p-6, t28, (-0x1.2b4442c6a6c2fp-5));
  const double t30 = fma(t29, t28, 0x1.97b4b24760debp-5);
  const double t31 = fma(t30, t28, (-0x1.dde2d52defd9ap-5));
  const double t32 = fma(t31, t28, 0x1.10d66a0d03d51p-4);
  const double t33 = fma(t32, t28, (-0x1.3b0f2af749a6dp-4));
  const double t34 = fma(t33, t28, 0x1.745cdc54c206ep-4);
  const double t35 = fma(t34, t28, (-0x1.c71c6fe231671p-4));
  const double t36 = fma(t35, t28, 0x1.24924920083ffp-3);
  const double t37 = fma(t36, t28, (-0x1.999999998ebc4p-3));
  const double t38 = fma(t37, t28, 0x1.555555555550dp-2);
  const double t39 = t27 * t28;
  const double t40 = t39 * t38;
  const double t41 = t40 - t26;
  const double t42 = t41 - t27;
  const double t43 = t25 - t42;
  const double t44 = copysign(t43, x);
  return t44;
}
#endif
#ifndef KILN_CUDA_FN_kiln_atan_f32
#define KILN_CUDA_FN_kiln_atan_f32
KILN_DF float kiln_atan_f32(float x) {
  const double t0 = (double)x;
  const double t1 = fabs(t0);
  const bool t2 = t1 < 0x1.cp-2;
  const bool t3 = t1 < 0x1.6p-1;
  const bool t4 = t1 < 0x1.3p+0;
  const bool t5 = t1 < 0x1.38p+1;
  const double t6 = fma(t1, 0x1p+1, (-0x1p+0));
  const double t7 = t1 - 0x1p+0;
  const double t8 = t1 - 0x1.8p+0;
  const double t9 = 0x1p+1 + t1;
  const double t10 = t1 + 0x1p+0;
  const double t11 = fma(t1, 0x1.8p+0, 0x1p+0);
  const double t12 = t5 ? t8 : (-0x1p+0);
  const double t13 = t5 ? t11 : t1;
  const double t14 = t5 ? 0x1.f730bd281f69bp-1 : 0x1.921fb54442d18p+0;
  const double t15 = t5 ? 0x1.007887af0cbbdp-56 : 0x1.1a62633145c07p-54;
  const double t16 = t4 ? t7 : t12;
  const double t17 = t4 ? t10 : t13;
  const double t18 = t4 ? 0x1.921fb54442d18p-1 : t14;
  const double t19 = t4 ? 0x1.1a62633145c07p-55 : t15;
  const double t20 = t3 ? t6 : t16;
  const double t21 = t3 ? t9 : t17;
  const double t22 = t3 ? 0x1.dac670561bb4fp-2 : t18;
  const double t23 = t3 ? 0x1.a2b7f222f65e2p-56 : t19;
  const double t24 = t2 ? t1 : t20;
  const double t25 = t2 ? 0x1p+0 : t21;
  const double t26 = t2 ? 0x0p+0 : t22;
  const double t27 = t2 ? 0x0p+0 : t23;
  const double t28 = t24 / t25;
  const double t29 = t28 * t28;
  const double t30 = fma(0x1.0ad3ae322da11p-6, t29, (-0x1.2b4442c6a6c2fp-5));
  const double t31 = fma(t30, t29, 0x1.97b4b24760debp-5);
  const double t32 = fma(t31, t29, (-0x1.dde2d52defd9ap-5));
  const double t33 = fma(t32, t29, 0x1.10d66a0d03d51p-4);
  const double t34 = fma(t33, t29, (-0x1.3b0f2af749a6dp-4));
  const double t35 = fma(t34, t29, 0x1.745cdc54c206ep-4);
  const double t36 = fma(t35, t29, (-0x1.c71c6fe231671p-4));
  const double t37 = fma(t36, t29, 0x1.24924920083ffp-3);
  const double t38 = fma(t37, t29, (-0x1.999999998ebc4p-3));
  const double t39 = fma(t38, t29, 0x1.555555555550dp-2);
  const double t40 = t28 * t29;
  const double t41 = t40 * t39;
  const double t42 = t41 - t27;
  const double t43 = t42 - t28;
  const double t44 = t26 - t43;
  const double t45 = copysign(t44, t0);
  const float t46 = (float)t45;
  return t46;
}
#endif
#ifndef KILN_CUDA_FN_kiln_asin_f64
#define KILN_CUDA_FN_kiln_asin_f64
KILN_DF double kiln_asin_f64(double x) {
  const double t0 = fabs(x);
  const double t1 = -x;
  const double t2 = fma(t1, x, 0x1p+0);
  const double t3 = x * x;
  const double t4 = -t3;
  const double t5 = fma(x, x, t4);
  const double t6 = 0x1p+0 - t3;
  const double t7 = 0x1p+0 - t2;
  const double t8 = -x;
  const double t9 = fma(t8, x, t7);
  const double t10 = t6 - t2;
  const double t11 = t10 - t5;
  const bool t12 = t2 < 0x1p-1;
  const double t13 = t12 ? t11 : t9;
  const double t14 = sqrt(t2);
  const double t15 = t14 + t14;
  const double t16 = -t14;
  const double t17 = fma(t16, t14, t2);
  const double t18 = t17 + t13;
  const double t19 = t18 / t15;
  const bool t20 = t14 == 0x0p+0;
  const double t21 = t20 ? 0x0p+0 : t19;
  const double t22 = t0 / t14;
  const double t23 = t22 * t21;
  const double t24 = -t22;
  const double t25 = fma(t24, t14, t0);
  const double t26 = t25 - t23;
  const double t27 = t26 / t14;
  const bool t28 = t22 < __longlong_as_double(0x7ff0000000000000LL);
  const double t29 = t28 ? t27 : 0x0p+0;
  const bool t30 = t22 < 0x1.cp-2;
  const bool t31 = t22 < 0x1.6p-1;
  const bool t32 = t22 < 0x1.3p+0;
  const bool t33 = t22 < 0x1.38p+1;
  const double t34 = fma(t22, 0x1p+1, (-0x1p+0));
  const double t35 = t22 - 0x1p+0;
  const double t36 = t22 - 0x1.8p+0;
  const double t37 = 0x1p+1 + t22;
  const double t38 = t22 + 0x1p+0;
  const double t39 = fma(t22, 0x1.8p+0, 0x1p+0);
  const double t40 = t33 ? t36 : (-0x1p+0);
  const double t41 = t33 ? t39 : t22;
  const double t42 = t33 ? 0x1.f730bd281f69bp-1 : 0x1.921fb54442d18p+0;
  const double t43 = t33 ? 0x1.007887af0cbbdp-56 : 0x1.1a62633145c07p-54;
  const double t44 = t32 ? t35 : t40;
  const double t45 = t32 ? t38 : t41;
  const double t46 = t32 ? 0x1.921fb54442d18p-1 : t42;
  const double t47 = t32 ? 0x1.1a62633145c07p-55 : t43;
  const double t48 = t31 ? t34 : t44;
  const double t49 = t31 ? t37 : t45;
  const double t50 = t31 ? 0x1.dac670561bb4fp-2 : t46;
  const double t51 = t31 ? 0x1.a2b7f222f65e2p-56 : t47;
  const double t52 = t30 ? t22 : t48;
  const double t53 = t30 ? 0x1p+0 : t49;
  const double t54 = t30 ? 0x0p+0 : t50;
  const double t55 = t30 ? 0x0p+0 : t51;
  const double t56 = fma(t22, t22, 0x1p+0);
  const double t57 = t29 / t56;
  const double t58 = t55 + t57;
  const double t59 = t52 / t53;
  const double t60 = t59 * t59;
  const double t61 = fma(0x1.0ad3ae322da11p-6, t60, (-0x1.2b4442c6a6c2fp-5));
  const double t62 = fma(t61, t60, 0x1.97b4b24760debp-5);
  const double t63 = fma(t62, t60, (-0x1.dde2d52defd9ap-5));
  const double t64 = fma(t63, t60, 0x1.10d66a0d03d51p-4);
  const double t65 = fma(t64, t60, (-0x1.3b0f2af749a6dp-4));
  const double t66 = fma(t65, t60, 0x1.745cdc54c206ep-4);
  const double t67 = fma(t66, t60, (-0x1.c71c6fe231671p-4));
  const double t68 = fma(t67, t60, 0x1.24924920083ffp-3);
  const double t69 = fma(t68, t60, (-0x1.999999998ebc4p-3));
  const double t70 = fma(t69, t60, 0x1.555555555550dp-2);
  const double t71 = t59 * t60;
  const double t72 = t71 * t70;
  const double t73 = t72 - t58;
  const double t74 = t73 - t59;
  const double t75 = t54 - t74;
  const double t76 = copysign(t75, x);
  return t76;
}
#endif
#ifndef KILN_CUDA_FN_kiln_asin_f32
#define KILN_CUDA_FN_kiln_asin_f32
KILN_DF float kiln_asin_f32(float x) {
  const double t0 = (double)x;
  const double t1 = fabs(t0);
  const double t2 = -t0;
  const double t3 = fma(t2, t0, 0x1p+0);
  const double t4 = t0 * t0;
  const double t5 = -t4;
  const double t6 = fma(t0, t0, t5);
  const double t7 = 0x1p+0 - t4;
  const double t8 = 0x1p+0 - t3;
  const double t9 = -t0;
  const double t10 = fma(t9, t0, t8);
  const double t11 = t7 - t3;
  const double t12 = t11 - t6;
  const bool t13 = t3 < 0x1p-1;
  const double t14 = t13 ? t12 : t10;
  const double t15 = sqrt(t3);
  const double t16 = t15 + t15;
  const double t17 = -t15;
  const double t18 = fma(t17, t15, t3);
  const double t19 = t18 + t14;
  const double t20 = t19 / t16;
  const bool t21 = t15 == 0x0p+0;
  const double t22 = t21 ? 0x0p+0 : t20;
  const double t23 = t1 / t15;
  const double t24 = t23 * t22;
  const double t25 = -t23;
  const double t26 = fma(t25, t15, t1);
  const double t27 = t26 - t24;
  const double t28 = t27 / t15;
  const bool t29 = t23 < __longlong_as_double(0x7ff0000000000000LL);
  const double t30 = t29 ? t28 : 0x0p+0;
  const bool t31 = t23 < 0x1.cp-2;
  const bool t32 = t23 < 0x1.6p-1;
  const bool t33 = t23 < 0x1.3p+0;
  const bool t34 = t23 < 0x1.38p+1;
  const double t35 = fma(t23, 0x1p+1, (-0x1p+0));
  const double t36 = t23 - 0x1p+0;
  const double t37 = t23 - 0x1.8p+0;
  const double t38 = 0x1p+1 + t23;
  const double t39 = t23 + 0x1p+0;
  const double t40 = fma(t23, 0x1.8p+0, 0x1p+0);
  const double t41 = t34 ? t37 : (-0x1p+0);
  const double t42 = t34 ? t40 : t23;
  const double t43 = t34 ? 0x1.f730bd281f69bp-1 : 0x1.921fb54442d18p+0;
  const double t44 = t34 ? 0x1.007887af0cbbdp-56 : 0x1.1a62633145c07p-54;
  const double t45 = t33 ? t36 : t41;
  const double t46 = t33 ? t39 : t42;
  const double t47 = t33 ? 0x1.921fb54442d18p-1 : t43;
  const double t48 = t33 ? 0x1.1a62633145c07p-55 : t44;
  const double t49 = t32 ? t35 : t45;
  const double t50 = t32 ? t38 : t46;
  const double t51 = t32 ? 0x1.dac670561bb4fp-2 : t47;
  const double t52 = t32 ? 0x1.a2b7f222f65e2p-56 : t48;
  const double t53 = t31 ? t23 : t49;
  const double t54 = t31 ? 0x1p+0 : t50;
  const double t55 = t31 ? 0x0p+0 : t51;
  const double t56 = t31 ? 0x0p+0 : t52;
  const double t57 = fma(t23, t23, 0x1p+0);
  const double t58 = t30 / t57;
  const double t59 = t56 + t58;
  const double t60 = t53 / t54;
  const double t61 = t60 * t60;
  const double t62 = fma(0x1.0ad3ae322da11p-6, t61, (-0x1.2b4442c6a6c2fp-5));
  const double t63 = fma(t62, t61, 0x1.97b4b24760debp-5);
  const double t64 = fma(t63, t61, (-0x1.dde2d52defd9ap-5));
  const double t65 = fma(t64, t61, 0x1.10d66a0d03d51p-4);
  const double t66 = fma(t65, t61, (-0x1.3b0f2af749a6dp-4));
  const double t67 = fma(t66, t61, 0x1.745cdc54c206ep-4);
  const double t68 = fma(t67, t61, (-0x1.c71c6fe231671p-4));
  const double t69 = fma(t68, t61, 0x1.24924920083ffp-3);
  const double t70 = fma(t69, t61, (-0x1.999999998ebc4p-3));
  const double t71 = fma(t70, t61, 0x1.555555555550dp-2);
  const double t72 = t60 * t61;
  const double t73 = t72 * t71;
  const double t74 = t73 - t59;
  const double t75 = t74 - t60;
  const double t76 = t55 - t75;
  const double t77 = copysign(t76, t0);
  const float t78 = (float)t77;
  return t78;
}
#endif
#ifndef KILN_CUDA_FN_kiln_acos_f64
#define KILN_CUDA_FN_kiln_acos_f64
KILN_DF double kiln_acos_f64(double x) {
  const double t0 = -x;
  const double t1 = fma(t0, x, 0x1p+0);
  const double t2 = x * x;
  const double t3 = -t2;
  const double t4 = fma(x, x, t3);
  const double t5 = 0x1p+0 - t2;
  const double t6 = 0x1p+0 - t1;
  const double t7 = -x;
  const double t8 = fma(t7, x, t6);
  const double t9 = t5 - t1;
  const double t10 = t9 - t4;
  const bool t11 = t1 < 0x1p-1;
  const double t12 = t11 ? t10 : t8;
  const double t13 = sqrt(t1);
  const double t14 = t13 + t13;
  const double t15 = -t13;
  const double t16 = fma(t15, t13, t1);
  const double t17 = t16 + t12;
  const double t18 = t17 / t14;
  const bool t19 = t13 == 0x0p+0;
  const double t20 = t19 ? 0x0p+0 : t18;
  const double t21 = fabs(x);
  const double t22 = t13 / t21;
  const bool t23 = t21 == __longlong_as_double(0x7ff0000000000000LL);
  const bool t24 = t13 == __longlong_as_double(0x7ff0000000000000LL);
  const bool t25 = t24 ? t23 : t24;
  const double t26 = t25 ? 0x1p+0 : t22;
  const bool t27 = t21 == 0x0p+0;
  const bool t28 = t13 == 0x0p+0;
  const bool t29 = t28 ? t27 : t28;
  const double t30 = t29 ? 0x0p+0 : t26;
  const double t31 = -t30;
  const double t32 = fma(t31, t21, t13);
  const double t33 = t32 + t20;
  const double t34 = t33 / t21;
  const bool t35 = t30 < __longlong_as_double(0x7ff0000000000000LL);
  const double t36 = t35 ? t34 : 0x0p+0;
  const bool t37 = t30 < 0x1.cp-2;
  const bool t38 = t30 < 0x1.6p-1;
  const bool t39 = t30 < 0x1.3p+0;
  const bool t40 = t30 < 0x1.38p+1;
  const double t41 = fma(t30, 0x1p+1, (-0x1p+0));
  const double t42 = t30 - 0x1p+0;
  const double t43 = t30 - 0x1.8p+0;
  const double t44 = 0x1p+1 + t30;
  const double t45 = t30 + 0x1p+0;
  const double t46 = fma(t30, 0x1.8p+0, 0x1p+0);
  const double t47 = t40 ? t43 : (-0x1p+0);
  const double t48 = t40 ? t46 : t30;
  const double t49 = t40 ? 0x1.f730bd281f69bp-1 : 0x1.921fb54442d18p+0;
  const double t50 = t40 ? 0x1.007887af0cbbdp-56 : 0x1.1a62633145c07p-54;
  const double t51 = t39 ? t42 : t47;
  const double t52 = t39 ? t45 : t48;
  const double t53 = t39 ? 0x1.921fb54442d18p-1 : t49;
  const double t54 = t39 ? 0x1.1a62633145c07p-55 : t50;
  const double t55 = t38 ? t41 : t51;
  const double t56 = t38 ? t44 : t52;
  const double t57 = t38 ? 0x1.dac670561bb4fp-2 : t53;
  const double t58 = t38 ? 0x1.a2b7f222f65e2p-56 : t54;
  const double t59 = t37 ? t30 : t55;
  const double t60 = t37 ? 0x1p+0 : t56;
  const double t61 = t37 ? 0x0p+0 : t57;
  const double t62 = t37 ? 0x0p+0 : t58;
  const double t63 = fma(t30, t30, 0x1p+0);
  const double t64 = t36 / t63;
  const double t65 = t62 + t64;
  const double t66 = t59 / t60;
  const double t67 = t66 * t66;
  const double t68 = fma(0x1.0ad3ae322da11p-6, t67, (-0x1.2b4442c6a6c2fp-5));
  const double t69 = fma(t68, t67, 0x1.97b4b24760debp-5);
  const double t70 = fma(t69, t67, (-0x1.dde2d52defd9ap-5));
  const double t71 = fma(t70, t67, 0x1.10d66a0d03d51p-4);
  const double t72 = fma(t71, t67, (-0x1.3b0f2af749a6dp-4));
  const double t73 = fma(t72, t67, 0x1.745cdc54c206ep-4);
  const double t74 = fma(t73, t67, (-0x1.c71c6fe231671p-4));
  const double t75 = fma(t74, t67, 0x1.24924920083ffp-3);
  const double t76 = fma(t75, t67, (-0x1.999999998ebc4p-3));
  const double t77 = fma(t76, t67, 0x1.555555555550dp-2);
  const double t78 = t66 * t67;
  const double t79 = t78 * t77;
  const double t80 = t79 - t65;
  const double t81 = t80 - t66;
  const double t82 = t61 - t81;
  const double t83 = copysign(0x1p+0, x);
  const bool t84 = t83 < 0x0p+0;
  const double t85 = t82 - 0x1.1a62633145c07p-53;
  const double t86 = 0x1.921fb54442d18p+1 - t85;
  const double t87 = t84 ? t86 : t82;
  const bool t88 = x != x;
  const double t89 = t88 ? x : t87;
  return t89;
}
#endif
#ifndef KILN_CUDA_FN_kiln_acos_f32
#define KILN_CUDA_FN_kiln_acos_f32
KILN_DF float kiln_acos_f32(float x) {
  const double t0 = (double)x;
  const double t1 = -t0;
  const double t2 = fma(t1, t0, 0x1p+0);
  const double t3 = t0 * t0;
  const double t4 = -t3;
  const double t5 = fma(t0, t0, t4);
  const double t6 = 0x1p+0 - t3;
  const double t7 = 0x1p+0 - t2;
  const double t8 = -t0;
  const double t9 = fma(t8, t0, t7);
  const double t10 = t6 - t2;
  const double t11 = t10 - t5;
  const bool t12 = t2 < 0x1p-1;
  const double t13 = t12 ? t11 : t9;
  const double t14 = sqrt(t2);
  const double t15 = t14 + t14;
  const double t16 = -t14;
  const double t17 = fma(t16, t14, t2);
  const double t18 = t17 + t13;
  const double t19 = t18 / t15;
  const bool t20 = t14 == 0x0p+0;
  const double t21 = t20 ? 0x0p+0 : t19;
  const double t22 = fabs(t0);
  const double t23 = t14 / t22;
  const bool t24 = t22 == __longlong_as_double(0x7ff0000000000000LL);
  const bool t25 = t14 == __longlong_as_double(0x7ff0000000000000LL);
  const bool t26 = t25 ? t24 : t25;
  const double t27 = t26 ? 0x1p+0 : t23;
  const bool t28 = t22 == 0x0p+0;
  const bool t29 = t14 == 0x0p+0;
  const bool t30 = t29 ? t28 : t29;
  const double t31 = t30 ? 0x0p+0 : t27;
  const double t32 = -t31;
  const double t33 = fma(t32, t22, t14);
  const double t34 = t33 + t21;
  const double t35 = t34 / t22;
  const bool t36 = t31 < __longlong_as_double(0x7ff0000000000000LL);
  const double t37 = t36 ? t35 : 0x0p+0;
  const bool t38 = t31 < 0x1.cp-2;
  const bool t39 = t31 < 0x1.6p-1;
  const bool t40 = t31 < 0x1.3p+0;
  const bool t41 = t31 < 0x1.38p+1;
  const double t42 = fma(t31, 0x1p+1, (-0x1p+0));
  const double t43 = t31 - 0x1p+0;
  const double t44 = t31 - 0x1.8p+0;
  const double t45 = 0x1p+1 + t31;
  const double t46 = t31 + 0x1p+0;
  const double t47 = fma(t31, 0x1.8p+0, 0x1p+0);
  const double t48 = t41 ? t44 : (-0x1p+0);
  const double t49 = t41 ? t47 : t31;
  const double t50 = t41 ? 0x1.f730bd281f69bp-1 : 0x1.921fb54442d18p+0;
  const double t51 = t41 ? 0x1.007887af0cbbdp-56 : 0x1.1a62633145c07p-54;
  const double t52 = t40 ? t43 : t48;
  const double t53 = t40 ? t46 : t49;
  const double t54 = t40 ? 0x1.921fb54442d18p-1 : t50;
  const double t55 = t40 ? 0x1.1a62633145c07p-55 : t51;
  const double t56 = t39 ? t42 : t52;
  const double t57 = t39 ? t45 : t53;
  const double t58 = t39 ? 0x1.dac670561bb4fp-2 : t54;
  const double t59 = t39 ? 0x1.a2b7f222f65e2p-56 : t55;
  const double t60 = t38 ? t31 : t56;
  const double t61 = t38 ? 0x1p+0 : t57;
  const double t62 = t38 ? 0x0p+0 : t58;
  const double t63 = t38 ? 0x0p+0 : t59;
  const double t64 = fma(t31, t31, 0x1p+0);
  const double t65 = t37 / t64;
  const double t66 = t63 + t65;
  const double t67 = t60 / t61;
  const double t68 = t67 * t67;
  const double t69 = fma(0x1.0ad3ae322da11p-6, t68, (-0x1.2b4442c6a6c2fp-5));
  const double t70 = fma(t69, t68, 0x1.97b4b24760debp-5);
  const double t71 = fma(t70, t68, (-0x1.dde2d52defd9ap-5));
  const double t72 = fma(t71, t68, 0x1.10d66a0d03d51p-4);
  const double t73 = fma(t72, t68, (-0x1.3b0f2af749a6dp-4));
  const double t74 = fma(t73, t68, 0x1.745cdc54c206ep-4);
  const double t75 = fma(t74, t68, (-0x1.c71c6fe231671p-4));
  const double t76 = fma(t75, t68, 0x1.24924920083ffp-3);
  const double t77 = fma(t76, t68, (-0x1.999999998ebc4p-3));
  const double t78 = fma(t77, t68, 0x1.555555555550dp-2);
  const double t79 = t67 * t68;
  const double t80 = t79 * t78;
  const double t81 = t80 - t66;
  const double t82 = t81 - t67;
  const double t83 = t62 - t82;
  const double t84 = copysign(0x1p+0, t0);
  const bool t85 = t84 < 0x0p+0;
  const double t86 = t83 - 0x1.1a62633145c07p-53;
  const double t87 = 0x1.921fb54442d18p+1 - t86;
  const double t88 = t85 ? t87 : t83;
  const bool t89 = t0 != t0;
  const double t90 = t89 ? t0 : t88;
  const float t91 = (float)t90;
  return t91;
}
#endif
#ifndef KILN_CUDA_FN_kiln_sinh_f64
#define KILN_CUDA_FN_kiln_sinh_f64
KILN_DF double kiln_sinh_f64(double x) {
  const double t0 = fabs(x);
  const double t1 = t0 * t0;
  const double t2 = fma(0x1.71b8ef6dcf572p-66, t1, 0x1.2f49b46814157p-57);
  const double t3 = fma(t2, t1, 0x1.952c77030ad4ap-49);
  const double t4 = fma(t3, t1, 0x1.ae7f3e733b81fp-41);
  const double t5 = fma(t4, t1, 0x1.6124613a86d09p-33);
  const double t6 = fma(t5, t1, 0x1.ae64567f544e4p-26);
  const double t7 = fma(t6, t1, 0x1.71de3a556c734p-19);
  const double t8 = fma(t7, t1, 0x1.a01a01a01a01ap-13);
  const double t9 = fma(t8, t1, 0x1.1111111111111p-7);
  const double t10 = fma(t9, t1, 0x1.5555555555555p-3);
  const double t11 = t0 * t1;
  const double t12 = fma(t11, t10, t0);
  const double t13 = fmin(t0, 0x1.6p+4);
  const double t14 = kiln_expm1_f64(t13);
  const double t15 = t14 + 0x1p+0;
  const double t16 = t14 / t15;
  const double t17 = t14 + t16;
  const double t18 = 0x1p-1 * t17;
  const bool t19 = t0 < 0x1p+0;
  const double t20 = t19 ? t12 : t18;
  const double t21 = fmin(t0, 0x1.638p+9);
  const double t22 = t21 * 0x1.71547652b82fep+0;
  const double t23 = rint(t22);
  const double t24 = -t23;
  const double t25 = fma(t24, 0x1.62e42feep-1, t21);
  const double t26 = -t23;
  const double t27 = fma(t26, 0x1.a39ef35793c76p-33, t25);
  const double t28 = t23 - 0x1p+0;
  const double t29 = fma(0x1.93974a8c07c9dp-37, t27, 0x1.6124613a86d09p-33);
  const double t30 = fma(t29, t27, 0x1.1eed8eff8d898p-29);
  const double t31 = fma(t30, t27, 0x1.ae64567f544e4p-26);
  const double t32 = fma(t31, t27, 0x1.27e4fb7789f5cp-22);
  const double t33 = fma(t32, t27, 0x1.71de3a556c734p-19);
  const double t34 = fma(t33, t27, 0x1.a01a01a01a01ap-16);
  const double t35 = fma(t34, t27, 0x1.a01a01a01a01ap-13);
  const double t36 = fma(t35, t27, 0x1.6c16c16c16c17p-10);
  const double t37 = fma(t36, t27, 0x1.1111111111111p-7);
  const double t38 = fma(t37, t27, 0x1.5555555555555p-5);
  const double t39 = fma(t38, t27, 0x1.5555555555555p-3);
  const double t40 = fma(t39, t27, 0x1p-1);
  const double t41 = t27 * t27;
  const double t42 = fma(t41, t40, t27);
  const double t43 = 0x1p+0 + t42;
  const long long t44 = (long long)t28;
  const long long t45 = t44 >> 1;
  const long long t46 = (long long)((unsigned long long)t44 - (unsigned long long)t45);
  const long long t47 = (long long)((unsigned long long)t46 + (unsigned long long)1023LL);
  const long long t48 = (long long)((unsigned long long)t47 << 52);
  const double t49 = __longlong_as_double(t48);
  const long long t50 = (long long)((unsigned long long)t45 + (unsigned long long)1023LL);
  const long long t51 = (long long)((unsigned long long)t50 << 52);
  const double t52 = __longlong_as_double(t51);
  const double t53 = t43 * t52;
  const double t54 = t53 * t49;
  const bool t55 = t0 > 0x1.6p+4;
  const double t56 = t55 ? t54 : t20;
  const double t57 = copysign(t56, x);
  const bool t58 = x != x;
  const double t59 = t58 ? x : t57;
  return t59;
}
#endif
#ifndef KILN_CUDA_FN_kiln_sinh_f32
#define KILN_CUDA_FN_kiln_sinh_f32
KILN_DF float kiln_sinh_f32(float x) {
  const double t0 = (double)x;
  const double t1 = fabs(t0);
  const double t2 = t1 * t1;
  const double t3 = fma(0x1.71b8ef6dcf572p-66, t2, 0x1.2f49b46814157p-57);
  const double t4 = fma(t3, t2, 0x1.952c77030ad4ap-49);
  const double t5 = fma(t4, t2, 0x1.ae7f3e733b81fp-41);
  const double t6 = fma(t5, t2, 0x1.6124613a86d09p-33);
  const double t7 = fma(t6, t2, 0x1.ae64567f544e4p-26);
  const double t8 = fma(t7, t2, 0x1.71de3a556c734p-19);
  const double t9 = fma(t8, t2, 0x1.a01a01a01a01ap-13);
  const double t10 = fma(t9, t2, 0x1.1111111111111p-7);
  const double t11 = fma(t10, t2, 0x1.5555555555555p-3);
  const double t12 = t1 * t2;
  const double t13 = fma(t12, t11, t1);
  const double t14 = fmin(t1, 0x1.6p+4);
  const double t15 = kiln_expm1_f64(t14);
  const double t16 = t15 + 0x1p+0;
  const double t17 = t15 / t16;
  const double t18 = t15 + t17;
  const double t19 = 0x1p-1 * t18;
  const bool t20 = t1 < 0x1p+0;
  const double t21 = t20 ? t13 : t19;
  const double t22 = fmin(t1, 0x1.638p+9);
  const double t23 = t22 * 0x1.71547652b82fep+0;
  const double t24 = rint(t23);
  const double t25 = -t24;
  const double t26 = fma(t25, 0x1.62e42feep-1, t22);
  const double t27 = -t24;
  const double t28 = fma(t27, 0x1.a39ef35793c76p-33, t26);
  const double t29 = t24 - 0x1p+0;
  const double t30 = fma(0x1.93974a8c07c9dp-37, t28, 0x1.6124613a86d09p-33);
  const double t31 = fma(t30, t28, 0x1.1eed8eff8d898p-29);
  const double t32 = fma(t31, t28, 0x1.ae64567f544e4p-26);
  const double t33 = fma(t32, t28, 0x1.27e4fb7789f5cp-22);
  const double t34 = fma(t33, t28, 0x1.71de3a556c734p-19);
  const double t35 = fma(t34, t28, 0x1.a01a01a01a01ap-16);
  const double t36 = fma(t35, t28, 0x1.a01a01a01a01ap-13);
  const double t37 = fma(t36, t28, 0x1.6c16c16c16c17p-10);
  const double t38 = fma(t37, t28, 0x1.1111111111111p-7);
  const double t39 = fma(t38, t28, 0x1.5555555555555p-5);
  const double t40 = fma(t39, t28, 0x1.5555555555555p-3);
  const double t41 = fma(t40, t28, 0x1p-1);
  const double t42 = t28 * t28;
  const double t43 = fma(t42, t41, t28);
  const double t44 = 0x1p+0 + t43;
  const long long t45 = (long long)t29;
  const long long t46 = t45 >> 1;
  const long long t47 = (long long)((unsigned long long)t45 - (unsigned long long)t46);
  const long long t48 = (long long)((unsigned long long)t47 + (unsigned long long)1023LL);
  const long long t49 = (long long)((unsigned long long)t48 << 52);
  const double t50 = __longlong_as_double(t49);
  const long long t51 = (long long)((unsigned long long)t46 + (unsigned long long)1023LL);
  const long long t52 = (long long)((unsigned long long)t51 << 52);
  const double t53 = __longlong_as_double(t52);
  const double t54 = t44 * t53;
  const double t55 = t54 * t50;
  const bool t56 = t1 > 0x1.6p+4;
  const double t57 = t56 ? t55 : t21;
  const double t58 = copysign(t57, t0);
  const bool t59 = t0 != t0;
  const double t60 = t59 ? t0 : t58;
  const float t61 = (float)t60;
  return t61;
}
#endif
#ifndef KILN_CUDA_FN_kiln_cosh_f64
#define KILN_CUDA_FN_kiln_cosh_f64
KILN_DF double kiln_cosh_f64(double x) {
  const double t0 = fabs(x);
  const double t1 = fmin(t0, 0x1.6p+4);
  const double t2 = kiln_expm1_f64(t1);
  const double t3 = t2 + 0x1p+0;
  const double t4 = t3 + t3;
  const double t5 = t2 * t2;
  const double t6 = t5 / t4;
  const double t7 = 0x1p+0 + t6;
  const double t8 = 0x1p-1 / t3;
  const double t9 = 0x1p-1 * t3;
  const double t10 = t9 + t8;
  const bool t11 = t0 < 0x1.62e42fefa39efp-2;
  const double t12 = t11 ? t7 : t10;
  const double t13 = fmin(t0, 0x1.638p+9);
  const double t14 = t13 * 0x1.71547652b82fep+0;
  const double t15 = rint(t14);
  const double t16 = -t15;
  const double t17 = fma(t16, 0x1.62e42feep-1, t13);
  const double t18 = -t15;
  const double t19 = fma(t18, 0x1.a39ef35793c76p-33, t17);
  const double t20 = t15 - 0x1p+0;
  const double t21 = fma(0x1.93974a8c07c9dp-37, t19, 0x1.6124613a86d09p-33);
  const double t22 = fma(t21, t19, 0x1.1eed8eff8d898p-29);
  const double t23 = fma(t22, t19, 0x1.ae64567f544e4p-26);
  const double t24 = fma(t23, t19, 0x1.27e4fb7789f5cp-22);
  const double t25 = fma(t24, t19, 0x1.71de3a556c734p-19);
  const double t26 = fma(t25, t19, 0x1.a01a01a01a01ap-16);
  const double t27 = fma(t26, t19, 0x1.a01a01a01a01ap-13);
  const double t28 = fma(t27, t19, 0x1.6c16c16c16c17p-10);
  const double t29 = fma(t28, t19, 0x1.1111111111111p-7);
  const double t30 = fma(t29, t19, 0x1.5555555555555p-5);
  const double t31 = fma(t30, t19, 0x1.5555555555555p-3);
  const double t32 = fma(t31, t19, 0x1p-1);
  const double t33 = t19 * t19;
  const double t34 = fma(t33, t32, t19);
  const double t35 = 0x1p+0 + t34;
  const long long t36 = (long long)t20;
  const long long t37 = t36 >> 1;
  const long long t38 = (long long)((unsigned long long)t36 - (unsigned long long)t37);
  const long long t39 = (long long)((unsigned long long)t38 + (unsigned long long)1023LL);
  const long long t40 = (long long)((unsigned long long)t39 << 52);
  const double t41 = __longlong_as_double(t40);
  const long long t42 = (long long)((unsigned long long)t37 + (unsigned long long)1023LL);
  const long long t43 = (long long)((unsigned long long)t42 << 52);
  const double t44 = __longlong_as_double(t43);
  const double t45 = t35 * t44;
  const double t46 = t45 * t41;
  const bool t47 = t0 > 0x1.6p+4;
  const double t48 = t47 ? t46 : t12;
  const bool t49 = x != x;
  const double t50 = t49 ? x : t48;
  return t50;
}
#endif
#ifndef KILN_CUDA_FN_kiln_cosh_f32
#define KILN_CUDA_FN_kiln_cosh_f32
KILN_DF float kiln_cosh_f32(float x) {
  const double t0 = (double)x;
  const double t1 = fabs(t0);
  const double t2 = fmin(t1, 0x1.6p+4);
  const double t3 = kiln_expm1_f64(t2);
  const double t4 = t3 + 0x1p+0;
  const double t5 = t4 + t4;
  const double t6 = t3 * t3;
  const double t7 = t6 / t5;
  const double t8 = 0x1p+0 + t7;
  const double t9 = 0x1p-1 / t4;
  const double t10 = 0x1p-1 * t4;
  const double t11 = t10 + t9;
  const bool t12 = t1 < 0x1.62e42fefa39efp-2;
  const double t13 = t12 ? t8 : t11;
  const double t14 = fmin(t1, 0x1.638p+9);
  const double t15 = t14 * 0x1.71547652b82fep+0;
  const double t16 = rint(t15);
  const double t17 = -t16;
  const double t18 = fma(t17, 0x1.62e42feep-1, t14);
  const double t19 = -t16;
  const double t20 = fma(t19, 0x1.a39ef35793c76p-33, t18);
  const double t21 = t16 - 0x1p+0;
  const double t22 = fma(0x1.93974a8c07c9dp-37, t20, 0x1.6124613a86d09p-33);
  const double t23 = fma(t22, t20, 0x1.1eed8eff8d898p-29);
  const double t24 = fma(t23, t20, 0x1.ae64567f544e4p-26);
  const double t25 = fma(t24, t20, 0x1.27e4fb7789f5cp-22);
  const double t26 = fma(t25, t20, 0x1.71de3a556c734p-19);
  const double t27 = fma(t26, t20, 0x1.a01a01a01a01ap-16);
  const double t28 = fma(t27, t20, 0x1.a01a01a01a01ap-13);
  const double t29 = fma(t28, t20, 0x1.6c16c16c16c17p-10);
  const double t30 = fma(t29, t20, 0x1.1111111111111p-7);
  const double t31 = fma(t30, t20, 0x1.5555555555555p-5);
  const double t32 = fma(t31, t20, 0x1.5555555555555p-3);
  const double t33 = fma(t32, t20, 0x1p-1);
  const double t34 = t20 * t20;
  const double t35 = fma(t34, t33, t20);
  const double t36 = 0x1p+0 + t35;
  const long long t37 = (long long)t21;
  const long long t38 = t37 >> 1;
  const long long t39 = (long long)((unsigned long long)t37 - (unsigned long long)t38);
  const long long t40 = (long long)((unsigned long long)t39 + (unsigned long long)1023LL);
  const long long t41 = (long long)((unsigned long long)t40 << 52);
  const double t42 = __longlong_as_double(t41);
  const long long t43 = (long long)((unsigned long long)t38 + (unsigned long long)1023LL);
  const long long t44 = (long long)((unsigned long long)t43 << 52);
  const double t45 = __longlong_as_double(t44);
  const double t46 = t36 * t45;
  const double t47 = t46 * t42;
  const bool t48 = t1 > 0x1.6p+4;
  const double t49 = t48 ? t47 : t13;
  const bool t50 = t0 != t0;
  const double t51 = t50 ? t0 : t49;
  const float t52 = (float)t51;
  return t52;
}
#endif
#ifndef KILN_CUDA_FN_kiln_asinh_f64
#define KILN_CUDA_FN_kiln_asinh_f64
KILN_DF double kiln_asinh_f64(double x) {
  const double t0 = fabs(x);
  const double t1 = t0 * t0;
  const double t2 = 0x1p+0 + t1;
  const double t3 = sqrt(t2);
  const double t4 = 0x1p+0 + t3;
  const double t5 = t1 / t4;
  const double t6 = t0 + t5;
  const double t7 = kiln_log1p_f64(t6);
  const bool t8 = t0 > 0x1p+28;
  const double t9 = t0 + t3;
  const double t10 = 0x1p+0 / t9;
  const double t11 = t0 + t0;
  const double t12 = t11 + t10;
  const double t13 = t8 ? t0 : t12;
  const double t14 = t8 ? 0x1.62e42fefa39efp-1 : 0x0p+0;
  const double t15 = kiln_log_f64(t13);
  const double t16 = t15 + t14;
  const bool t17 = t0 > 0x1p+1;
  const double t18 = t17 ? t16 : t7;
  const double t19 = copysign(t18, x);
  const bool t20 = x != x;
  const double t21 = t20 ? x : t19;
  return t21;
}
#endif
#ifndef KILN_CUDA_FN_kiln_asinh_f32
#define KILN_CUDA_FN_kiln_asinh_f32
KILN_DF float kiln_asinh_f32(float x) {
  const double t0 = (double)x;
  const double t1 = fabs(t0);
  const double t2 = t1 * t1;
  const double t3 = 0x1p+0 + t2;
  const double t4 = sqrt(t3);
  const double t5 = 0x1p+0 + t4;
  const double t6 = t2 / t5;
  const double t7 = t1 + t6;
  const double t8 = kiln_log1p_f64(t7);
  const bool t9 = t1 > 0x1p+28;
  const double t10 = t1 + t4;
  const double t11 = 0x1p+0 / t10;
  const double t12 = t1 + t1;
  const double t13 = t12 + t11;
  const double t14 = t9 ? t1 : t13;
  const double t15 = t9 ? 0x1.62e42fefa39efp-1 : 0x0p+0;
  const double t16 = kiln_log_f64(t14);
  const double t17 = t16 + t15;
  const bool t18 = t1 > 0x1p+1;
  const double t19 = t18 ? t17 : t8;
  const double t20 = copysign(t19, t0);
  const bool t21 = t0 != t0;
  const double t22 = t21 ? t0 : t20;
  const float t23 = (float)t22;
  return t23;
}
#endif
#ifndef KILN_CUDA_FN_kiln_acosh_f64
#define KILN_CUDA_FN_kiln_acosh_f64
KILN_DF double kiln_acosh_f64(double x) {
  const double t0 = x - 0x1p+0;
  const double t1 = t0 + t0;
  const double t2 = fma(t0, t0, t1);
  const double t3 = sqrt(t2);
  const double t4 = t0 + t3;
  const double t5 = kiln_log1p_f64(t4);
  const bool t6 = x > 0x1p+28;
  const double t7 = fma(x, x, (-0x1p+0));
  const double t8 = sqrt(t7);
  const double t9 = x + t8;
  const double t10 = 0x1p+0 / t9;
  const double t11 = x + x;
  const double t12 = t11 - t10;
  const double t13 = t6 ? x : t12;
  const double t14 = t6 ? 0x1.62e42fefa39efp-1 : 0x0p+0;
  const double t15 = kiln_log_f64(t13);
  const double t16 = t15 + t14;
  const bool t17 = x > 0x1p+1;
  const double t18 = t17 ? t16 : t5;
  const bool t19 = x < 0x1p+0;
  const double t20 = t19 ? __longlong_as_double(0x7ff8000000000000LL) : t18;
  const bool t21 = x != x;
  const double t22 = t21 ? x : t20;
  return t22;
}
#endif
#ifndef KILN_CUDA_FN_kiln_acosh_f32
#define KILN_CUDA_FN_kiln_acosh_f32
KILN_DF float kiln_acosh_f32(float x) {
  const double t0 = (double)x;
  const double t1 = t0 - 0x1p+0;
  const double t2 = t1 + t1;
  const double t3 = fma(t1, t1, t2);
  const double t4 = sqrt(t3);
  const double t5 = t1 + t4;
  const double t6 = kiln_log1p_f64(t5);
  const bool t7 = t0 > 0x1p+28;
  const double t8 = fma(t0, t0, (-0x1p+0));
  const double t9 = sqrt(t8);
  const double t10 = t0 + t9;
  const double t11 = 0x1p+0 / t10;
  const double t12 = t0 + t0;
  const double t13 = t12 - t11;
  const double t14 = t7 ? t0 : t13;
  const double t15 = t7 ? 0x1.62e42fefa39efp-1 : 0x0p+0;
  const double t16 = kiln_log_f64(t14);
  const double t17 = t16 + t15;
  const bool t18 = t0 > 0x1p+1;
  const double t19 = t18 ? t17 : t6;
  const bool t20 = t0 < 0x1p+0;
  const double t21 = t20 ? __longlong_as_double(0x7ff8000000000000LL) : t19;
  const bool t22 = t0 != t0;
  const double t23 = t22 ? t0 : t21;
  const float t24 = (float)t23;
  return t24;
}
#endif
#ifndef KILN_CUDA_FN_kiln_atanh_f64
#define KILN_CUDA_FN_kiln_atanh_f64
KILN_DF double kiln_atanh_f64(double x) {
  const double t0 = fabs(x);
  const double t1 = t0 + t0;
  const double t2 = 0x1p+0 - t0;
  const double t3 = t1 * t0;
  const double t4 = t3 / t2;
  const double t5 = t1 + t4;
  const double t6 = t1 / t2;
  const bool t7 = t0 < 0x1p-1;
  const double t8 = t7 ? t5 : t6;
  const double t9 = kiln_log1p_f64(t8);
  const double t10 = 0x1p-1 * t9;
  const double t11 = copysign(t10, x);
  const bool t12 = x != x;
  const double t13 = t12 ? x : t11;
  return t13;
}
#endif
#ifndef KILN_CUDA_FN_kiln_atanh_f32
#define KILN_CUDA_FN_kiln_atanh_f32
KILN_DF float kiln_atanh_f32(float x) {
  const double t0 = (double)x;
  const double t1 = fabs(t0);
  const double t2 = t1 + t1;
  const double t3 = 0x1p+0 - t1;
  const double t4 = t2 * t1;
  const double t5 = t4 / t3;
  const double t6 = t2 + t5;
  const double t7 = t2 / t3;
  const bool t8 = t1 < 0x1p-1;
  const double t9 = t8 ? t6 : t7;
  const double t10 = kiln_log1p_f64(t9);
  const double t11 = 0x1p-1 * t10;
  const double t12 = copysign(t11, t0);
  const bool t13 = t0 != t0;
  const double t14 = t13 ? t0 : t12;
  const float t15 = (float)t14;
  return t15;
}
#endif
#ifndef KILN_CUDA_FN_kiln_tan_f64
#define KILN_CUDA_FN_kiln_tan_f64
KILN_DF double kiln_tan_f64(double x) {
  const double t0 = fabs(x);
  const bool t1 = t0 < __longlong_as_double(0x7ff0000000000000LL);
  const double t2 = t1 ? x : 0x0p+0;
  const double t3 = t2 * 0x1.45f306dc9c883p-1;
  const double t4 = rint(t3);
  const double t5 = -t4;
  const double t6 = fma(t5, 0x1.921fb544p+0, t2);
  const double t7 = -t4;
  const double t8 = fma(t7, 0x1.0b4611a6p-34, t6);
  const double t9 = -t4;
  const double t10 = fma(t9, 0x1.3198a2e037073p-69, t8);
  const double t11 = fmax(t10, (-0x1.921ff2e48e8a7p-1));
  const double t12 = fmin(t11, 0x1.921ff2e48e8a7p-1);
  const double t13 = t4 * 0x1p-2;
  const double t14 = floor(t13);
  const double t15 = 0x1p+2 * t14;
  const double t16 = t4 - t15;
  const int t17 = (int)t16;
  const double t18 = t12 * t12;
  const double t19 = fma((-0x1.2f49b46814157p-57), t18, 0x1.952c77030ad4ap-49);
  const double t20 = fma(t19, t18, (-0x1.ae7f3e733b81fp-41));
  const double t21 = fma(t20, t18, 0x1.6124613a86d09p-33);
  const double t22 = fma(t21, t18, (-0x1.ae64567f544e4p-26));
  const double t23 = fma(t22, t18, 0x1.71de3a556c734p-19);
  const double t24 = fma(t23, t18, (-0x1.a01a01a01a01ap-13));
  const double t25 = fma(t24, t18, 0x1.1111111111111p-7);
  const double t26 = fma(t25, t18, (-0x1.5555555555555p-3));
  const double t27 = fma(0x1.e542ba4020225p-62, t18, (-0x1.6827863b97d97p-53));
  const double t28 = fma(t27, t18, 0x1.ae7f3e733b81fp-45);
  const double t29 = fma(t28, t18, (-0x1.93974a8c07c9dp-37));
  const double t30 = fma(t29, t18, 0x1.1eed8eff8d898p-29);
  const double t31 = fma(t30, t18, (-0x1.27e4fb7789f5cp-22));
  const double t32 = fma(t31, t18, 0x1.a01a01a01a01ap-16);
  const double t33 = fma(t32, t18, (-0x1.6c16c16c16c17p-10));
  const double t34 = fma(t33, t18, 0x1.5555555555555p-5);
  const double t35 = fma(t34, t18, (-0x1p-1));
  const double t36 = fma(t18, t35, 0x1p+0);
  const double t37 = t26 - t35;
  const double t38 = t12 * t18;
  const double t39 = t38 * t37;
  const double t40 = t39 / t36;
  const double t41 = t12 + t40;
  const int t42 = t17 & 1;
  const bool t43 = t42 != 0;
  const double t44 = (-0x1p+0) / t41;
  const double t45 = t43 ? t44 : t41;
  const bool t46 = x == 0x0p+0;
  const double t47 = t46 ? x : t45;
  const double t48 = t1 ? t47 : __longlong_as_double(0x7ff8000000000000LL);
  return t48;
}
#endif
#ifndef KILN_CUDA_FN_kiln_tan_f32
#define KILN_CUDA_FN_kiln_tan_f32
KILN_DF float kiln_tan_f32(float x) {
  const double t0 = (double)x;
  const double t1 = fabs(t0);
  const bool t2 = t1 < __longlong_as_double(0x7ff0000000000000LL);
  const double t3 = t2 ? t0 : 0x0p+0;
  const double t4 = t3 * 0x1.45f306dc9c883p-1;
  const double t5 = rint(t4);
  const double t6 = -t5;
  const double t7 = fma(t6, 0x1.921fb544p+0, t3);
  const double t8 = -t5;
  const double t9 = fma(t8, 0x1.0b4611a6p-34, t7);
  const double t10 = -t5;
  const double t11 = fma(t10, 0x1.3198a2e037073p-69, t9);
  const double t12 = fmax(t11, (-0x1.921ff2e48e8a7p-1));
  const double t13 = fmin(t12, 0x1.921ff2e48e8a7p-1);
  const double t14 = t5 * 0x1p-2;
  const double t15 = floor(t14);
  const double t16 = 0x1p+2 * t15;
  const double t17 = t5 - t16;
  const int t18 = (int)t17;
  const double t19 = t13 * t13;
  const double t20 = fma((-0x1.2f49b46814157p-57), t19, 0x1.952c77030ad4ap-49);
  const double t21 = fma(t20, t19, (-0x1.ae7f3e733b81fp-41));
  const double t22 = fma(t21, t19, 0x1.6124613a86d09p-33);
  const double t23 = fma(t22, t19, (-0x1.ae64567f544e4p-26));
  const double t24 = fma(t23, t19, 0x1.71de3a556c734p-19);
  const double t25 = fma(t24, t19, (-0x1.a01a01a01a01ap-13));
  const double t26 = fma(t25, t19, 0x1.1111111111111p-7);
  const double t27 = fma(t26, t19, (-0x1.5555555555555p-3));
  const double t28 = fma(0x1.e542ba4020225p-62, t19, (-0x1.6827863b97d97p-53));
  const double t29 = fma(t28, t19, 0x1.ae7f3e733b81fp-45);
  const double t30 = fma(t29, t19, (-0x1.93974a8c07c9dp-37));
  const double t31 = fma(t30, t19, 0x1.1eed8eff8d898p-29);
  const double t32 = fma(t31, t19, (-0x1.27e4fb7789f5cp-22));
  const double t33 = fma(t32, t19, 0x1.a01a01a01a01ap-16);
  const double t34 = fma(t33, t19, (-0x1.6c16c16c16c17p-10));
  const double t35 = fma(t34, t19, 0x1.5555555555555p-5);
  const double t36 = fma(t35, t19, (-0x1p-1));
  const double t37 = fma(t19, t36, 0x1p+0);
  const double t38 = t27 - t36;
  const double t39 = t13 * t19;
  const double t40 = t39 * t38;
  const double t41 = t40 / t37;
  const double t42 = t13 + t41;
  const int t43 = t18 & 1;
  const bool t44 = t43 != 0;
  const double t45 = (-0x1p+0) / t42;
  const double t46 = t44 ? t45 : t42;
  const bool t47 = t0 == 0x0p+0;
  const double t48 = t47 ? t0 : t46;
  const double t49 = t2 ? t48 : __longlong_as_double(0x7ff8000000000000LL);
  const float t50 = (float)t49;
  return t50;
}
#endif
#ifndef KILN_CUDA_FN_kiln_log2_f64
#define KILN_CUDA_FN_kiln_log2_f64
KILN_DF double kiln_log2_f64(double x) {
  const bool t0 = x < 0x1p-1022;
  const double t1 = x * 0x1p+54;
  const double t2 = t0 ? t1 : x;
  const long long t3 = t0 ? (-54LL) : 0LL;
  const long long t4 = __double_as_longlong(t2);
  const long long t5 = (long long)((unsigned long long)t4 + (unsigned long long)(long long)0x95f6200000000ULL);
  const long long t6 = (long long)((unsigned long long)t5 >> 52);
  const long long t7 = (long long)((unsigned long long)t6 - (unsigned long long)1023LL);
  const long long t8 = (long long)((unsigned long long)t7 + (unsigned long long)t3);
  const long long t9 = t5 & (long long)0xfffffffffffffULL;
  const long long t10 = (long long)((unsigned long long)t9 + (unsigned long long)(long long)0x3fe6a09e00000000ULL);
  const double t11 = __longlong_as_double(t10);
  const double t12 = t11 - 0x1p+0;
  const double t13 = 0x1p+1 + t12;
  const double t14 = t12 / t13;
  const double t15 = t14 * t14;
  const double t16 = fma(0x1.642c8590b2164p-4, t15, 0x1.8618618618618p-4);
  const double t17 = fma(t16, t15, 0x1.af286bca1af28p-4);
  const double t18 = fma(t17, t15, 0x1.e1e1e1e1e1e1ep-4);
  const double t19 = fma(t18, t15, 0x1.1111111111111p-3);
  const double t20 = fma(t19, t15, 0x1.3b13b13b13b14p-3);
  const double t21 = fma(t20, t15, 0x1.745d1745d1746p-3);
  const double t22 = fma(t21, t15, 0x1.c71c71c71c71cp-3);
  const double t23 = fma(t22, t15, 0x1.2492492492492p-2);
  const double t24 = fma(t23, t15, 0x1.999999999999ap-2);
  const double t25 = fma(t24, t15, 0x1.5555555555555p-1);
  const double t26 = 0x1p-1 * t12;
  const double t27 = t26 * t12;
  const double t28 = (double)t8;
  const double t29 = fma(t15, t25, t27);
  const double t30 = t14 * t29;
  const double t31 = t27 - t30;
  const double t32 = t12 - t31;
  const double t33 = t12 - t32;
  const double t34 = t33 - t31;
  const double t35 = t32 * 0x1.71547652b82fep+0;
  const double t36 = -t35;
  const double t37 = fma(t32, 0x1.71547652b82fep+0, t36);
  const double t38 = fma(t32, 0x1.777d0ffda0d24p-56, t37);
  const double t39 = t28 * 0x1p+0;
  const double t40 = t39 + t35;
  const double t41 = t39 - t40;
  const double t42 = t41 + t35;
  const double t43 = fma(t28, 0x0p+0, t38);
  const double t44 = fma(t34, 0x1.71547652b82fep+0, t43);
  const double t45 = t42 + t44;
  const double t46 = t40 + t45;
  const bool t47 = x == 0x0p+0;
  const double t48 = t47 ? (-__longlong_as_double(0x7ff0000000000000LL)) : t46;
  const bool t49 = x < 0x0p+0;
  const double t50 = t49 ? __longlong_as_double(0x7ff8000000000000LL) : t48;
  const bool t51 = x == __longlong_as_double(0x7ff0000000000000LL);
  const double t52 = t51 ? __longlong_as_double(0x7ff0000000000000LL) : t50;
  const bool t53 = x != x;
  const double t54 = t53 ? x : t52;
  return t54;
}
#endif
#ifndef KILN_CUDA_FN_kiln_log2_f32
#define KILN_CUDA_FN_kiln_log2_f32
KILN_DF float kiln_log2_f32(float x) {
  const double t0 = (double)x;
  const bool t1 = t0 < 0x1p-1022;
  const double t2 = t0 * 0x1p+54;
  const double t3 = t1 ? t2 : t0;
  const long long t4 = t1 ? (-54LL) : 0LL;
  const long long t5 = __double_as_longlong(t3);
  const long long t6 = (long long)((unsigned long long)t5 + (unsigned long long)(long long)0x95f6200000000ULL);
  const long long t7 = (long long)((unsigned long long)t6 >> 52);
  const long long t8 = (long long)((unsigned long long)t7 - (unsigned long long)1023LL);
  const long long t9 = (long long)((unsigned long long)t8 + (unsigned long long)t4);
  const long long t10 = t6 & (long long)0xfffffffffffffULL;
  const long long t11 = (long long)((unsigned long long)t10 + (unsigned long long)(long long)0x3fe6a09e00000000ULL);
  const double t12 = __longlong_as_double(t11);
  const double t13 = t12 - 0x1p+0;
  const double t14 = 0x1p+1 + t13;
  const double t15 = t13 / t14;
  const double t16 = t15 * t15;
  const double t17 = fma(0x1.642c8590b2164p-4, t16, 0x1.8618618618618p-4);
  const double t18 = fma(t17, t16, 0x1.af286bca1af28p-4);
  const double t19 = fma(t18, t16, 0x1.e1e1e1e1e1e1ep-4);
  const double t20 = fma(t19, t16, 0x1.1111111111111p-3);
  const double t21 = fma(t20, t16, 0x1.3b13b13b13b14p-3);
  const double t22 = fma(t21, t16, 0x1.745d1745d1746p-3);
  const double t23 = fma(t22, t16, 0x1.c71c71c71c71cp-3);
  const double t24 = fma(t23, t16, 0x1.2492492492492p-2);
  const double t25 = fma(t24, t16, 0x1.999999999999ap-2);
  const double t26 = fma(t25, t16, 0x1.5555555555555p-1);
  const double t27 = 0x1p-1 * t13;
  const double t28 = t27 * t13;
  const double t29 = (double)t9;
  const double t30 = fma(t16, t26, t28);
  const double t31 = t15 * t30;
  const double t32 = t28 - t31;
  const double t33 = t13 - t32;
  const double t34 = t13 - t33;
  const double t35 = t34 - t32;
  const double t36 = t33 * 0x1.71547652b82fep+0;
  const double t37 = -t36;
  const double t38 = fma(t33, 0x1.71547652b82fep+0, t37);
  const double t39 = fma(t33, 0x1.777d0ffda0d24p-56, t38);
  const double t40 = t29 * 0x1p+0;
  const double t41 = t40 + t36;
  const double t42 = t40 - t41;
  const double t43 = t42 + t36;
  const double t44 = fma(t29, 0x0p+0, t39);
  const double t45 = fma(t35, 0x1.71547652b82fep+0, t44);
  const double t46 = t43 + t45;
  const double t47 = t41 + t46;
  const bool t48 = t0 == 0x0p+0;
  const double t49 = t48 ? (-__longlong_as_double(0x7ff0000000000000LL)) : t47;
  const bool t50 = t0 < 0x0p+0;
  const double t51 = t50 ? __longlong_as_double(0x7ff8000000000000LL) : t49;
  const bool t52 = t0 == __longlong_as_double(0x7ff0000000000000LL);
  const double t53 = t52 ? __longlong_as_double(0x7ff0000000000000LL) : t51;
  const bool t54 = t0 != t0;
  const double t55 = t54 ? t0 : t53;
  const float t56 = (float)t55;
  return t56;
}
#endif
#ifndef KILN_CUDA_FN_kiln_log10_f64
#define KILN_CUDA_FN_kiln_log10_f64
KILN_DF double kiln_log10_f64(double x) {
  const bool t0 = x < 0x1p-1022;
  const double t1 = x * 0x1p+54;
  const double t2 = t0 ? t1 : x;
  const long long t3 = t0 ? (-54LL) : 0LL;
  const long long t4 = __double_as_longlong(t2);
  const long long t5 = (long long)((unsigned long long)t4 + (unsigned long long)(long long)0x95f6200000000ULL);
  const long long t6 = (long long)((unsigned long long)t5 >> 52);
  const long long t7 = (long long)((unsigned long long)t6 - (unsigned long long)1023LL);
  const long long t8 = (long long)((unsigned long long)t7 + (unsigned long long)t3);
  const long long t9 = t5 & (long long)0xfffffffffffffULL;
  const long long t10 = (long long)((unsigned long long)t9 + (unsigned long long)(long long)0x3fe6a09e00000000ULL);
  const double t11 = __longlong_as_double(t10);
  const double t12 = t11 - 0x1p+0;
  const double t13 = 0x1p+1 + t12;
  const double t14 = t12 / t13;
  const double t15 = t14 * t14;
  const double t16 = fma(0x1.642c8590b2164p-4, t15, 0x1.8618618618618p-4);
  const double t17 = fma(t16, t15, 0x1.af286bca1af28p-4);
  const double t18 = fma(t17, t15, 0x1.e1e1e1e1e1e1ep-4);
  const double t19 = fma(t18, t15, 0x1.1111111111111p-3);
  const double t20 = fma(t19, t15, 0x1.3b13b13b13b14p-3);
  const double t21 = fma(t20, t15, 0x1.745d1745d1746p-3);
  const double t22 = fma(t21, t15, 0x1.c71c71c71c71cp-3);
  const double t23 = fma(t22, t15, 0x1.2492492492492p-2);
  const double t24 = fma(t23, t15, 0x1.999999999999ap-2);
  const double t25 = fma(t24, t15, 0x1.5555555555555p-1);
  const double t26 = 0x1p-1 * t12;
  const double t27 = t26 * t12;
  const double t28 = (double)t8;
  const double t29 = fma(t15, t25, t27);
  const double t30 = t14 * t29;
  const double t31 = t27 - t30;
  const double t32 = t12 - t31;
  const double t33 = t12 - t32;
  const double t34 = t33 - t31;
  const double t35 = t32 * 0x1.bcb7b1526e50ep-2;
  const double t36 = -t35;
  const double t37 = fma(t32, 0x1.bcb7b1526e50ep-2, t36);
  const double t38 = fma(t32, 0x1.95355baaafad3p-57, t37);
  const double t39 = t28 * 0x1.34413509f6p-2;
  const double t40 = t39 + t35;
  const double t41 = t39 - t40;
  const double t42 = t41 + t35;
  const double t43 = fma(t28, 0x1.9fef311f12b36p-42, t38);
  const double t44 = fma(t34, 0x1.bcb7b1526e50ep-2, t43);
  const double t45 = t42 + t44;
  const double t46 = t40 + t45;
  const bool t47 = x == 0x0p+0;
  const double t48 = t47 ? (-__longlong_as_double(0x7ff0000000000000LL)) : t46;
  const bool t49 = x < 0x0p+0;
  const double t50 = t49 ? __longlong_as_double(0x7ff8000000000000LL) : t48;
  const bool t51 = x == __longlong_as_double(0x7ff0000000000000LL);
  const double t52 = t51 ? __longlong_as_double(0x7ff0000000000000LL) : t50;
  const bool t53 = x != x;
  const double t54 = t53 ? x : t52;
  return t54;
}
#endif
#ifndef KILN_CUDA_FN_kiln_log10_f32
#define KILN_CUDA_FN_kiln_log10_f32
KILN_DF float kiln_log10_f32(float x) {
  const double t0 = (double)x;
  const bool t1 = t0 < 0x1p-1022;
  const double t2 = t0 * 0x1p+54;
  const double t3 = t1 ? t2 : t0;
  const long long t4 = t1 ? (-54LL) : 0LL;
  const long long t5 = __double_as_longlong(t3);
  const long long t6 = (long long)((unsigned long long)t5 + (unsigned long long)(long long)0x95f6200000000ULL);
  const long long t7 = (long long)((unsigned long long)t6 >> 52);
  const long long t8 = (long long)((unsigned long long)t7 - (unsigned long long)1023LL);
  const long long t9 = (long long)((unsigned long long)t8 + (unsigned long long)t4);
  const long long t10 = t6 & (long long)0xfffffffffffffULL;
  const long long t11 = (long long)((unsigned long long)t10 + (unsigned long long)(long long)0x3fe6a09e00000000ULL);
  const double t12 = __longlong_as_double(t11);
  const double t13 = t12 - 0x1p+0;
  const double t14 = 0x1p+1 + t13;
  const double t15 = t13 / t14;
  const double t16 = t15 * t15;
  const double t17 = fma(0x1.642c8590b2164p-4, t16, 0x1.8618618618618p-4);
  const double t18 = fma(t17, t16, 0x1.af286bca1af28p-4);
  const double t19 = fma(t18, t16, 0x1.e1e1e1e1e1e1ep-4);
  const double t20 = fma(t19, t16, 0x1.1111111111111p-3);
  const double t21 = fma(t20, t16, 0x1.3b13b13b13b14p-3);
  const double t22 = fma(t21, t16, 0x1.745d1745d1746p-3);
  const double t23 = fma(t22, t16, 0x1.c71c71c71c71cp-3);
  const double t24 = fma(t23, t16, 0x1.2492492492492p-2);
  const double t25 = fma(t24, t16, 0x1.999999999999ap-2);
  const double t26 = fma(t25, t16, 0x1.5555555555555p-1);
  const double t27 = 0x1p-1 * t13;
  const double t28 = t27 * t13;
  const double t29 = (double)t9;
  const double t30 = fma(t16, t26, t28);
  const double t31 = t15 * t30;
  const double t32 = t28 - t31;
  const double t33 = t13 - t32;
  const double t34 = t13 - t33;
  const double t35 = t34 - t32;
  const double t36 = t33 * 0x1.bcb7b1526e50ep-2;
  const double t37 = -t36;
  const double t38 = fma(t33, 0x1.bcb7b1526e50ep-2, t37);
  const double t39 = fma(t33, 0x1.95355baaafad3p-57, t38);
  const double t40 = t29 * 0x1.34413509f6p-2;
  const double t41 = t40 + t36;
  const double t42 = t40 - t41;
  const double t43 = t42 + t36;
  const double t44 = fma(t29, 0x1.9fef311f12b36p-42, t39);
  const double t45 = fma(t35, 0x1.bcb7b1526e50ep-2, t44);
  const double t46 = t43 + t45;
  const double t47 = t41 + t46;
  const bool t48 = t0 == 0x0p+0;
  const double t49 = t48 ? (-__longlong_as_double(0x7ff0000000000000LL)) : t47;
  const bool t50 = t0 < 0x0p+0;
  const double t51 = t50 ? __longlong_as_double(0x7ff8000000000000LL) : t49;
  const bool t52 = t0 == __longlong_as_double(0x7ff0000000000000LL);
  const double t53 = t52 ? __longlong_as_double(0x7ff0000000000000LL) : t51;
  const bool t54 = t0 != t0;
  const double t55 = t54 ? t0 : t53;
  const float t56 = (float)t55;
  return t56;
}
#endif
#ifndef KILN_CUDA_FN_kiln_exp2_f64
#define KILN_CUDA_FN_kiln_exp2_f64
KILN_DF double kiln_exp2_f64(double x) {
  const double t0 = fmax(x, (-0x1.0ep+10));
  const double t1 = fmin(t0, 0x1.018p+10);
  const double t2 = rint(t1);
  const double t3 = t1 - t2;
  const double t4 = t3 * 0x1.62e42fefa39efp-1;
  const double t5 = -t4;
  const double t6 = fma(t3, 0x1.62e42fefa39efp-1, t5);
  const double t7 = fma(t3, 0x1.abc9e3b39803fp-56, t6);
  const double t8 = fma(0x1.93974a8c07c9dp-37, t4, 0x1.6124613a86d09p-33);
  const double t9 = fma(t8, t4, 0x1.1eed8eff8d898p-29);
  const double t10 = fma(t9, t4, 0x1.ae64567f544e4p-26);
  const double t11 = fma(t10, t4, 0x1.27e4fb7789f5cp-22);
  const double t12 = fma(t11, t4, 0x1.71de3a556c734p-19);
  const double t13 = fma(t12, t4, 0x1.a01a01a01a01ap-16);
  const double t14 = fma(t13, t4, 0x1.a01a01a01a01ap-13);
  const double t15 = fma(t14, t4, 0x1.6c16c16c16c17p-10);
  const double t16 = fma(t15, t4, 0x1.1111111111111p-7);
  const double t17 = fma(t16, t4, 0x1.5555555555555p-5);
  const double t18 = fma(t17, t4, 0x1.5555555555555p-3);
  const double t19 = fma(t18, t4, 0x1p-1);
  const double t20 = t4 * t4;
  const double t21 = fma(t20, t19, t4);
  const double t22 = t21 + t7;
  const double t23 = 0x1p+0 + t22;
  const long long t24 = (long long)t2;
  const long long t25 = t24 >> 1;
  const long long t26 = (long long)((unsigned long long)t24 - (unsigned long long)t25);
  const long long t27 = (long long)((unsigned long long)t26 + (unsigned long long)1023LL);
  const long long t28 = (long long)((unsigned long long)t27 << 52);
  const double t29 = __longlong_as_double(t28);
  const long long t30 = (long long)((unsigned long long)t25 + (unsigned long long)1023LL);
  const long long t31 = (long long)((unsigned long long)t30 << 52);
  const double t32 = __longlong_as_double(t31);
  const double t33 = t23 * t32;
  const double t34 = t33 * t29;
  const bool t35 = x != x;
  const double t36 = t35 ? x : t34;
  return t36;
}
#endif
#ifndef KILN_CUDA_FN_kiln_exp2_f32
#define KILN_CUDA_FN_kiln_exp2_f32
KILN_DF float kiln_exp2_f32(float x) {
  const double t0 = (double)x;
  const double t1 = fmax(t0, (-0x1.0ep+10));
  const double t2 = fmin(t1, 0x1.018p+10);
  const double t3 = rint(t2);
  const double t4 = t2 - t3;
  const double t5 = t4 * 0x1.62e42fefa39efp-1;
  const double t6 = -t5;
  const double t7 = fma(t4, 0x1.62e42fefa39efp-1, t6);
  const double t8 = fma(t4, 0x1.abc9e3b39803fp-56, t7);
  const double t9 = fma(0x1.93974a8c07c9dp-37, t5, 0x1.6124613a86d09p-33);
  const double t10 = fma(t9, t5, 0x1.1eed8eff8d898p-29);
  const double t11 = fma(t10, t5, 0x1.ae64567f544e4p-26);
  const double t12 = fma(t11, t5, 0x1.27e4fb7789f5cp-22);
  const double t13 = fma(t12, t5, 0x1.71de3a556c734p-19);
  const double t14 = fma(t13, t5, 0x1.a01a01a01a01ap-16);
  const double t15 = fma(t14, t5, 0x1.a01a01a01a01ap-13);
  const double t16 = fma(t15, t5, 0x1.6c16c16c16c17p-10);
  const double t17 = fma(t16, t5, 0x1.1111111111111p-7);
  const double t18 = fma(t17, t5, 0x1.5555555555555p-5);
  const double t19 = fma(t18, t5, 0x1.5555555555555p-3);
  const double t20 = fma(t19, t5, 0x1p-1);
  const double t21 = t5 * t5;
  const double t22 = fma(t21, t20, t5);
  const double t23 = t22 + t8;
  const double t24 = 0x1p+0 + t23;
  const long long t25 = (long long)t3;
  const long long t26 = t25 >> 1;
  const long long t27 = (long long)((unsigned long long)t25 - (unsigned long long)t26);
  const long long t28 = (long long)((unsigned long long)t27 + (unsigned long long)1023LL);
  const long long t29 = (long long)((unsigned long long)t28 << 52);
  const double t30 = __longlong_as_double(t29);
  const long long t31 = (long long)((unsigned long long)t26 + (unsigned long long)1023LL);
  const long long t32 = (long long)((unsigned long long)t31 << 52);
  const double t33 = __longlong_as_double(t32);
  const double t34 = t24 * t33;
  const double t35 = t34 * t30;
  const bool t36 = t0 != t0;
  const double t37 = t36 ? t0 : t35;
  const float t38 = (float)t37;
  return t38;
}
#endif
#ifndef KILN_CUDA_FN_kiln_atan2_f64
#define KILN_CUDA_FN_kiln_atan2_f64
KILN_DF double kiln_atan2_f64(double a, double b) {
  const double t0 = fabs(a);
  const double t1 = fabs(b);
  const double t2 = t0 / t1;
  const bool t3 = t1 == __longlong_as_double(0x7ff0000000000000LL);
  const bool t4 = t0 == __longlong_as_double(0x7ff0000000000000LL);
  const bool t5 = t4 ? t3 : t4;
  const double t6 = t5 ? 0x1p+0 : t2;
  const bool t7 = t1 == 0x0p+0;
  const bool t8 = t0 == 0x0p+0;
  const bool t9 = t8 ? t7 : t8;
  const double t10 = t9 ? 0x0p+0 : t6;
  const bool t11 = t10 < 0x1.cp-2;
  const bool t12 = t10 < 0x1.6p-1;
  const bool t13 = t10 < 0x1.3p+0;
  const bool t14 = t10 < 0x1.38p+1;
  const double t15 = fma(t10, 0x1p+1, (-0x1p+0));
  const double t16 = t10 - 0x1p+0;
  const double t17 = t10 - 0x1.8p+0;
  const double t18 = 0x1p+1 + t10;
  const double t19 = t10 + 0x1p+0;
  const double t20 = fma(t10, 0x1.8p+0, 0x1p+0);
  const double t21 = t14 ? t17 : (-0x1p+0);
  const double t22 = t14 ? t20 : t10;
  const double t23 = t14 ? 0x1.f730bd281f69bp-1 : 0x1.921fb54442d18p+0;
  const double t24 = t14 ? 0x1.007887af0cbbdp-56 : 0x1.1a62633145c07p-54;
  const double t25 = t13 ? t16 : t21;
  const double t26 = t13 ? t19 : t22;
  const double t27 = t13 ? 0x1.921fb54442d18p-1 : t23;
  const double t28 = t13 ? 0x1.1a62633145c07p-55 : t24;
  const double t29 = t12 ? t15 : t25;
  const double t30 = t12 ? t18 : t26;
  const double t31 = t12 ? 0x1.dac670561bb4fp-2 : t27;
  const double t32 = t12 ? 0x1.a2b7f222f65e2p-56 : t28;
  const double t33 = t11 ? t10 : t29;
  const double t34 = t11 ? 0x1p+0 : t30;
  const double t35 = t11 ? 0x0p+0 : t31;
  const double t36 = t11 ? 0x0p+0 : t32;
  const double t37 = t33 / t34;
  const double t38 = t37 * t37;
  const double t39 = fma(0x1.0ad3ae322da11p-6, t38, (-0x1.2b4442c6a6c2fp-5));
  const double t40 = fma(t39, t38, 0x1.97b4b24760debp-5);
  const double t41 = fma(t40, t38, (-0x1.dde2d52defd9ap-5));
  const double t42 = fma(t41, t38, 0x1.10d66a0d03d51p-4);
  const double t43 = fma(t42, t38, (-0x1.3b0f2af749a6dp-4));
  const double t44 = fma(t43, t38, 0x1.745cdc54c206ep-4);
  const double t45 = fma(t44, t38, (-0x1.c71c6fe231671p-4));
  const double t46 = fma(t45, t38, 0x1.24924920083ffp-3);
  const double t47 = fma(t46, t38, (-0x1.999999998ebc4p-3));
  const double t48 = fma(t47, t38, 0x1.555555555550dp-2);
  const double t49 = t37 * t38;
  const double t50 = t49 * t48;
  const double t51 = t50 - t36;
  const double t52 = t51 - t37;
  const double t53 = t35 - t52;
  const double t54 = copysign(0x1p+0, b);
  const bool t55 = t54 < 0x0p+0;
  const double t56 = t53 - 0x1.1a62633145c07p-53;
  const double t57 = 0x1.921fb54442d18p+1 - t56;
  const double t58 = t55 ? t57 : t53;
  const double t59 = copysign(t58, a);
  const bool t60 = a != a;
  const double t61 = t60 ? a : t59;
  const bool t62 = b != b;
  const double t63 = t62 ? b : t61;
  return t63;
}
#endif
#ifndef KILN_CUDA_FN_kiln_atan2_f32
#define KILN_CUDA_FN_kiln_atan2_f32
KILN_DF float kiln_atan2_f32(float a, float b) {
  const double t0 = (double)b;
  const double t1 = (double)a;
  const double t2 = fabs(t1);
  const double t3 = fabs(t0);
  const double t4 = t2 / t3;
  const bool t5 = t3 == __longlong_as_double(0x7ff0000000000000LL);
  const bool t6 = t2 == __longlong_as_double(0x7ff0000000000000LL);
  const bool t7 = t6 ? t5 : t6;
  const double t8 = t7 ? 0x1p+0 : t4;
  const bool t9 = t3 == 0x0p+0;
  const bool t10 = t2 == 0x0p+0;
  const bool t11 = t10 ? t9 : t10;
  const double t12 = t11 ? 0x0p+0 : t8;
  const bool t13 = t12 < 0x1.cp-2;
  const bool t14 = t12 < 0x1.6p-1;
  const bool t15 = t12 < 0x1.3p+0;
  const bool t16 = t12 < 0x1.38p+1;
  const double t17 = fma(t12, 0x1p+1, (-0x1p+0));
  const double t18 = t12 - 0x1p+0;
  const double t19 = t12 - 0x1.8p+0;
  const double t20 = 0x1p+1 + t12;
  const double t21 = t12 + 0x1p+0;
  const double t22 = fma(t12, 0x1.8p+0, 0x1p+0);
  const double t23 = t16 ? t19 : (-0x1p+0);
  const double t24 = t16 ? t22 : t12;
  const double t25 = t16 ? 0x1.f730bd281f69bp-1 : 0x1.921fb54442d18p+0;
  const double t26 = t16 ? 0x1.007887af0cbbdp-56 : 0x1.1a62633145c07p-54;
  const double t27 = t15 ? t18 : t23;
  const double t28 = t15 ? t21 : t24;
  const double t29 = t15 ? 0x1.921fb54442d18p-1 : t25;
  const double t30 = t15 ? 0x1.1a62633145c07p-55 : t26;
  const double t31 = t14 ? t17 : t27;
  const double t32 = t14 ? t20 : t28;
  const double t33 = t14 ? 0x1.dac670561bb4fp-2 : t29;
  const double t34 = t14 ? 0x1.a2b7f222f65e2p-56 : t30;
  const double t35 = t13 ? t12 : t31;
  const double t36 = t13 ? 0x1p+0 : t32;
  const double t37 = t13 ? 0x0p+0 : t33;
  const double t38 = t13 ? 0x0p+0 : t34;
  const double t39 = t35 / t36;
  const double t40 = t39 * t39;
  const double t41 = fma(0x1.0ad3ae322da11p-6, t40, (-0x1.2b4442c6a6c2fp-5));
  const double t42 = fma(t41, t40, 0x1.97b4b24760debp-5);
  const double t43 = fma(t42, t40, (-0x1.dde2d52defd9ap-5));
  const double t44 = fma(t43, t40, 0x1.10d66a0d03d51p-4);
  const double t45 = fma(t44, t40, (-0x1.3b0f2af749a6dp-4));
  const double t46 = fma(t45, t40, 0x1.745cdc54c206ep-4);
  const double t47 = fma(t46, t40, (-0x1.c71c6fe231671p-4));
  const double t48 = fma(t47, t40, 0x1.24924920083ffp-3);
  const double t49 = fma(t48, t40, (-0x1.999999998ebc4p-3));
  const double t50 = fma(t49, t40, 0x1.555555555550dp-2);
  const double t51 = t39 * t40;
  const double t52 = t51 * t50;
  const double t53 = t52 - t38;
  const double t54 = t53 - t39;
  const double t55 = t37 - t54;
  const double t56 = copysign(0x1p+0, t0);
  const bool t57 = t56 < 0x0p+0;
  const double t58 = t55 - 0x1.1a62633145c07p-53;
  const double t59 = 0x1.921fb54442d18p+1 - t58;
  const double t60 = t57 ? t59 : t55;
  const double t61 = copysign(t60, t1);
  const bool t62 = t1 != t1;
  const double t63 = t62 ? t1 : t61;
  const bool t64 = t0 != t0;
  const double t65 = t64 ? t0 : t63;
  const float t66 = (float)t65;
  return t66;
}
#endif
#ifndef KILN_CUDA_FN_kiln_uniform_f32
#define KILN_CUDA_FN_kiln_uniform_f32
KILN_DF float kiln_uniform_f32(long long seed, long long c) {
  const long long t0 = (long long)((unsigned long long)c * (unsigned long long)(long long)0xd1b54a32d192ed03ULL);
  const long long t1 = (long long)((unsigned long long)seed * (unsigned long long)(long long)0x9e3779b97f4a7c15ULL);
  const long long t2 = (long long)((unsigned long long)t1 + (unsigned long long)t0);
  const long long t3 = (long long)((unsigned long long)t2 + (unsigned long long)(long long)0x632be59bd9b4e019ULL);
  const long long t4 = (long long)((unsigned long long)t3 >> 30);
  const long long t5 = t3 ^ t4;
  const long long t6 = (long long)((unsigned long long)t5 * (unsigned long long)(long long)0xbf58476d1ce4e5b9ULL);
  const long long t7 = (long long)((unsigned long long)t6 >> 27);
  const long long t8 = t6 ^ t7;
  const long long t9 = (long long)((unsigned long long)t8 * (unsigned long long)(long long)0x94d049bb133111ebULL);
  const long long t10 = (long long)((unsigned long long)t9 >> 31);
  const long long t11 = t9 ^ t10;
  const long long t12 = (long long)((unsigned long long)t11 >> 40);
  const float t13 = (float)(unsigned long long)t12;
  const float t14 = t13 * 0x1p-24f;
  return t14;
}
#endif
#ifndef KILN_CUDA_FN_kiln_randn_f32
#define KILN_CUDA_FN_kiln_randn_f32
KILN_DF float kiln_randn_f32(long long seed, long long c) {
  const long long t0 = (long long)((unsigned long long)c << 1);
  const long long t1 = (long long)((unsigned long long)t0 * (unsigned long long)(long long)0xd1b54a32d192ed03ULL);
  const long long t2 = (long long)((unsigned long long)seed * (unsigned long long)(long long)0x9e3779b97f4a7c15ULL);
  const long long t3 = (long long)((unsigned long long)t2 + (unsigned long long)t1);
  const long long t4 = (long long)((unsigned long long)t3 + (unsigned long long)(long long)0x632be59bd9b4e019ULL);
  const long long t5 = (long long)((unsigned long long)t4 >> 30);
  const long long t6 = t4 ^ t5;
  const long long t7 = (long long)((unsigned long long)t6 * (unsigned long long)(long long)0xbf58476d1ce4e5b9ULL);
  const long long t8 = (long long)((unsigned long long)t7 >> 27);
  const long long t9 = t7 ^ t8;
  const long long t10 = (long long)((unsigned long long)t9 * (unsigned long long)(long long)0x94d049bb133111ebULL);
  const long long t11 = (long long)((unsigned long long)t10 >> 31);
  const long long t12 = t10 ^ t11;
  const long long t13 = (long long)((unsigned long long)t12 >> 40);
  const float t14 = (float)(unsigned long long)t13;
  const float t15 = t14 * 0x1p-24f;
  const long long t16 = t0 | 1LL;
  const long long t17 = (long long)((unsigned long long)t16 * (unsigned long long)(long long)0xd1b54a32d192ed03ULL);
  const long long t18 = (long long)((unsigned long long)seed * (unsigned long long)(long long)0x9e3779b97f4a7c15ULL);
  const long long t19 = (long long)((unsigned long long)t18 + (unsigned long long)t17);
  const long long t20 = (long long)((unsigned long long)t19 + (unsigned long long)(long long)0x632be59bd9b4e019ULL);
  const long long t21 = (long long)((unsigned long long)t20 >> 30);
  const long long t22 = t20 ^ t21;
  const long long t23 = (long long)((unsigned long long)t22 * (unsigned long long)(long long)0xbf58476d1ce4e5b9ULL);
  const long long t24 = (long long)((unsigned long long)t23 >> 27);
  const long long t25 = t23 ^ t24;
  const long long t26 = (long long)((unsigned long long)t25 * (unsigned long long)(long long)0x94d049bb133111ebULL);
  const long long t27 = (long long)((unsigned long long)t26 >> 31);
  const long long t28 = t26 ^ t27;
  const long long t29 = (long long)((unsigned long long)t28 >> 40);
  const float t30 = (float)(unsigned long long)t29;
  const float t31 = t30 * 0x1p-24f;
  const float t32 = 0x1p+0f - t15;
  const float t33 = kiln_log_f32(t32);
  const float t34 = (-0x1p+1f) * t33;
  const float t35 = sqrtf(t34);
  const float t36 = 0x1.921fb6p+2f * t31;
  const float t37 = kiln_cos_f32(t36);
  const float t38 = t35 * t37;
  return t38;
}
#endif
#ifndef KILN_CUDA_FN_kiln_uniform_f64
#define KILN_CUDA_FN_kiln_uniform_f64
KILN_DF double kiln_uniform_f64(long long seed, long long c) {
  const long long t0 = (long long)((unsigned long long)c * (unsigned long long)(long long)0xd1b54a32d192ed03ULL);
  const long long t1 = (long long)((unsigned long long)seed * (unsigned long long)(long long)0x9e3779b97f4a7c15ULL);
  const long long t2 = (long long)((unsigned long long)t1 + (unsigned long long)t0);
  const long long t3 = (long long)((unsigned long long)t2 + (unsigned long long)(long long)0x632be59bd9b4e019ULL);
  const long long t4 = (long long)((unsigned long long)t3 >> 30);
  const long long t5 = t3 ^ t4;
  const long long t6 = (long long)((unsigned long long)t5 * (unsigned long long)(long long)0xbf58476d1ce4e5b9ULL);
  const long long t7 = (long long)((unsigned long long)t6 >> 27);
  const long long t8 = t6 ^ t7;
  const long long t9 = (long long)((unsigned long long)t8 * (unsigned long long)(long long)0x94d049bb133111ebULL);
  const long long t10 = (long long)((unsigned long long)t9 >> 31);
  const long long t11 = t9 ^ t10;
  const long long t12 = (long long)((unsigned long long)t11 >> 11);
  const double t13 = (double)(unsigned long long)t12;
  const double t14 = t13 * 0x1p-53;
  return t14;
}
#endif
#ifndef KILN_CUDA_FN_kiln_randn_f64
#define KILN_CUDA_FN_kiln_randn_f64
KILN_DF double kiln_randn_f64(long long seed, long long c) {
  const long long t0 = (long long)((unsigned long long)c << 1);
  const long long t1 = (long long)((unsigned long long)t0 * (unsigned long long)(long long)0xd1b54a32d192ed03ULL);
  const long long t2 = (long long)((unsigned long long)seed * (unsigned long long)(long long)0x9e3779b97f4a7c15ULL);
  const long long t3 = (long long)((unsigned long long)t2 + (unsigned long long)t1);
  const long long t4 = (long long)((unsigned long long)t3 + (unsigned long long)(long long)0x632be59bd9b4e019ULL);
  const long long t5 = (long long)((unsigned long long)t4 >> 30);
  const long long t6 = t4 ^ t5;
  const long long t7 = (long long)((unsigned long long)t6 * (unsigned long long)(long long)0xbf58476d1ce4e5b9ULL);
  const long long t8 = (long long)((unsigned long long)t7 >> 27);
  const long long t9 = t7 ^ t8;
  const long long t10 = (long long)((unsigned long long)t9 * (unsigned long long)(long long)0x94d049bb133111ebULL);
  const long long t11 = (long long)((unsigned long long)t10 >> 31);
  const long long t12 = t10 ^ t11;
  const long long t13 = (long long)((unsigned long long)t12 >> 11);
  const double t14 = (double)(unsigned long long)t13;
  const double t15 = t14 * 0x1p-53;
  const long long t16 = t0 | 1LL;
  const long long t17 = (long long)((unsigned long long)t16 * (unsigned long long)(long long)0xd1b54a32d192ed03ULL);
  const long long t18 = (long long)((unsigned long long)seed * (unsigned long long)(long long)0x9e3779b97f4a7c15ULL);
  const long long t19 = (long long)((unsigned long long)t18 + (unsigned long long)t17);
  const long long t20 = (long long)((unsigned long long)t19 + (unsigned long long)(long long)0x632be59bd9b4e019ULL);
  const long long t21 = (long long)((unsigned long long)t20 >> 30);
  const long long t22 = t20 ^ t21;
  const long long t23 = (long long)((unsigned long long)t22 * (unsigned long long)(long long)0xbf58476d1ce4e5b9ULL);
  const long long t24 = (long long)((unsigned long long)t23 >> 27);
  const long long t25 = t23 ^ t24;
  const long long t26 = (long long)((unsigned long long)t25 * (unsigned long long)(long long)0x94d049bb133111ebULL);
  const long long t27 = (long long)((unsigned long long)t26 >> 31);
  const long long t28 = t26 ^ t27;
  const long long t29 = (long long)((unsigned long long)t28 >> 11);
  const double t30 = (double)(unsigned long long)t29;
  const double t31 = t30 * 0x1p-53;
  const double t32 = 0x1p+0 - t15;
  const double t33 = kiln_log_f64(t32);
  const double t34 = (-0x1p+1) * t33;
  const double t35 = sqrt(t34);
  const double t36 = 0x1.921fb54442d18p+2 * t31;
  const double t37 = kiln_cos_f64(t36);
  const double t38 = t35 * t37;
  return t38;
}
#endif
// ---- end of kiln prelude ----
