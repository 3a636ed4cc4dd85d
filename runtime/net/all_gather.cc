#include "runtime/net/all_gather.h"

#include <fmt/format.h>

namespace mkc::rt::net {

LocalAllGather::LocalAllGather(int ranks, std::chrono::milliseconds timeout)
    : ranks_(ranks),
      timeout_(timeout),
      calls_(static_cast<size_t>(ranks), 0),
      blobs_(static_cast<size_t>(ranks)),
      present_(static_cast<size_t>(ranks), false) {
  if (ranks < 1) throw InternalError(fmt::format("LocalAllGather of {} ranks", ranks));
}

AllGatherFn LocalAllGather::for_rank(int rank) {
  return [this, rank](const std::string& mine) { return gather(rank, mine); };
}

std::vector<std::string> LocalAllGather::gather(int rank, const std::string& mine) {
  if (rank < 0 || rank >= ranks_) {
    throw InternalError(fmt::format("LocalAllGather: rank {} of {}", rank, ranks_));
  }
  std::unique_lock lock(mutex_);
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  const long round = calls_[static_cast<size_t>(rank)]++;
  const auto missing = [&] {
    std::string who;
    for (int r = 0; r < ranks_; ++r) {
      if (!present_[static_cast<size_t>(r)]) who += fmt::format("{}{}", who.empty() ? "" : ", ", r);
    }
    return EnvironmentError(fmt::format(
        "all_gather: rank {} waited {:.1f} s in round {} for rank(s) {} of {} (they failed or "
        "are stuck)",
        rank, timeout_.count() / 1e3, round, who, ranks_));
  };
  // A rank that is a round ahead waits for the others to take the previous round's result.
  if (!changed_.wait_until(lock, deadline, [&] { return collecting_ == round; })) throw missing();
  blobs_[static_cast<size_t>(rank)] = mine;
  present_[static_cast<size_t>(rank)] = true;
  if (++arrived_ == ranks_) {
    result_.swap(blobs_);
    blobs_.assign(static_cast<size_t>(ranks_), std::string());
    present_.assign(static_cast<size_t>(ranks_), false);
    arrived_ = 0;
    leaving_ = ranks_;
    complete_ = round + 1;
    changed_.notify_all();
  }
  if (!changed_.wait_until(lock, deadline, [&] { return complete_ > round; })) throw missing();
  std::vector<std::string> all = result_;
  if (--leaving_ == 0) {
    collecting_ = round + 1;
    changed_.notify_all();
  }
  return all;
}

}  // namespace mkc::rt::net
