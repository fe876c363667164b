#pragma once
/// \file cuda_abi.h
/// The CUDA driver API's types and the result codes the emulator (cuda_emu.cpp) returns,
/// with the real driver's ABI, for the emulator and its tests; no CUDA header is needed.
/// The handle types are opaque pointers; the emulator defines the structs.

struct CUctx_st;
struct CUmod_st;
struct CUfunc_st;
struct CUstream_st;
struct CUevent_st;

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = CUctx_st*;
using CUmodule = CUmod_st*;
using CUfunction = CUfunc_st*;
using CUstream = CUstream_st*;
using CUevent = CUevent_st*;

namespace kiln_cuda_emu {

/// CUresult values (cuda.h's CUDA_ERROR_*).
enum : CUresult {
  kSuccess = 0,
  kInvalidValue = 1,
  kOutOfMemory = 2,
  kNotInitialized = 3,
  kInvalidDevice = 101,
  kInvalidImage = 200,
  kInvalidContext = 201,
  kInvalidSource = 300,
  kInvalidHandle = 400,
  kNotFound = 500,
  kNotReady = 600,
  kIllegalAddress = 700,
  kLaunchFailed = 719,
};

/// Set in every device address the emulator hands out (a non-canonical x86-64 address).
constexpr CUdeviceptr kDeviceTag = 1ull << 62;

} // namespace kiln_cuda_emu
