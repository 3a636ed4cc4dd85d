#include "compiler/oracle/verifier.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <unordered_map>

#include "compiler/kinds/kind.h"
#include "compiler/plan/box_index.h"

namespace mkc::plan {
namespace {

// A task's name in findings: its label, rank and, where known, its operation's .mks place.
std::string where(const Plan& p, int t, const dsl::SourceFile* file) {
  const Task& task = p.tasks[t];
  std::string s = fmt::format("`{}` on rank {}", task.label, task.rank);
  if (file && p.source && task.op >= 0 && task.op < static_cast<int>(p.source->ops.size()) &&
      p.source->ops[task.op].decl) {
    const dsl::LineCol lc = file->line_col(p.source->ops[task.op].decl->span.begin);
    s += fmt::format(" ({}:{}:{})", file->path(), lc.line, lc.col);
  }
  return s;
}

std::string box_text(const Plan& p, const Box& b) {
  std::string dims;
  for (size_t d = 0; d < b.lo.size(); ++d)
    dims += fmt::format("{}{}:{}", d ? ", " : "", b.lo[d], d < b.hi.size() ? b.hi[d] : -1);
  const std::string name = b.buffer >= 0 && b.buffer < static_cast<int>(p.buffers.size())
                               ? p.buffers[b.buffer].name
                               : fmt::format("#{}", b.buffer);
  return fmt::format("`{}`[{}] on rank {}", name, dims, b.rank);
}

int64_t elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// An access of a task to a box, as the ordering check indexes it.
struct Access {
  int task;
  const Box* box;
  bool write;
};

class Verifier {
 public:
  Verifier(const Plan& p, Stage stage, const VerifyOptions& o) : p_(p), stage_(stage), o_(o) {}

  Report run() {
    structure();
    if (stage_ != Stage::kLowered && room()) events();
    if (stage_ != Stage::kLowered && report_.ok()) event_cycles();
    if (stage_ == Stage::kScheduled && report_.ok()) ctas();
    if (stage_ == Stage::kScheduled && report_.ok()) ordering();
    return std::move(report_);
  }

 private:
  bool full() const { return static_cast<int>(report_.findings.size()) >= o_.max_findings; }
  bool room() const { return !full(); }

  void add(std::string kind, std::string msg, int task = -1, int other = -1) {
    if (full()) return;
    report_.findings.push_back(Finding{std::move(kind), std::move(msg), task, other});
  }

  std::string name(int t) const { return where(p_, t, o_.file); }

  // ---- after lowering --------------------------------------------------------------------------

  void structure() {
    const int nb = static_cast<int>(p_.buffers.size());
    for (size_t ti = 0; ti < p_.tasks.size() && room(); ++ti) {
      const int t = static_cast<int>(ti);
      const Task& task = p_.tasks[t];
      if (task.rank < 0 || task.rank >= p_.ranks) {
        add("view",
            fmt::format("task {} runs on rank {}, outside [0, {})", name(t), task.rank, p_.ranks),
            t);
        continue;
      }
      for (const View& v : task.views) {
        if (v.rank < 0 || v.rank >= p_.ranks || v.buffer < 0 || v.buffer >= nb) {
          add("view",
              fmt::format("task {} has a view of buffer #{} on rank {}: no such place", name(t),
                          v.buffer, v.rank),
              t);
          continue;
        }
        const Buffer& b = p_.buffers[v.buffer];
        bool dims_ok = v.shape.size() <= static_cast<size_t>(abi::kMaxDims);
        for (int64_t d : v.shape) dims_ok = dims_ok && d >= 1;
        if (!dims_ok || v.offset < 0 || v.offset + elements(v.shape) > b.elements()) {
          add("view",
              fmt::format("task {} views `{}` on rank {} at offset {} as [{}]: outside the "
                          "buffer's {} elements",
                          name(t), b.name, v.rank, v.offset, fmt::join(v.shape, ", "),
                          b.elements()),
              t);
        }
      }
      const size_t want = kinds::kind_of(task).fixed_args();
      if (want > 0 && task.args.size() != want) {
        add("args",
            fmt::format("task {} ({}) has {} arguments; its kind takes {} (templates/mkc/abi.h)",
                        name(t), task_kind_name(task.kind), task.args.size(), want),
            t);
        continue;
      }
      // What the device touches first: a declared box in the wrong place is the symptom, the
      // access nothing orders is the race.
      check_accesses(t);
      for (const std::vector<Box>* boxes : {&task.reads, &task.writes}) {
        for (const Box& b : *boxes) check_box(t, b, boxes == &task.writes);
      }
    }
  }

