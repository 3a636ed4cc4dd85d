// A header handed to NVRTC from memory: `#include "name"` in the source finds `source`. The
// embedded templates (embedded.h) are a list of them; it lives here, beside them, so that
// templates/ names it without depending on the JIT that consumes it (jit/nvrtc.h).
#pragma once

#include <string>

namespace mkc::jit {

struct InMemoryHeader {
  std::string name;
  std::string source;
};

}  // namespace mkc::jit
