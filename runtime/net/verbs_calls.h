// Checked verbs calls: a failed call is a TransportError naming the call, the decoded errno, where
// (rank, peer, device) and the source line. Used by the verbs transport's files only.
#pragma once

#include <cerrno>
#include <string>

#include "runtime/net/errors.h"

namespace mkc::rt::net::verbs {

// Verbs calls return 0 or an errno value (some return -1 and set errno); pointer-returning calls
// return null and set errno.
[[noreturn]] void throw_call(const char* call, int err, int peer, const std::string& where,
                             const char* file, int line);

#define MKC_IBV(api, name, peer, where, ...)                                          \
  do {                                                                                \
    errno = 0;                                                                        \
    const int mkc_ibv_rc_ = (api).name(__VA_ARGS__);                                  \
    if (mkc_ibv_rc_ != 0) {                                                           \
      const int mkc_ibv_err_ = mkc_ibv_rc_ > 0 ? mkc_ibv_rc_ : (errno ? errno : EIO); \
      throw_call("ibv_" #name, mkc_ibv_err_, (peer), (where), __FILE__, __LINE__);    \
    }                                                                                 \
  } while (0)

template <typename T>
T* checked(T* p, const char* call, int peer, const std::string& where, const char* file, int line) {
  if (p == nullptr) throw_call(call, errno ? errno : EIO, peer, where, file, line);
  return p;
}
#define MKC_IBV_PTR(api, name, peer, where, ...) \
  (errno = 0, checked((api).name(__VA_ARGS__), "ibv_" #name, (peer), (where), __FILE__, __LINE__))

}  // namespace mkc::rt::net::verbs
