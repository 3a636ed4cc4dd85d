// LocalAllGather: the all_gather of ranks that are threads of one process (tests, the benchmark,
// and a job whose ranks share one process), in memory. Same contract as Rendezvous::all_gather:
// every rank's blob in rank order, on every rank; calls are rounds, each rank's k-th call meets
// the others' k-th; a rank that does not come within the timeout is named in the error.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/net/transport.h"

namespace mkc::rt::net {

class LocalAllGather {
 public:
  LocalAllGather(int ranks, std::chrono::milliseconds timeout);

  // Rank `rank`'s side, as a transport takes it. The LocalAllGather must outlive it.
  AllGatherFn for_rank(int rank);

  // Throws EnvironmentError naming the ranks that did not come within the timeout.
  std::vector<std::string> gather(int rank, const std::string& mine);

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  int ranks_;
  std::chrono::milliseconds timeout_;
  std::vector<long> calls_;  // per rank: calls made so far
  long collecting_ = 0;      // the round whose blobs are being collected
  long complete_ = 0;        // rounds whose result is ready
  int arrived_ = 0;
  int leaving_ = 0;  // ranks still to take the last complete round's result
  std::vector<std::string> blobs_;
  std::vector<bool> present_;
  std::vector<std::string> result_;
};

}  // namespace mkc::rt::net
