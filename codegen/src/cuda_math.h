#pragma once
/// \file cuda_math.h
/// The CUDA C++ prelude that every emitted kernel starts with: the op semantics of
/// codegen/src/llvm_emitter.cpp (wrapping integers, saturating casts, NaN-propagating
/// maximum/minimum) and kiln's math functions and counter-based random numbers,
/// instantiated from codegen/src/math_body.h (as the LLVM emitter instantiates them).

#include <string>

namespace kiln::codegen {

/// The prelude text, guarded by `#ifndef KILN_CUDA_PRELUDE` so that several kernels
/// can share one translation unit (the CPU shim does that).
const std::string& cuda_prelude();

} // namespace kiln::codegen
