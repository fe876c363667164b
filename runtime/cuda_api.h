#pragma once
/// \file cuda_api.h
/// The CUDA driver API entry points kiln's GPU runtime calls, resolved with dlsym from
/// the driver library the probe found usable (runtime/cuda_driver.h). The signatures
/// are the driver API's documented C ones; CUresult and CUdevice are ints, handles are
/// opaque pointers and device addresses 64-bit integers, so no CUDA header is needed.

#include <dlfcn.h>

#include <cstddef>
#include <string>

namespace kiln::runtime {

using CUresult = int;                      ///< 0 is CUDA_SUCCESS
using CUdevice = int;                      ///< a device ordinal
using CUdeviceptr = unsigned long long;    ///< a device address
using CUcontext = struct CUctx_st*;        ///< a context
using CUmodule = struct CUmod_st*;         ///< a loaded module (CUBIN, PTX)
using CUfunction = struct CUfunc_st*;      ///< a kernel in a module
using CUstream = struct CUstream_st*;      ///< a stream
using CUevent = struct CUevent_st*;        ///< an event

/// Resolves `name` in library `h` into `f`; appends " name" to `missing` when absent.
template <class F> bool bind_symbol(void* h, F& f, const char* name, std::string& missing) {
  f = reinterpret_cast<F>(dlsym(h, name));
  if (!f) missing += std::string(" ") + name;
  return f != nullptr;
}

/// The driver functions of the GPU runtime (a superset of the probe's).
struct CudaApi {
  CUresult (*GetErrorName)(CUresult, const char**) = nullptr;
  CUresult (*DevicePrimaryCtxRetain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*CtxSetCurrent)(CUcontext) = nullptr;
  CUresult (*MemAlloc)(CUdeviceptr*, size_t) = nullptr;
  CUresult (*MemFree)(CUdeviceptr) = nullptr;
  CUresult (*MemcpyHtoDAsync)(CUdeviceptr, const void*, size_t, CUstream) = nullptr;
  CUresult (*MemcpyDtoH)(void*, CUdeviceptr, size_t) = nullptr;
  CUresult (*MemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream) = nullptr;
  CUresult (*StreamCreate)(CUstream*, unsigned) = nullptr;
  CUresult (*StreamSynchronize)(CUstream) = nullptr;
  CUresult (*EventCreate)(CUevent*, unsigned) = nullptr;
  CUresult (*EventRecord)(CUevent, CUstream) = nullptr;
  CUresult (*EventSynchronize)(CUevent) = nullptr;
  CUresult (*EventQuery)(CUevent) = nullptr;
  CUresult (*EventElapsedTime)(float*, CUevent, CUevent) = nullptr;
  CUresult (*EventDestroy)(CUevent) = nullptr;
  CUresult (*ModuleLoadData)(CUmodule*, const void*) = nullptr;
  CUresult (*ModuleGetFunction)(CUfunction*, CUmodule, const char*) = nullptr;
  CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                           void**, void**) = nullptr;
};

/// Binds every CudaApi entry point from the loaded library `h`; returns the names of
/// those missing ("" when all were found).
std::string bind_cuda_api(void* h, CudaApi& api);

/// "CUDA_ERROR_OUT_OF_MEMORY (2)": the name from the driver's cuGetErrorName, or from
/// kiln's list of the errors a probe meets where the driver gives none (the stub's).
std::string cuda_error_text(CUresult (*get_error_name)(CUresult, const char**), CUresult r);

} // namespace kiln::runtime
