// kiln's f32 erf on every float in [0, 4.5) (erf is odd, and 1 beyond) against std::erf in double,
// in f32 ulps; exits 1 above 0.5005 ulp. Not a ctest (a billion points, ~20 s): run it after
// changing erf (codegen/src/math_body.h), from the repository root after a build:
//   I="-I frontend/include -I runtime/include -I graph/include -I autograd/include -I codegen/include"
//   g++ -std=c++20 -O2 $I -I build/include -I build/frontend/include -I . tests/tools/erf_exhaustive.cpp
//       -o /tmp/erf_exhaustive -L build -lkiln -Wl,-rpath,$PWD/build && /tmp/erf_exhaustive
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>
#include "kiln/kiln.h"
int main() {
  using namespace kiln;
  const uint32_t end = 0x40900000u; // 4.5f
  const uint32_t chunk = 1u << 24;
  double worst = 0; float worst_x = 0; uint64_t not_rounded = 0, total = 0;
  std::vector<float> xs(chunk);
  for (uint32_t lo = 0; lo < end; lo += chunk) {
    const uint32_t n = std::min(chunk, end - lo);
    xs.resize(n);
    for (uint32_t i = 0; i < n; ++i) { uint32_t b = lo + i; std::memcpy(&xs[i], &b, 4); }
    const std::vector<float> ys = erf(from_vector(xs, {static_cast<int64_t>(n)})).to_vector<float>();
    for (uint32_t i = 0; i < n; ++i) {
      const double ref = std::erf(static_cast<double>(xs[i]));
      const float rf = static_cast<float>(ref);
      const double e = std::fabs(ys[i] - ref) / (ref == 0 ? 1 : std::max(std::ldexp(1.0, std::ilogb(std::fabs(ref)) - 23), std::ldexp(1.0, -149)));
      if (e > worst) { worst = e; worst_x = xs[i]; }
      if (ys[i] != rf) ++not_rounded;
      ++total;
    }
  }
  std::printf("floats %llu, max %.6f ulp at x = %.9g, %llu not equal to the rounded double\n",
              (unsigned long long)total, worst, worst_x, (unsigned long long)not_rounded);
  return worst <= 0.5005 ? 0 : 1;
}
