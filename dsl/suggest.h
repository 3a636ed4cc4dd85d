// "did you mean `K`?": the closest candidate by edit distance, when it is close enough.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace mkc::dsl {

// Levenshtein distance, capped: returns at most `cap + 1`.
size_t edit_distance(std::string_view a, std::string_view b, size_t cap = 8);

// The candidate nearest to `word` within a distance of about a third of its length (at least 1),
// or "" when none is that close.
std::string closest(std::string_view word, const std::vector<std::string>& candidates);

// " did you mean `x`?" or "".
std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace mkc::dsl