  void check_box(int t, const Box& b, bool write) {
    const Task& task = p_.tasks[t];
    const char* what = write ? "writes" : "reads";
    if (b.rank < 0 || b.rank >= p_.ranks || b.buffer < 0 ||
        b.buffer >= static_cast<int>(p_.buffers.size())) {
      add("box",
          fmt::format("task {} {} a box of buffer #{} on rank {}: no such place", name(t), what,
                      b.buffer, b.rank),
          t);
      return;
    }
    const Buffer& buf = p_.buffers[b.buffer];
    if (b.lo.size() != buf.shape.size() || b.hi.size() != buf.shape.size()) {
      add("box",
          fmt::format("task {} {} {}: {} dimensions, the buffer has {}", name(t), what,
                      box_text(p_, b), b.lo.size(), buf.shape.size()),
          t);
      return;
    }
    for (size_t d = 0; d < buf.shape.size(); ++d) {
      if (b.lo[d] < 0 || b.hi[d] > buf.shape[d] || b.lo[d] >= b.hi[d]) {
        add("box",
            fmt::format("task {} {} {}: dimension {} is {} in a buffer of shape [{}]", name(t),
                        what, box_text(p_, b), d,
                        b.lo[d] >= b.hi[d] ? "empty" : "outside the buffer",
                        fmt::join(buf.shape, ", ")),
            t);
        return;
      }
    }
    // Inside one of the task's views of that place (what the device addresses).
    const auto [first, end] = flat_span(buf, b);
    for (const View& v : task.views) {
      if (v.rank == b.rank && v.buffer == b.buffer && v.offset <= first &&
          end <= v.offset + elements(v.shape))
        return;
    }
    add("box",
        fmt::format("task {} {} {}, which none of its views of `{}` on rank {} covers", name(t),
                    what, box_text(p_, b), buf.name, b.rank),
        t);
  }

  // A box of view v's coordinates as a box of its buffer, or false when the view's dims do not
  // map onto the buffer's (the view is a tail of the buffer's shape, possibly with its first dim
  // standing for several flattened buffer dims, which a touch then covers one index of).
  bool to_buffer(const View& v, std::vector<int64_t> lo, std::vector<int64_t> hi, Box* out) const {
    const Buffer& b = p_.buffers[v.buffer];
    while (lo.size() < v.shape.size()) {
      lo.push_back(0);
      hi.push_back(v.shape[lo.size() - 1]);
    }
    if (v.shape.empty() || v.shape.size() > b.shape.size()) return false;
    // The buffer dims the view's dims after the first are: a tail, matched exactly.
    const size_t k = v.shape.size() - 1, n = b.shape.size();
    if (!std::equal(v.shape.begin() + 1, v.shape.end(), b.shape.begin() + (n - k))) return false;
    const int64_t inner = elements(std::vector<int64_t>(v.shape.begin() + 1, v.shape.end()));
    if (v.offset % inner != 0) return false;
    // The first view dim runs over the buffer's leading dims [0, n - k), flattened.
    const int64_t r0 = v.offset / inner + lo[0], r1 = v.offset / inner + hi[0];
    const std::vector<int64_t> lead(b.shape.begin(), b.shape.begin() + (n - k));
    std::vector<int64_t> a(lead.size()), z(lead.size());
    int64_t x = r0, y = r1 - 1;
    for (size_t d = lead.size(); d-- > 0;) {
      a[d] = x % lead[d];
      x /= lead[d];
      z[d] = y % lead[d];
      y /= lead[d];
    }
    // [r0, r1) is a box of the leading dims when, past the first dim that differs, the range
    // covers the dims whole.
    size_t first_diff = lead.size();
    for (size_t d = 0; d < lead.size(); ++d) {
      if (a[d] != z[d]) {
        first_diff = d;
        break;
      }
    }
    for (size_t d = first_diff + 1; d < lead.size(); ++d) {
      if (a[d] != 0 || z[d] != lead[d] - 1) return false;
    }
    out->rank = v.rank;
    out->buffer = v.buffer;
    out->lo.assign(a.begin(), a.end());
    out->hi.resize(lead.size());
    for (size_t d = 0; d < lead.size(); ++d) out->hi[d] = z[d] + 1;
    out->lo.insert(out->lo.end(), lo.begin() + 1, lo.end());
    out->hi.insert(out->hi.end(), hi.begin() + 1, hi.end());
    return true;
  }

