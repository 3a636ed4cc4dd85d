// An index of boxes on one (rank, buffer) by the flat element span each covers in its buffer:
// every entry whose span overlaps a query span is enumerated in O((k + 1) log n) (a sorted array
// with a segment tree of the spans' maximum end). Boxes whose spans overlap may still be disjoint
// (two columns of tiles in one row band); callers check Box::overlaps on what comes back.
// Used by the dependency pass and the plan verifier: indexing by one dimension is quadratic when
// that dimension has few values (a ring's two slots).
#pragma once

#include <algorithm>
#include <climits>
#include <cstdint>
#include <utility>
#include <vector>

#include "compiler/plan/plan.h"

namespace mkc::plan {

// The flat element range [first, last + 1) a box (inside its buffer) spans.
inline std::pair<int64_t, int64_t> flat_span(const Buffer& buf, const Box& b) {
  int64_t first = 0, last = 0, stride = 1;
  for (size_t d = buf.shape.size(); d-- > 0;) {
    first += b.lo[d] * stride;
    last += (b.hi[d] - 1) * stride;
    stride *= buf.shape[d];
  }
  return {first, last + 1};
}

template <typename Payload>
class SpanIndex {
 public:
  struct Entry {
    int64_t first, end;  // [first, end)
    Payload value;
  };
  void add(int64_t first, int64_t end, Payload v) { entries_.push_back(Entry{first, end, v}); }
  // Call once after the last add, before any query.
  void finish() {
    std::stable_sort(entries_.begin(), entries_.end(),
                     [](const Entry& a, const Entry& b) { return a.first < b.first; });
    size_ = 1;
    while (size_ < entries_.size()) size_ *= 2;
    max_end_.assign(2 * size_, INT64_MIN);
    for (size_t i = 0; i < entries_.size(); ++i) max_end_[size_ + i] = entries_[i].end;
    for (size_t i = size_; i-- > 1;) max_end_[i] = std::max(max_end_[2 * i], max_end_[2 * i + 1]);
  }
  // Calls fn(entry) for every entry whose span overlaps [first, end).
  template <typename F>
  void overlapping(int64_t first, int64_t end, F&& fn) const {
    const size_t n = static_cast<size_t>(
        std::lower_bound(entries_.begin(), entries_.end(), end,
                         [](const Entry& e, int64_t v) { return e.first < v; }) -
        entries_.begin());
    if (n > 0) visit(1, 0, size_, n, first, fn);
  }
  const std::vector<Entry>& entries() const { return entries_; }

