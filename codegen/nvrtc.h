#pragma once
/// \file nvrtc.h
/// NVRTC (CUDA's run-time compiler), loaded with dlopen: kiln links no CUDA library
/// and needs no CUDA header at build time, so the same binary runs where the toolkit
/// is absent (nvrtc_available() then says why).
///
/// Library search order: $KILN_CUDA_HOME/{lib64,lib}, /usr/local/cuda/{lib64,lib},
/// then the default search path (libnvrtc.so.13, then libnvrtc.so.12). NVRTC loads
/// libnvrtc-builtins by name; where it is found next to libnvrtc it is preloaded by full
/// path with RTLD_GLOBAL so that no LD_LIBRARY_PATH is needed.

#include <string>

namespace kiln::codegen {

/// What nvrtc_compile produced.
struct CompileResult {
  std::string binary;   ///< CUBIN (arch "sm_XX") or PTX text (arch "compute_XX")
  bool is_ptx = false;  ///< binary is PTX
  std::string ptx;      ///< the PTX (for "sm_XX" too: the compute_XX PTX that NVRTC assembled)
  std::string log;      ///< the compiler's log (warnings; empty when none)
  double ms = 0;        ///< wall time of the compile
};

/// True when NVRTC could be loaded; otherwise false with the reason in *why.
bool nvrtc_available(std::string* why = nullptr);

/// NVRTC's version, e.g. "13.0" ("" when unavailable).
std::string nvrtc_version();

/// Compiles one CUDA C++ translation unit (`name` is its file name in messages) for
/// `arch`: "sm_90" gives CUBIN, "compute_90" gives PTX. Options: -std=c++17,
/// --fmad=false (no contraction: results round like the CPU's), -default-device is not
/// used (kernels say __global__/__device__). Throws kiln::Error when NVRTC is
/// unavailable or the compile fails; the message holds the log and the source.
CompileResult nvrtc_compile(const std::string& source, const std::string& name, const std::string& arch);

/// Path of the ptxas binary ($KILN_CUDA_HOME/bin or /usr/local/cuda/bin), "" if absent.
std::string ptxas_path();

/// Assembles PTX with `ptxas -arch=<arch>` (e.g. "sm_90") to validate it. Throws
/// kiln::Error with ptxas's output on failure or when ptxas is absent.
void ptxas_check(const std::string& ptx, const std::string& arch);

} // namespace kiln::codegen