  static bool contains(const Box& outer, const Box& inner) {
    if (outer.rank != inner.rank || outer.buffer != inner.buffer ||
        outer.lo.size() != inner.lo.size())
      return false;
    for (size_t d = 0; d < outer.lo.size(); ++d) {
      if (inner.lo[d] < outer.lo[d] || inner.hi[d] > outer.hi[d]) return false;
    }
    return true;
  }

  // What the device code of a task touches (its kind's touches(), from its views and arguments
  // alone) must lie inside the boxes it declares: the dependency pass orders tasks by those boxes,
  // so a touched region no declared box covers is invisible to it, hence unordered (a race).
  void check_accesses(int t) {
    const Task& task = p_.tasks[t];
    for (const kinds::Touch& u : kinds::kind_of(task).touches(task)) {
      if (u.view < 0 || u.view >= static_cast<int>(task.views.size())) {
        add("args",
            fmt::format("task {} ({}) has {} views, its kind addresses view {}", name(t),
                        task_kind_name(task.kind), task.views.size(), u.view),
            t);
        return;
      }
      const View& v = task.views[u.view];
      if (v.rank < 0 || v.rank >= p_.ranks || v.buffer < 0 ||
          v.buffer >= static_cast<int>(p_.buffers.size()))
        return;  // reported with the views
      Box b;
      if (!to_buffer(v, u.lo, u.hi, &b)) {
        add("view",
            fmt::format("task {}: view {} of `{}` (shape [{}] at offset {}) does not map onto the "
                        "buffer's dimensions",
                        name(t), u.view, p_.buffers[task.views[u.view].buffer].name,
                        fmt::join(task.views[u.view].shape, ", "), task.views[u.view].offset),
            t);
        return;
      }
      bool covered = false;
      for (const Box& d : task.writes) covered = covered || contains(d, b);
      if (!u.write) {
        for (const Box& d : task.reads) covered = covered || contains(d, b);
      }
      if (!covered) {
        add("race",
            fmt::format("task {} {} {} (its view {}), which none of the boxes it declares "
                        "covers: the dependency pass orders tasks by those boxes, so nothing "
                        "orders this access against the tasks that {} it",
                        name(t), u.write ? "writes" : "reads", box_text(p_, b), u.view,
                        u.write ? "read or write" : "write"),
            t);
        return;
      }
    }
  }

  // ---- after dependencies ----------------------------------------------------------------------

  void events() {
    const int ne = static_cast<int>(p_.events.size());
    producers_.assign(ne, {});
    waiters_.assign(ne, {});
    for (size_t t = 0; t < p_.tasks.size(); ++t) {
      for (const Signal& s : p_.tasks[t].signals) {
        if (s.event < 0 || s.event >= ne) {
          add("signal",
              fmt::format("task {} signals event #{}: no such event", name(static_cast<int>(t)),
                          s.event),
              static_cast<int>(t));
          continue;
        }
        producers_[s.event].push_back(static_cast<int>(t));
        const int from = p_.tasks[t].rank, to = p_.events[s.event].rank;
        const HandOff want = from == to                   ? HandOff::kLocal
                             : !p_.crosses_node(from, to) ? HandOff::kPeerFlag
                                                          : HandOff::kProxy;
        if (s.handoff == HandOff::kProxy) {
          std::vector<int>& senders = proxy_senders_[{from, to}];
          if (senders.empty() || senders.back() != static_cast<int>(t))
            senders.push_back(static_cast<int>(t));
        }
        if (s.handoff != want) {
          add("signal",
              fmt::format(
                  "task {} signals event `{}` of rank {} as {}, but from rank {} that is {}",
                  name(static_cast<int>(t)), p_.events[s.event].name, to, handoff_name(s.handoff),
                  from, handoff_name(want)),
              static_cast<int>(t));
        }
      }
      for (const Wait& w : p_.tasks[t].waits) {
        if (w.lag == 0 && w.event >= 0 && w.event < ne)
          waiters_[w.event].push_back(static_cast<int>(t));
      }
    }
    for (size_t ti = 0; ti < p_.tasks.size() && room(); ++ti) {
      const int t = static_cast<int>(ti);
      const Task& task = p_.tasks[t];
      for (const Wait& w : task.waits) {
        if (w.event < 0 || w.event >= ne) {
          add("wait", fmt::format("task {} waits for event #{}: no such event", name(t), w.event),
              t);
          continue;
        }
        const Event& ev = p_.events[w.event];
        if (ev.rank != task.rank) {
          add("wait",
              fmt::format("task {} waits for event `{}`, which lives on rank {}: a task waits on "
                          "its own rank's counters",
                          name(t), ev.name, ev.rank),
              t);
        }
        const int64_t signals = static_cast<int64_t>(producers_[w.event].size());
        if (w.count < 1 || w.count != signals) {
          add("wait",
              fmt::format("task {} waits for event `{}` to count {} per launch, but {} task(s) "
                          "signal it",
                          name(t), ev.name, w.count, signals),
              t);
        }
        if (w.lag != 0 && w.lag != 1)
          add("wait", fmt::format("task {} waits with lag {} (0 or 1)", name(t), w.lag), t);
      }
    }
  }

