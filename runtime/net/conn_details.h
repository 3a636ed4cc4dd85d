// The connection details a transport's connect() exchanges: every rank publishes one blob through
// the all_gather (a fixed head, then one entry per peer), and reads every other rank's back. Both
// transports (runtime/net/tcp.cc, runtime/net/verbs_connect.cc) do it here, the same way: the
// blob built from the head and the entries, one blob per rank checked, each checked against this
// build's format (magic, version, rank, world, size), the peer lists checked for symmetry.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "runtime/net/transport.h"

namespace mkc::rt::net {

// What a transport's blob is: its name in messages ("tcp", "verbs"), and the head's magic and
// version (bumped when the wire format changes).
struct DetailsFormat {
  const char* transport;
  uint32_t magic;
  uint32_t version;
};

// One rank's details: its head, and its entries (one per peer it lists).
template <typename Head, typename Entry>
struct RankDetails {
  Head head{};
  std::vector<Entry> entries;
};

// Calls the all_gather with `mine`; throws InternalError unless it gave one blob per rank.
std::vector<std::string> gather_blobs(const ConnectParams& params, const std::string& mine,
                                      const char* transport);

// The TransportError for rank `rank`'s blob of `bytes` bytes that is not this build's `transport`
// transport's: it names the rank and says what every rank must share.
[[noreturn]] void throw_foreign_details(const char* transport, int rank, size_t bytes);

// Fills `head`'s magic, version, rank, world and npeers (Head has those members, npeers counts the
// entries that follow it), exchanges it and `entries` through params.all_gather, and returns every
// rank's details, in rank order, checked: a blob that is not `format`'s is a TransportError naming
// its rank, peer lists that disagree an EnvironmentError (check_symmetric). An Entry is a peer's
// rank (int) or has one (`rank`). Head and Entry are plain bytes: both ends are the same build and
// byte order (a magic read backwards says otherwise).
template <typename Head, typename Entry>
std::vector<RankDetails<Head, Entry>> exchange_details(const ConnectParams& params, Head head,
                                                       const std::vector<Entry>& entries,
                                                       const DetailsFormat& format) {
  static_assert(std::is_trivially_copyable_v<Head> && std::is_trivially_copyable_v<Entry>);
  head.magic = format.magic;
  head.version = format.version;
  head.rank = params.rank;
  head.world = params.world;
  head.npeers = static_cast<uint32_t>(entries.size());
  std::string mine(reinterpret_cast<const char*>(&head), sizeof(head));
  mine.append(reinterpret_cast<const char*>(entries.data()), entries.size() * sizeof(Entry));

  const std::vector<std::string> blobs = gather_blobs(params, mine, format.transport);
  std::vector<RankDetails<Head, Entry>> all(blobs.size());
  std::vector<std::vector<int>> lists(blobs.size());
  for (size_t r = 0; r < blobs.size(); ++r) {
    const std::string& b = blobs[r];
    Head& h = all[r].head;
    bool ok = b.size() >= sizeof(h);
    if (ok) std::memcpy(&h, b.data(), sizeof(h));
    ok = ok && h.magic == format.magic && h.version == format.version &&
         h.rank == static_cast<int>(r) && h.world == params.world &&
         h.npeers <= static_cast<uint32_t>(params.world) &&
         b.size() == sizeof(h) + h.npeers * sizeof(Entry);
    if (!ok) throw_foreign_details(format.transport, static_cast<int>(r), b.size());
    std::vector<Entry>& es = all[r].entries;
    es.resize(h.npeers);
    std::memcpy(es.data(), b.data() + sizeof(h), h.npeers * sizeof(Entry));
    for (const Entry& e : es) {
      if constexpr (std::is_integral_v<Entry>) {
        lists[r].push_back(static_cast<int>(e));
      } else {
        lists[r].push_back(e.rank);
      }
    }
  }
  check_symmetric(params.rank, lists);
  return all;
}

}  // namespace mkc::rt::net
