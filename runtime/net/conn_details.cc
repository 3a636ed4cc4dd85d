#include "runtime/net/conn_details.h"

#include <fmt/format.h>

namespace mkc::rt::net {

std::vector<std::string> gather_blobs(const ConnectParams& params, const std::string& mine,
                                      const char* transport) {
  std::vector<std::string> blobs = params.all_gather(mine);
  if (static_cast<int>(blobs.size()) != params.world) {
    throw InternalError(fmt::format("{}: all_gather gave {} blobs for a world of {}", transport,
                                    blobs.size(), params.world));
  }
  return blobs;
}

void throw_foreign_details(const char* transport, int rank, size_t bytes) {
  throw TransportError(
      rank, fmt::format("{}: rank {}'s connection details from the all_gather are not those of "
                        "this mkc build's {} transport ({} bytes): every rank must run the same "
                        "mkc, with the same MKC_NET",
                        transport, rank, transport, bytes));
}

}  // namespace mkc::rt::net