  // Kahn's algorithm over lag-0 waits (and, with CTA order, over each CTA's list). Returns the
  // order; fewer tasks than the plan's means a cycle, reported as a deadlock.
  std::vector<int> topological(bool with_ctas, std::vector<int>* stuck) {
    const size_t n = p_.tasks.size();
    std::vector<int> indeg(n, 0);
    std::vector<std::vector<int>> out(n);
    for (size_t t = 0; t < n; ++t) {
      for (const Wait& w : p_.tasks[t].waits) {
        if (w.lag != 0) continue;
        for (int pr : producers_[w.event]) {
          ++indeg[t];
          out[pr].push_back(static_cast<int>(t));
        }
      }
    }
    if (with_ctas) {
      for (const auto& rank : p_.cta_tasks) {
        for (const auto& list : rank) {
          for (size_t i = 1; i < list.size(); ++i) {
            ++indeg[list[i]];
            out[list[i - 1]].push_back(list[i]);
          }
        }
      }
    }
    std::vector<int> order, ready;
    for (size_t t = 0; t < n; ++t) {
      if (indeg[t] == 0) ready.push_back(static_cast<int>(t));
    }
    while (!ready.empty()) {
      const int t = ready.back();
      ready.pop_back();
      order.push_back(t);
      for (int c : out[t]) {
        if (--indeg[c] == 0) ready.push_back(c);
      }
    }
    if (stuck) {
      stuck->clear();
      for (size_t t = 0; t < n; ++t) {
        if (indeg[t] > 0) stuck->push_back(static_cast<int>(t));
      }
    }
    return order;
  }

  // The chain of waits among the stuck tasks, from the first, until one repeats.
  void report_cycle(const std::vector<int>& stuck, bool with_ctas) {
    std::vector<char> is_stuck(p_.tasks.size(), 0);
    for (int t : stuck) is_stuck[t] = 1;
    std::vector<int> prev_in_cta(p_.tasks.size(), -1);
    if (with_ctas) {
      for (const auto& rank : p_.cta_tasks) {
        for (const auto& list : rank) {
          for (size_t i = 1; i < list.size(); ++i) prev_in_cta[list[i]] = list[i - 1];
        }
      }
    }
    std::vector<int> pos(p_.tasks.size(), -1), path;
    int v = stuck.front();
    while (pos[v] < 0) {
      pos[v] = static_cast<int>(path.size());
      path.push_back(v);
      int next = -1;
      std::string why;
      for (const Wait& w : p_.tasks[v].waits) {
        for (int pr : producers_[w.event]) {
          if (w.lag == 0 && is_stuck[pr]) next = pr;
        }
      }
      if (next < 0 && prev_in_cta[v] >= 0 && is_stuck[prev_in_cta[v]]) next = prev_in_cta[v];
      if (next < 0) break;
      v = next;
    }
    std::string chain;
    for (size_t i = pos[v] < 0 ? 0 : pos[v]; i < path.size(); ++i)
      chain += fmt::format("{}{}", chain.empty() ? "" : " waits for ", name(path[i]));
    chain += fmt::format(" waits for {}", name(v));
    add("deadlock",
        fmt::format("{} task(s) can never run{}: {}", stuck.size(),
                    with_ctas ? " (their CTAs' task order joined to the waits)" : "", chain),
        v);
  }

