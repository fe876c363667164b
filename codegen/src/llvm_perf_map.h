#pragma once
// Linux perf's map of JIT code: with it on, every function the JIT links (kernels of both tiers,
// GEMM support routines, objects from the disk cache) gets a line "START SIZE NAME" (hex address
// and size) in /tmp/perf-PID.map, the file `perf report` reads to name code that no ELF file on
// disk holds. So `KILN_PERF_MAP=1 perf record -e cpu-clock ./program; perf report` shows time
// per kernel by its name. The file is perf's convention; nothing deletes it.

#include <atomic>
#include <string>

namespace llvm::orc {
class ObjectLayer;
}

namespace kiln::codegen {

/// Adds the plugin writing the map to `layer` when it is a JITLink ObjectLinkingLayer (LLJIT's
/// layer on x86-64 Linux; false, and nothing added, for another layer); it writes while `on` is
/// true, and `on` must outlive the layer. The map is truncated at this process's first write.
bool install_perf_map(llvm::orc::ObjectLayer& layer, const std::atomic<bool>& on);

/// This process's map file, /tmp/perf-PID.map.
std::string perf_map_path();

} // namespace kiln::codegen
