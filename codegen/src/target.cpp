#include "codegen/target.h"

namespace kiln::codegen {

Target Target::cpu(int vector_bits, bool fma, int vector_registers, int threads) {
  Target t;
  t.kind = Kind::CPU;
  t.vector_bits = vector_bits;
  t.fma = fma;
  t.vector_registers = vector_registers;
  t.threads = threads;
  return t;
}

Target Target::cuda(int cc_major, int cc_minor, int sm_count, int max_threads_per_sm, int64_t shared_bytes_per_block) {
  Target t;
  t.kind = Kind::CUDA;
  t.cc_major = cc_major;
  t.cc_minor = cc_minor;
  t.sm_count = sm_count;
  t.max_threads_per_sm = max_threads_per_sm;
  t.shared_bytes_per_block = shared_bytes_per_block;
  return t;
}

std::string Target::str() const {
  if (kind == Kind::CPU)
    return "cpu v" + std::to_string(vector_bits) + (fma ? " fma" : "") + " r" + std::to_string(vector_registers) +
           (threads > 0 ? " t" + std::to_string(threads) : "");
  return "cuda sm_" + std::to_string(cc_major) + std::to_string(cc_minor) + " sms " + std::to_string(sm_count) +
         " tpsm " + std::to_string(max_threads_per_sm) + " smem " + std::to_string(shared_bytes_per_block);
}

} // namespace kiln::codegen