  void event_cycles() {
    std::vector<int> stuck;
    topological(false, &stuck);
    if (!stuck.empty()) report_cycle(stuck, false);
  }

  // ---- after scheduling ------------------------------------------------------------------------

  void ctas() {
    const int64_t ctas = p_.cta_tasks.empty() ? 0 : static_cast<int64_t>(p_.cta_tasks[0].size());
    std::vector<int> seen(p_.tasks.size(), 0);
    if (static_cast<int64_t>(p_.cta_tasks.size()) != p_.ranks) {
      add("cta", fmt::format("the plan has CTA lists for {} ranks, not {}", p_.cta_tasks.size(),
                             p_.ranks));
      return;
    }
    int64_t compute_end = 0, comm_first = 0, comm_count = 0;
    for (const Role& r : p_.roles) {
      if (r.name == "compute") compute_end = r.first_cta + r.count;
      if (r.name == "comm") {
        comm_first = r.first_cta;
        comm_count = r.count;
      }
    }
    position_.assign(p_.tasks.size(), -1);
    chain_.assign(p_.tasks.size(), -1);
    for (int64_t r = 0; r < p_.ranks; ++r) {
      if (static_cast<int64_t>(p_.cta_tasks[r].size()) != ctas) {
        add("cta", fmt::format("rank {} has {} CTA lists, rank 0 has {}", r, p_.cta_tasks[r].size(),
                               ctas));
        return;
      }
      for (int64_t c = 0; c < ctas; ++c) {
        const auto& list = p_.cta_tasks[r][c];
        for (size_t i = 0; i < list.size(); ++i) {
          const int t = list[i];
          if (t < 0 || t >= static_cast<int>(p_.tasks.size())) {
            add("cta", fmt::format("rank {} CTA {} lists task #{}: no such task", r, c, t));
            return;
          }
          const Task& task = p_.tasks[t];
          if (++seen[t] > 1 || task.rank != r || task.cta != c) {
            add("cta",
                fmt::format("task {} is listed on rank {} CTA {} (its rank {}, CTA {}{})", name(t),
                            r, c, task.rank, task.cta, seen[t] > 1 ? ", and more than once" : ""),
                t);
            continue;
          }
          position_[t] = static_cast<int>(i);
          chain_[t] = static_cast<int>(r * ctas + c);
          // A kind on a CTA of a role that runs it (bookkeeping tasks and row moves anywhere).
          const kinds::Kind& kind = kinds::kind_of(task);
          const bool bookkeeping = kind.bookkeeping() || kind.runs_anywhere();
          const bool on_comm = c >= comm_first && c < comm_first + comm_count;
          if (!bookkeeping && kind.is_comm() && comm_count > 0 && !on_comm)
            add("cta", fmt::format("comm task {} runs on compute CTA {}", name(t), c), t);
          if (!bookkeeping && !kind.is_comm() && compute_end > 0 && c >= compute_end)
            add("cta", fmt::format("compute task {} runs on comm CTA {}", name(t), c), t);
        }
      }
    }
    for (size_t t = 0; t < p_.tasks.size(); ++t) {
      if (seen[t] == 0)
        add("cta", fmt::format("task {} is on no CTA's list", name(static_cast<int>(t))),
            static_cast<int>(t));
    }
    chains_ = p_.ranks * ctas;
  }