 private:
  template <typename F>
  void visit(size_t node, size_t lo, size_t hi, size_t n, int64_t first, F& fn) const {
    if (lo >= n || max_end_[node] <= first) return;
    if (hi - lo == 1) {
      fn(entries_[lo]);
      return;
    }
    const size_t mid = (lo + hi) / 2;
    visit(2 * node, lo, mid, n, first, fn);
    visit(2 * node + 1, mid, hi, n, first, fn);
  }
  std::vector<Entry> entries_;
  std::vector<int64_t> max_end_;
  size_t size_ = 1;
};

// The same over a fixed set of spans, each alive or not: queries see only the live ones, and
// entries are switched on and off in O(log n). All spans are added (dead) before finish(). Entries
// added `marked` can also be queried alone, for those inside a span (contained_marked), in time
// that grows with the marked ones found: the dependency pass looks for peers' writes that one of
// a task's accesses covers, and an all-to-all's peers' writes each span a whole buffer, which an
// overlap query returned to every chunk's reader of it (R^2 x chunks visits at 64 ranks).
template <typename Payload>
class LiveSpanIndex {
 public:
  struct Entry {
    int64_t first, end;
    Payload value;
    bool alive = false;
    bool marked = false;
  };
  // Returns the entry's handle, valid after finish().
  size_t add(int64_t first, int64_t end, Payload v, bool marked = false) {
    entries_.push_back(Entry{first, end, v, false, marked});
    return entries_.size() - 1;
  }
  void finish() {
    order_.resize(entries_.size());
    for (size_t i = 0; i < order_.size(); ++i) order_[i] = i;
    std::stable_sort(order_.begin(), order_.end(),
                     [&](size_t a, size_t b) { return entries_[a].first < entries_[b].first; });
    slot_.resize(entries_.size());
    for (size_t i = 0; i < order_.size(); ++i) slot_[order_[i]] = i;
    size_ = 1;
    while (size_ < entries_.size()) size_ *= 2;
    max_end_.assign(2 * size_, INT64_MIN);
    min_end_marked_.assign(2 * size_, INT64_MAX);
  }
  void set_alive(size_t handle, bool alive) {
    Entry& e = entries_[handle];
    if (e.alive == alive) return;
    e.alive = alive;
    update(max_end_, size_ + slot_[handle], alive ? e.end : INT64_MIN);
    if (e.marked) set_min(size_ + slot_[handle], alive ? e.end : INT64_MAX);
  }
  bool alive(size_t handle) const { return entries_[handle].alive; }
  const Entry& entry(size_t handle) const { return entries_[handle]; }
  // Calls fn(handle) for every live entry whose span overlaps [first, end).
  template <typename F>
  void overlapping(int64_t first, int64_t end, F&& fn) const {
    query(max_end_, first, end, fn);
  }
  // Calls fn(handle) for every live entry added marked whose span lies inside [first, end).
  template <typename F>
  void contained_marked(int64_t first, int64_t end, F&& fn) const {
    auto starts_before = [&](size_t h, int64_t v) { return entries_[h].first < v; };
    const size_t a = static_cast<size_t>(
        std::lower_bound(order_.begin(), order_.end(), first, starts_before) - order_.begin());
    const size_t b = static_cast<size_t>(
        std::lower_bound(order_.begin(), order_.end(), end, starts_before) - order_.begin());
    if (a < b) visit_contained(1, 0, size_, a, b, end, fn);
  }

 private:
  // fn(handle) for the entries that start before `end` and that `tree` says end after `first`.
  template <typename F>
  void query(const std::vector<int64_t>& tree, int64_t first, int64_t end, F& fn) const {
    const size_t n = static_cast<size_t>(
        std::lower_bound(order_.begin(), order_.end(), end,
                         [&](size_t h, int64_t v) { return entries_[h].first < v; }) -
        order_.begin());
    if (n > 0) visit(tree, 1, 0, size_, n, first, fn);
  }
  static void update(std::vector<int64_t>& tree, size_t i, int64_t end) {
    tree[i] = end;
    for (i /= 2; i >= 1; i /= 2) tree[i] = std::max(tree[2 * i], tree[2 * i + 1]);
  }
  void set_min(size_t i, int64_t end) {
    min_end_marked_[i] = end;
    for (i /= 2; i >= 1; i /= 2)
      min_end_marked_[i] = std::min(min_end_marked_[2 * i], min_end_marked_[2 * i + 1]);
  }
  // fn(handle) for the entries at places [a, b) of order_ that min_end_marked_ says end by `end`.
  template <typename F>
  void visit_contained(size_t node, size_t lo, size_t hi, size_t a, size_t b, int64_t end,
                       F& fn) const {
    if (hi <= a || lo >= b || min_end_marked_[node] > end) return;
    if (hi - lo == 1) {
      fn(order_[lo]);
      return;
    }
    const size_t mid = (lo + hi) / 2;
    visit_contained(2 * node, lo, mid, a, b, end, fn);
    visit_contained(2 * node + 1, mid, hi, a, b, end, fn);
  }
  template <typename F>
  void visit(const std::vector<int64_t>& tree, size_t node, size_t lo, size_t hi, size_t n,
             int64_t first, F& fn) const {
    if (lo >= n || tree[node] <= first) return;
    if (hi - lo == 1) {
      fn(order_[lo]);
      return;
    }
    const size_t mid = (lo + hi) / 2;
    visit(tree, 2 * node, lo, mid, n, first, fn);
    visit(tree, 2 * node + 1, mid, hi, n, first, fn);
  }
  std::vector<Entry> entries_;
  std::vector<size_t> order_;            // entries by first
  std::vector<size_t> slot_;             // entry -> its place in order_
  std::vector<int64_t> max_end_;         // over the live entries
  std::vector<int64_t> min_end_marked_;  // over the live marked entries
  size_t size_ = 1;
};

}  // namespace mkc::plan
