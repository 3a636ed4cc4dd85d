// plan::LiveSpanIndex against a brute-force scan: random spans switched on and off, every query
// returns exactly the live entries whose span overlaps the query's (overlapping), or the live
// marked ones whose span lies inside it (contained_marked), each once.
#include "compiler/plan/box_index.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <vector>

namespace mkc::plan {
namespace {

TEST_CASE("LiveSpanIndex: overlapping and contained_marked are a scan's answers") {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 20; ++round) {
    const int n = 1 + static_cast<int>(rng() % 300);
    LiveSpanIndex<int> idx;
    struct Span {
      int64_t first, end;
      bool marked, alive = false;
    };
    std::vector<Span> spans;
    for (int i = 0; i < n; ++i) {
      const int64_t first = static_cast<int64_t>(rng() % 1000);
      const int64_t end = first + 1 + static_cast<int64_t>(rng() % 100);
      const bool marked = rng() % 3 == 0;
      spans.push_back({first, end, marked});
      CHECK(idx.add(first, end, i, marked) == static_cast<size_t>(i));
    }
    idx.finish();
    for (int step = 0; step < 200; ++step) {
      const size_t h = rng() % spans.size();
      spans[h].alive = rng() % 2 == 0;
      idx.set_alive(h, spans[h].alive);
      const int64_t first = static_cast<int64_t>(rng() % 1100);
      const int64_t end = first + 1 + static_cast<int64_t>(rng() % 200);
      for (const bool only_marked : {false, true}) {
        std::vector<size_t> want, got;
        for (size_t i = 0; i < spans.size(); ++i) {
          const bool hit = only_marked
                               ? spans[i].marked && spans[i].first >= first && spans[i].end <= end
                               : spans[i].first < end && spans[i].end > first;
          if (spans[i].alive && hit) want.push_back(i);
        }
        auto take = [&](size_t x) {
          CHECK(idx.entry(x).value == static_cast<int>(x));
          got.push_back(x);
        };
        if (only_marked) {
          idx.contained_marked(first, end, take);
        } else {
          idx.overlapping(first, end, take);
        }
        std::sort(got.begin(), got.end());
        REQUIRE(got == want);
      }
    }
  }
}

}  // namespace
}  // namespace mkc::plan