  // Vector clocks over the job's CTAs in a topological order of the launch: clock_[t][c] is one
  // more than the position of the last task of chain c that happens before (or is) t.
  bool clocks() {
    std::vector<int> stuck;
    const std::vector<int> order = topological(true, &stuck);
    if (!stuck.empty()) {
      report_cycle(stuck, true);
      return false;
    }
    const int64_t n = static_cast<int64_t>(p_.tasks.size());
    if ((n + static_cast<int64_t>(p_.events.size())) * chains_ > o_.max_clock_entries) {
      report_.skipped = fmt::format(
          "ordering checks skipped: {} tasks and {} events over {} CTAs need {} vector-clock "
          "entries, over the verifier's budget of {}; verify at smaller shapes or fewer --sms",
          n, p_.events.size(), chains_, (n + static_cast<int64_t>(p_.events.size())) * chains_,
          o_.max_clock_entries);
      return false;
    }
    clock_.assign(static_cast<size_t>(n * chains_), 0);
    std::vector<int> prev_in_cta(p_.tasks.size(), -1);
    for (const auto& rank : p_.cta_tasks) {
      for (const auto& list : rank) {
        for (size_t i = 1; i < list.size(); ++i) prev_in_cta[list[i]] = list[i - 1];
      }
    }
    std::unordered_map<int, std::vector<uint32_t>> event_clock;
    const auto join = [&](uint32_t* into, const uint32_t* from) {
      for (int64_t c = 0; c < chains_; ++c) into[c] = std::max(into[c], from[c]);
    };
    for (int t : order) {
      uint32_t* vc = &clock_[static_cast<size_t>(t) * chains_];
      if (prev_in_cta[t] >= 0) join(vc, &clock_[static_cast<size_t>(prev_in_cta[t]) * chains_]);
      for (const Wait& w : p_.tasks[t].waits) {
        if (w.lag != 0) continue;
        auto it = event_clock.find(w.event);
        if (it == event_clock.end()) {
          std::vector<uint32_t> ec(chains_, 0);
          for (int pr : producers_[w.event])
            join(ec.data(), &clock_[static_cast<size_t>(pr) * chains_]);
          it = event_clock.emplace(w.event, std::move(ec)).first;
        }
        join(vc, it->second.data());
      }
      vc[chain_[t]] = static_cast<uint32_t>(position_[t] + 1);
    }
    return true;
  }

  bool happens_before(int a, int b) const {
    if (a == b) return true;
    return clock_[static_cast<size_t>(b) * chains_ + chain_[a]] >=
           static_cast<uint32_t>(position_[a] + 1);
  }

  // Whether task a's writes into rank d (another node: the proxies carry them) have landed before
  // task b starts. The proxy of a's rank takes its ring in order and sends to each peer in order,
  // so the data land before every signal to rank d that a task z of a's rank posts at or after a
  // (a = z, or a happens before z); b must come after a task v that waited for such a signal.
  // Any other path from a to b (a local signal, then an NVLink flag on the other node; a signal
  // to a third rank) may overtake the data.
  bool delivered_before(int a, int d, int b) const {
    return delivered(a, d, [&](int v) { return v == b || happens_before(v, b); });
  }

  // ... and before rank d's launch ends: some task of d waits for such a signal.
  bool delivered_before_end(int a, int d) const {
    return delivered(a, d, [](int) { return true; });
  }

  template <typename F>
  bool delivered(int a, int d, F&& waiter_ok) const {
    const auto through = [&](int z) {
      for (const Signal& s : p_.tasks[z].signals) {
        if (s.handoff != HandOff::kProxy || p_.events[s.event].rank != d) continue;
        for (int v : waiters_[s.event]) {
          if (waiter_ok(v)) return true;
        }
      }
      return false;
    };
    if (through(a)) return true;
    auto it = proxy_senders_.find({p_.tasks[a].rank, d});
    if (it == proxy_senders_.end()) return false;
    for (int z : it->second) {
      if (z != a && happens_before(a, z) && through(z)) return true;
    }
    return false;
  }

  // A write whose bytes the proxies carry (into a rank of another node than the writer's).
  bool proxied(const Access& x) const {
    return x.write && p_.crosses_node(p_.tasks[x.task].rank, x.box->rank);
  }

  // Conflicting pairs in program order (task order: the lowering emits operations, and the
  // phases inside one, in program order). Per (rank, buffer), accesses are taken in that order
  // against the frontier of earlier ones: each new access is checked against the live accesses it
  // conflicts with (the later must happen after the earlier), and a write leaves out of the
  // frontier what it covers and happens after, since anything later that conflicts with those
  // conflicts with the write too and is checked against it (or against what covers it), and
  // happens-before is transitive. Scatter writes cover nothing (pairs of them are exempt).
  struct Live {
    LiveSpanIndex<Access> reads, writes;
  };

