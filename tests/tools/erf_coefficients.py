#!/usr/bin/env python3
"""Prints the coefficients of kiln's erf (codegen/src/math_body.h: kErfSmall, kErfMid,
kErfcScaled for f64, kErfF32 for f32) from mpmath at 50 digits, as the doubles nearest to them.

  |x| < 0.75       erf(x)/x - 1 = sum_n c_n x^(2n): the Taylor series (2/sqrt(pi)) (-1)^n / (n! (2n+1)), less 1 at n = 0
  0.75 <= |x| < 2  erf(a + s) = hi + lo + sum_{n>=1} d_n s^n about the centre a of each of five intervals of width 1/4
  2 <= |x| <= 6    e^(x^2) erfc(x) = sum_n g_n t^n, t = (|x| - 4)/2: mpmath.chebyfit on [-1, 1]
  f32, |x| <= 3.93 erf(x)/x = sum_n p_n t^n, t = 2 x^2 / 3.93^2 - 1: mpmath.chebyfit on [-1, 1], 22 terms

Run: python3 tests/tools/erf_coefficients.py (needs python3-mpmath).
"""
import mpmath as mp

mp.mp.dps = 50


def doubles(values):
    return ", ".join(repr(float(v)) for v in values)


two_over_sqrt_pi = 2 / mp.sqrt(mp.pi)
small = [two_over_sqrt_pi - 1] + [two_over_sqrt_pi * (-1) ** n / (mp.factorial(n) * (2 * n + 1)) for n in range(1, 17)]
print("kErfSmall:", doubles(small))

for k in range(5):
    a = mp.mpf("0.875") + mp.mpf("0.25") * k
    taylor = mp.taylor(mp.erf, a, 15)
    hi = float(taylor[0])
    print("kErfMid[%d]: centre %r, hi %r, lo %r," % (k, float(a), hi, float(taylor[0] - hi)), doubles(taylor[1:]))

scaled, error = mp.chebyfit(lambda t: mp.exp((4 + 2 * t) ** 2) * mp.erfc(4 + 2 * t), [-1, 1], 24, error=True)
print("kErfcScaled (max error %s):" % mp.nstr(error, 3), doubles(reversed(scaled)))

edge = mp.mpf("3.93")


def erf_over_x(t):
    z = (t + 1) * edge * edge / 2
    return two_over_sqrt_pi if z == 0 else mp.erf(mp.sqrt(z)) / mp.sqrt(z)


f32, error = mp.chebyfit(erf_over_x, [-1, 1], 22, error=True)
print("kErfF32 (max relative error %s):" % mp.nstr(error / erf_over_x(1), 3), doubles(reversed(f32)))
