#pragma once
/// \file index_check.h
/// Index bounds checked inside kernels. A CheckIndex node (graph/ops.def) passes an
/// integer index through and names a *site*: the user-facing op, its valid range and the
/// user's line. Kernels that contain checks get an error buffer (kernel_ir.h,
/// BufferParam::error); the first failed check writes {site + 1, value} into it, and the
/// runtime turns that into a kiln::Error at the next synchronization (index_error()).

#include <cstdint>
#include <source_location>
#include <string>

namespace kiln::graph {

/// Where an index is checked: the op the user called and their line, and the bound.
struct IndexSite {
  std::string op;              ///< the user-facing op ("cross_entropy", "Embedding")
  std::string what;            ///< what the index is ("target", "index")
  int64_t bound = 0;           ///< valid values are [0, bound)
  std::source_location where;  ///< the user's line
  std::string range;           ///< what is out of range ("dim 1 of the input [3, 5]"); empty: "<bound> classes"
};

/// The id of a site (the same id for the same op, what, bound and line). Thread-safe.
int64_t index_site(const IndexSite& site);
/// The site of an id from index_site().
IndexSite index_site_of(int64_t id);
/// Elements of a kernel's error buffer: {site + 1 of the first failed check (0: none), value}.
constexpr int64_t kErrorBufferElements = 2;
/// Throws the kiln::Error of a filled error buffer (err[0] != 0); no-op when err[0] == 0.
void throw_index_error(const int64_t* err);

} // namespace kiln::graph
