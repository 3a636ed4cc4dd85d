#include "runtime/net/errors.h"

#include <fmt/format.h>

#include <cstring>

namespace mkc::rt::net {

std::string errno_text(int e) {
  // strerrorname_np and strerrordesc_np (glibc 2.32) are thread-safe, unlike strerror, and the
  // proxy thread reports errors while other threads may do the same.
  const char* name = strerrorname_np(e);
  const char* text = strerrordesc_np(e);
  if (name == nullptr) return fmt::format("errno {}", e);
  return fmt::format("{} ({})", text != nullptr ? text : "no description", name);
}

}  // namespace mkc::rt::net
