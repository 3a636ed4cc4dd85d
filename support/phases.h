// Where a process's time went, phase by phase: parsing, the check, each compiler pass, code
// generation, writing artefacts, NVRTC. `mkc compile` reports the planning total in its summary
// and every phase (with the process's wall time and peak memory) under MKC_DUMP_PASSES, so a slow
// compile says which step to look at instead of only NVRTC's share.
#pragma once

#include <chrono>
#include <string>
#include <utility>
#include <vector>

namespace mkc {

class Phases {
 public:
  struct Phase {
    std::string name;
    double seconds = 0;
  };

  void add(std::string name, double seconds) { phases_.push_back({std::move(name), seconds}); }
  const std::vector<Phase>& all() const { return phases_; }
  // The sum over every phase whose name does not start with `except` ("" counts all of them).
  double total(const std::string& except = "") const {
    double s = 0;
    for (const Phase& p : phases_)
      if (except.empty() || p.name.rfind(except, 0) != 0) s += p.seconds;
    return s;
  }

 private:
  std::vector<Phase> phases_;
};

// Seconds since construction or the last lap().
class Stopwatch {
 public:
  double lap() {
    const auto now = std::chrono::steady_clock::now();
    const double s = std::chrono::duration<double>(now - start_).count();
    start_ = now;
    return s;
  }

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

// The process's peak resident memory in bytes (getrusage), 0 where unknown.
long long peak_resident_bytes();

}  // namespace mkc
