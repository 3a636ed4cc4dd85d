#include "runtime/net/verbs_wire.h"

#include <arpa/inet.h>

namespace mkc::rt::net::verbs {

std::string gid_text(const uint8_t* raw) {
  char buf[INET6_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET6, raw, buf, sizeof(buf));
  return buf;
}

}  // namespace mkc::rt::net::verbs
