// A rank of a test job (tests/runtime/bootstrap_test.cc runs it under mkrun): detects its world
// from the environment, all-gathers "rank R" with every rank, and prints what it saw, or fails
// on purpose (--fail-rank R exits 3 on that rank; --hang-rank R sleeps forever there).
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>

#include "runtime/bootstrap.h"

int main(int argc, char** argv) {
  int fail_rank = -1, hang_rank = -1;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--fail-rank") == 0) fail_rank = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--hang-rank") == 0) hang_rank = std::atoi(argv[i + 1]);
  }
  try {
    const mkc::rt::World w = mkc::rt::detect_world();
    if (w.rank == fail_rank) return 3;
    if (w.rank == hang_rank) {
      while (true) pause();
    }
    mkc::rt::Rendezvous rv(w, std::chrono::seconds(20));
    const auto all = rv.all_gather(fmt::format("rank {}", w.rank));
    std::string seen;
    for (const std::string& s : all) seen += (seen.empty() ? "" : ",") + s;
    rv.barrier();
    fmt::print("probe {} of {} ({}): {}\n", w.rank, w.size, w.source, seen);
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "probe: {}\n", e.what());
    return 2;
  }
}
