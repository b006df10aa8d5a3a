// What the CPU engine allocates, for the memory model (plan/memory.cpp): oneDNN picks layouts per
// CPU and shape (blocks of 16 channels on AVX-512, 8 on AVX2; a first conv's own layout; padded
// linear weights) and the scratchpads its kernels want, so the model asks it instead of copying
// its rules. Free of oneDNN's headers.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/memory.h"
#include "nn/graph.h"

namespace dlperf::cpu {

/// Whether oneDNN runs bf16 kernels here: the CPU has AVX512-BF16 (or AMX), and
/// ONEDNN_MAX_CPU_ISA, which caps the instructions oneDNN uses, leaves them on.
bool has_bf16_kernels();
/// Whether oneDNN may run bf16 kernels on AMX tiles here: the CPU has AMX-BF16 (Xeons from
/// Sapphire Rapids on), the kernel lets the process use it, and ONEDNN_MAX_CPU_ISA leaves it on.
bool has_amx_kernels();

/// Every buffer dlperf's CPU engine allocates to train `g` in `precision` (fp32 or bf16), as
/// Network's constructor (network.cpp) and the ops' make them: found from oneDNN's descriptors
/// alone (no memory, no JIT code), so a batch that would not fit can be planned.
struct EngineBuffers {
  struct Buffer {
    MemCategory category;
    double bytes;
    int node;  ///< the graph node it serves, or -1: the network's own (the model input)
  };
  /// Each parameter tensor in its layout (category parameters); its gradient and optimizer
  /// states take as much.
  std::vector<Buffer> params;
  std::vector<Buffer> buffers;  ///< every other buffer
  double scratchpad = 0;        ///< the one scratchpad all primitives share: the largest any asks for
};
EngineBuffers engine_buffers(const nn::Graph& g, const std::string& precision);

}  // namespace dlperf::cpu
