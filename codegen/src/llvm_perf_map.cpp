// The perf map plugin (see llvm_perf_map.h).
#include "codegen/src/llvm_perf_map.h"

#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <memory>
#include <mutex>

#include <llvm/ExecutionEngine/JITLink/JITLink.h>
#include <llvm/ExecutionEngine/Orc/ObjectLinkingLayer.h>

namespace kiln::codegen {

namespace {

class PerfMapPlugin final : public llvm::orc::ObjectLinkingLayer::Plugin {
public:
  explicit PerfMapPlugin(const std::atomic<bool>& on) : on_(on) {}

  ~PerfMapPlugin() override {
    if (file_) std::fclose(file_);
  }

  // After fixups the graph's symbols have their final addresses (and the code is in place).
  void modifyPassConfig(llvm::orc::MaterializationResponsibility&, llvm::jitlink::LinkGraph&,
                        llvm::jitlink::PassConfiguration& config) override {
    if (!on_.load(std::memory_order_relaxed)) return;
    config.PostFixupPasses.push_back([this](llvm::jitlink::LinkGraph& g) {
      write(g);
      return llvm::Error::success();
    });
  }

  llvm::Error notifyFailed(llvm::orc::MaterializationResponsibility&) override { return llvm::Error::success(); }
  llvm::Error notifyRemovingResources(llvm::orc::JITDylib&, llvm::orc::ResourceKey) override {
    return llvm::Error::success();
  }
  void notifyTransferringResources(llvm::orc::JITDylib&, llvm::orc::ResourceKey, llvm::orc::ResourceKey) override {}

private:
  const std::atomic<bool>& on_;
  std::mutex mu_;          // guards file_ (links run on several threads)
  std::FILE* file_ = nullptr;
  bool failed_ = false;    // the file could not be opened (said once)

  void write(llvm::jitlink::LinkGraph& g) {
    std::string lines;
    for (const llvm::jitlink::Symbol* s : g.defined_symbols()) {
      if (!s->isCallable() || !s->hasName() || s->getSize() == 0) continue;
      char head[48];
      std::snprintf(head, sizeof head, "%" PRIx64 " %" PRIx64 " ", s->getAddress().getValue(),
                    static_cast<uint64_t>(s->getSize()));
      lines += head + s->getName().str() + "\n";
    }
    if (lines.empty()) return;
    std::lock_guard lock(mu_);
    if (!file_ && !failed_) {
      // Truncated on this process's first write: a map left by an earlier process with the same
      // PID would name this process's addresses wrongly.
      file_ = std::fopen(perf_map_path().c_str(), "w");
      if (!file_) {
        failed_ = true;
        std::fprintf(stderr, "[kiln] KILN_PERF_MAP: cannot open %s; no perf map is written\n", perf_map_path().c_str());
      }
    }
    if (!file_) return;
    std::fputs(lines.c_str(), file_);
    std::fflush(file_); // perf may read it while the process runs, or after a crash
  }
};

} // namespace

bool install_perf_map(llvm::orc::ObjectLayer& layer, const std::atomic<bool>& on) {
  auto* linking = llvm::dyn_cast<llvm::orc::ObjectLinkingLayer>(&layer);
  if (linking) linking->addPlugin(std::make_shared<PerfMapPlugin>(on));
  return linking != nullptr;
}

std::string perf_map_path() { return "/tmp/perf-" + std::to_string(::getpid()) + ".map"; }

} // namespace kiln::codegen
