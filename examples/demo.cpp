// kiln's first demo: build a small graph lazily, print its text IR, show the
// LLVM IR of one generated kernel (KILN_DEBUG=4) and print the results.
#include <cstdio>
#include <iostream>

#include "kiln/kiln.h"

using namespace kiln;

int demo() {
  Tensor x = arange(0, 12, 1, kFloat32).reshape({3, 4});
  Tensor w = randn({4, 2}, /*seed=*/7);
  Tensor y = relu(matmul(x, w) + 0.5);     // recorded, not computed
  Tensor s = sigmoid(y * 2.0 - 1.0).sum({1});

  std::cout << "== graph (text IR)\n" << graph_text({s}) << "\n";

  const int saved = options().debug;
  options().debug = std::max(saved, 4); // show the kernel IR and LLVM IR as kernels compile
  std::cout << "== kernels compiled while realizing x * 2 + 1 (KILN_DEBUG=4 output on stderr)\n" << std::flush;
  Tensor small = x * 2.0 + 1.0;
  small.realize();
  options().debug = saved;

  std::cout << "\n== results\nx * 2 + 1 = " << small << "\ny = " << y << "\ns = " << s << "\n";
  return 0;
}

int main() {
  try {
    return demo();
  } catch (const std::exception& e) { // kiln::Error and any other failure: one line and a non-zero exit
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
