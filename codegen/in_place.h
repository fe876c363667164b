#pragma once
/// \file in_place.h
/// Whether a kernel may compute one of its outputs into the memory of one of its inputs: the
/// runtime then writes an updated parameter or optimizer slot over its old value (a storage the
/// caller gives up, runtime::execute's donations) instead of into new memory, which halves the
/// memory an update streams through and keeps the state's footprint at one copy.

#include <cstdint>
#include <vector>

#include "codegen/kernel_ir.h"

namespace kiln::codegen {

/// True when output buffer `out` of `k` may share its memory with input buffer `in` at launch
/// parameters `params`. That holds when each element of `in` is read only by the point that
/// overwrites it, and before it does:
///   - `out` has exactly one store, whose offset is an affine function of the domain and map vars
///     that is one-to-one over the domain and map (no two points write one element);
///   - every load of `in` feeds the value of that store (other stores may share such a load, which
///     the emitters compute once a point; no offset and no reduction reads `in`), at the same
///     offset: equal as affine functions at `params`.
/// The stored value depends on the loads, so an emitter keeps them before the store whatever its
/// buffers' noalias promises. Scan and attention kernels are never in place.
bool may_write_in_place(const Kernel& k, int in, int out, const std::vector<int64_t>& params);

} // namespace kiln::codegen
