// NVRTC target architectures ("sm_90a", "sm_80", ...) and which tiles a kernel built for one runs.
// The generated source is the same for every target; the templates pick their tiles at compile
// time (MKC_HAS_WGMMA, __CUDA_ARCH__), so what depends on the target is only what the host says
// and gives: the tiles' names in the compile summary and the dynamic shared memory a launch asks
// for (codegen::Generated::dynamic_smem for wgmma, portable_smem otherwise).
#pragma once

#include <string_view>

namespace mkc {

enum class TileTarget {
  kWgmma,    // sm_90a: TMA + wgmma tiles
  kMmaSync,  // sm_80 and later without wgmma (also Hopper built for plain sm_90): mma.sync tiles
  kSimt,     // before sm_80, or an arch this does not read: the SIMT tiles
};

// "sm_90a" -> kWgmma; "sm_80", "sm_86", "sm_90", "sm_100" -> kMmaSync; "sm_75" -> kSimt.
inline TileTarget tile_target(std::string_view arch) {
  if (arch == "sm_90a") return TileTarget::kWgmma;
  if (arch.substr(0, 3) != "sm_") return TileTarget::kSimt;
  int number = 0;
  size_t i = 3;
  for (; i < arch.size() && arch[i] >= '0' && arch[i] <= '9' && number < 100000; ++i)
    number = number * 10 + (arch[i] - '0');
  return i > 3 && number >= 80 ? TileTarget::kMmaSync : TileTarget::kSimt;
}

inline bool arch_has_wgmma(std::string_view arch) {
  return tile_target(arch) == TileTarget::kWgmma;
}

}  // namespace mkc
