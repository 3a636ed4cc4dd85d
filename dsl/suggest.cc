#include "dsl/suggest.h"

#include <algorithm>

namespace mkc::dsl {

size_t edit_distance(std::string_view a, std::string_view b, size_t cap) {
  if (a.size() > b.size() + cap || b.size() > a.size() + cap) return cap + 1;
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return std::min(prev[b.size()], cap + 1);
}

std::string closest(std::string_view word, const std::vector<std::string>& candidates) {
  const size_t limit = std::max<size_t>(1, word.size() / 3);
  std::string best;
  size_t best_d = limit + 1;
  for (const std::string& c : candidates) {
    size_t d = edit_distance(word, c, limit);
    // Case-only differences count as one edit at most.
    if (d > 1 && word.size() == c.size()) {
      bool same_ignoring_case = true;
      for (size_t i = 0; i < c.size(); ++i) {
        if (std::tolower(static_cast<unsigned char>(word[i])) !=
            std::tolower(static_cast<unsigned char>(c[i])))
          same_ignoring_case = false;
      }
      if (same_ignoring_case) d = 1;
    }
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  return best;
}

std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates) {
  const std::string c = closest(word, candidates);
  return c.empty() ? std::string() : " did you mean `" + c + "`?";
}

}  // namespace mkc::dsl
