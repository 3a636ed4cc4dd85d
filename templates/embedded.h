// The device templates of templates/mkc/, embedded at build time (tools/embed.cc), as NVRTC
// in-memory headers named "mkc/<file>.cuh".
#pragma once

#include <vector>

#include "templates/in_memory_header.h"

namespace mkc::jit {

std::vector<InMemoryHeader> embedded_templates();

}  // namespace mkc::jit