  void ordering() {
    if (!clocks()) return;
    std::map<std::pair<int, int>, Live> index;
    std::vector<std::vector<std::pair<LiveSpanIndex<Access>*, size_t>>> own(p_.tasks.size());
    for (size_t t = 0; t < p_.tasks.size(); ++t) {
      const Task& task = p_.tasks[t];
      for (const std::vector<Box>* boxes : {&task.reads, &task.writes}) {
        const bool write = boxes == &task.writes;
        for (const Box& b : *boxes) {
          const auto [first, end] = flat_span(p_.buffers[b.buffer], b);
          Live& live = index[{b.rank, b.buffer}];
          LiveSpanIndex<Access>& idx = write ? live.writes : live.reads;
          own[t].push_back({&idx, idx.add(first, end, Access{static_cast<int>(t), &b, write})});
        }
      }
    }
    for (auto& [key, live] : index) {
      live.reads.finish();
      live.writes.finish();
    }
    for (size_t ti = 0; ti < p_.tasks.size() && room(); ++ti) {
      const int t = static_cast<int>(ti);
      const Task& task = p_.tasks[t];
      std::vector<std::pair<LiveSpanIndex<Access>*, size_t>> covered;
      for (const std::vector<Box>* boxes : {&task.reads, &task.writes}) {
        const bool write = boxes == &task.writes;
        for (const Box& b : *boxes) {
          Live& live = index[{b.rank, b.buffer}];
          const auto [first, end] = flat_span(p_.buffers[b.buffer], b);
          // A read conflicts with earlier writes; a write with earlier reads and writes.
          for (LiveSpanIndex<Access>* idx : {&live.writes, &live.reads}) {
            if (!write && idx == &live.reads) continue;
            idx->overlapping(first, end, [&](size_t h) {
              const Access& x = idx->entry(h).value;
              if (x.task == t || !x.box->overlaps(b) || full()) return;
              if (write && x.write && b.scatter && x.box->scatter && task.op == p_.tasks[x.task].op)
                return;
              if (proxied(x) ? !delivered_before(x.task, b.rank, t) : !happens_before(x.task, t)) {
                race(x.task, x.write, t, write, b);
                return;
              }
              if (write && !b.scatter && contains(b, *x.box)) covered.push_back({idx, h});
            });
          }
        }
      }
      for (const auto& [idx, h] : own[t]) idx->set_alive(h, true);
      for (const auto& [idx, h] : covered) idx->set_alive(h, false);
    }
    if (full()) return;
    launches();
  }

  void race(int first, bool first_writes, int second, bool second_writes, const Box& b) {
    const char* hazard = !first_writes   ? "write-after-read"
                         : second_writes ? "write-after-write"
                                         : "read-after-write";
    const bool via_proxy = first_writes && p_.crosses_node(p_.tasks[first].rank, b.rank);
    add("race",
        fmt::format("{} race on {}: {} {} it, then {} {} it, but nothing orders the second after "
                    "the first ({})",
                    hazard, box_text(p_, b), name(first), first_writes ? "writes" : "reads",
                    name(second), second_writes ? "writes" : "reads",
                    via_proxy
                        ? fmt::format("the write crosses nodes: it lands only before the "
                                      "signals to rank {} that its rank's proxy sends after it",
                                      b.rank)
                        : "no event or CTA order between them"),
        first, second);
  }

  // Whether task t happens before rank d's launch is over: before some task of rank d (a kernel
  // ends when its last CTA does). The join of the clocks of d's CTAs' last tasks is what every
  // task of d has seen by then.
  bool before_finish(int t, int d) {
    if (finished_.empty()) {
      finished_.assign(p_.ranks, std::vector<uint32_t>(chains_, 0));
      for (int64_t r = 0; r < p_.ranks; ++r) {
        for (const auto& list : p_.cta_tasks[r]) {
          if (list.empty()) continue;
          const uint32_t* vc = &clock_[static_cast<size_t>(list.back()) * chains_];
          for (int64_t c = 0; c < chains_; ++c) finished_[r][c] = std::max(finished_[r][c], vc[c]);
        }
      }
    }
    return finished_[d][chain_[t]] >= static_cast<uint32_t>(position_[t] + 1);
  }

