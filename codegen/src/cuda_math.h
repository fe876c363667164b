#pragma once
/// \file cuda_math.h
/// The CUDA C++ prelude that every emitted kernel starts with: the op semantics of
/// codegen/src/llvm_emitter.cpp (wrapping integers, saturating casts, NaN-propagating
/// maximum/minimum) and kiln's math functions and counter-based random numbers,
/// instantiated from codegen/src/math_body.h (as the LLVM emitter instantiates them).

#include <string>
#include <string_view>

namespace kiln::codegen {

/// The whole prelude: the fixed part, guarded by `#ifndef KILN_CUDA_PRELUDE`, then every math
/// function, each behind a guard of its own (so that several kernels, each with its own
/// selection, can share one translation unit, as the CPU shim does), then cuda_prelude_end_marker().
const std::string& cuda_prelude();

/// The prelude for a kernel whose other text is `code`: the fixed part and only the math
/// functions `code` calls (and those they call). NVRTC parses a few KB instead of ~48.
std::string cuda_prelude_for(std::string_view code);

/// The line that ends every prelude (golden tests cut the prelude out by it).
std::string_view cuda_prelude_end_marker();

} // namespace kiln::codegen
