#include "runtime/net/transport.h"

#include <fmt/format.h>

#include <algorithm>

namespace mkc::rt::net {

void check_peer_list(const ConnectParams& p) {
  if (p.world < 1 || p.rank < 0 || p.rank >= p.world) {
    throw UserError(fmt::format("transport: rank {} of a world of {}", p.rank, p.world));
  }
  std::vector<int> sorted = p.peers;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) {
    const int q = sorted[i];
    if (q < 0 || q >= p.world || q == p.rank || (i > 0 && sorted[i - 1] == q)) {
      throw UserError(fmt::format(
          "transport: rank {}'s peer list names rank {}: peers must be distinct ranks of the "
          "world of {} other than itself",
          p.rank, q, p.world));
    }
  }
  if (!p.all_gather) throw UserError("transport: connect() needs an all_gather");
}

void check_connect(const ConnectParams& p, bool connected, const char* transport) {
  if (connected) throw InternalError(fmt::format("{}: connect() called twice", transport));
  check_peer_list(p);
}

void check_symmetric(int rank, const std::vector<std::vector<int>>& lists) {
  const auto lists_rank = [&](int who, int whom) {
    const std::vector<int>& l = lists[static_cast<size_t>(who)];
    return std::find(l.begin(), l.end(), whom) != l.end();
  };
  for (int q = 0; q < static_cast<int>(lists.size()); ++q) {
    if (q == rank) continue;
    const bool mine = lists_rank(rank, q), theirs = lists_rank(q, rank);
    if (mine != theirs) {
      throw EnvironmentError(fmt::format(
          "transport: rank {} {} rank {} as a peer but rank {} {}: every rank must be given the "
          "same node layout",
          rank, mine ? "lists" : "does not list", q, q, theirs ? "lists it" : "does not"));
    }
  }
}

}  // namespace mkc::rt::net