  void launches() {
    std::vector<int> fence(p_.ranks, -1);
    for (size_t t = 0; t < p_.tasks.size(); ++t) {
      const Task& task = p_.tasks[t];
      if (task.kind == TaskKind::kLaunchFence) fence[task.rank] = static_cast<int>(t);
    }
    for (int64_t r = 0; r < p_.ranks; ++r) {
      if (fence[r] < 0) {
        add("launch", fmt::format("rank {} has no launch fence", r));
        return;
      }
    }
    for (size_t ti = 0; ti < p_.tasks.size() && room(); ++ti) {
      const int t = static_cast<int>(ti);
      const Task& task = p_.tasks[t];
      std::vector<int> peers;
      for (const std::vector<Box>* boxes : {&task.reads, &task.writes}) {
        for (const Box& b : *boxes) {
          if (b.rank != task.rank) peers.push_back(b.rank);
        }
      }
      if (task.kind == TaskKind::kSignalOnly) {
        const int peer = static_cast<int>(args_as<abi::SignalArgs>(task).peer);
        if (peer != task.rank) peers.push_back(peer);
      }
      std::sort(peers.begin(), peers.end());
      peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
      for (int d : peers) {
        if (!happens_before(fence[d], t)) {
          add("launch",
              fmt::format("task {} touches rank {}'s memory without waiting for that rank's "
                          "launch fence: it may land while rank {} still runs its previous launch",
                          name(t), d, d),
              t);
        }
        // Through the proxies: the data land before the signal, so some task of d must wait for
        // one of t's signals to d.
        const bool landed =
            !p_.crosses_node(task.rank, d) ? before_finish(t, d) : delivered_before_end(t, d);
        if (!landed) {
          add("launch",
              fmt::format("task {} touches rank {}'s memory, but no task of rank {} waits for "
                          "it: rank {} may finish its launch and start the next under it",
                          name(t), d, d, d),
              t);
        }
      }
    }
    // An event counted from several tasks of several ranks: those on other ranks signal only
    // after the event's rank has entered this launch, or a fast rank's next launch could count
    // for this one. (Producers all of one rank are safe: that rank's launches are in order.)
    for (size_t e = 0; e < p_.events.size() && room(); ++e) {
      if (producers_[e].size() < 2) continue;
      const int d = p_.events[e].rank;
      bool one_rank = true;
      for (int pr : producers_[e])
        one_rank = one_rank && p_.tasks[pr].rank == p_.tasks[producers_[e][0]].rank;
      if (one_rank) continue;
      for (int pr : producers_[e]) {
        if (p_.tasks[pr].rank != d && !happens_before(fence[d], pr)) {
          add("launch",
              fmt::format("task {} signals event `{}` of rank {} (counted from {} tasks) without "
                          "waiting for rank {}'s launch fence",
                          name(pr), p_.events[e].name, d, producers_[e].size(), d),
              pr);
          break;
        }
      }
    }
  }

  const Plan& p_;
  Stage stage_;
  const VerifyOptions& o_;
  Report report_;
  std::vector<std::vector<int>> producers_;  // event -> tasks that signal it
  std::vector<std::vector<int>> waiters_;    // event -> tasks that wait for this launch's count
  std::map<std::pair<int, int>, std::vector<int>> proxy_senders_;  // (rank, rank) -> signallers
  std::vector<int> position_, chain_;  // task -> place in its CTA list, its CTA's chain
  int64_t chains_ = 0;
  std::vector<uint32_t> clock_;
  std::vector<std::vector<uint32_t>> finished_;  // rank -> what its launch has seen at its end
};

}  // namespace

std::string Report::text() const {
  std::string out;
  for (const Finding& f : findings) out += fmt::format("  [{}] {}\n", f.kind, f.message);
  if (!skipped.empty()) out += "  (" + skipped + ")\n";
  return out;
}

Report verify(const Plan& plan, Stage stage, const VerifyOptions& options) {
  return Verifier(plan, stage, options).run();
}

VerifyError::VerifyError(std::string pass, Report report)
    : InternalError(fmt::format("plan verifier, after pass `{}`: {} finding(s):\n{}", pass,
                                report.findings.size(), report.text())),
      pass_(std::move(pass)),
      report_(std::move(report)) {}

void verify_or_throw(const Plan& plan, Stage stage, const std::string& pass,
                     const VerifyOptions& options) {
  Report r = verify(plan, stage, options);
  if (!r.ok()) throw VerifyError(pass, std::move(r));
}

bool verify_by_default() {
  const char* env = std::getenv("MKC_VERIFY");
  if (env != nullptr && *env != '\0') return std::strcmp(env, "0") != 0;
#ifdef NDEBUG
  return false;
#else
  return true;
#endif
}

}  // namespace mkc::plan
