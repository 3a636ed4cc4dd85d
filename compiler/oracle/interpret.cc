#include "compiler/oracle/interpret.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <random>
#include <tuple>

#include "compiler/kinds/kind.h"
#include "compiler/kinds/view_math.h"
#include "support/check.h"
#include "support/error.h"
#include "support/parallel.h"

namespace mkc::plan {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

using kinds::for_rows;

class Machine {
 public:
  Machine(const Plan& p, const InterpretOptions& o) : p_(p), o_(o), rng_(o.seed) {
    data_.assign(p.ranks, RankData(p.buffers.size()));
    for (auto& rank : data_) {
      for (size_t b = 0; b < p.buffers.size(); ++b)
        rank[b].assign(p.buffers[b].elements(), p.buffers[b].zeroed ? 0.0 : kNaN);
    }
    counters_.assign(p.events.size(), 0);
    steps_.assign(p.ranks, 0);
    for (const compiler::DeviceFunction& f : p.source->device_fns) {
      auto it = o.fns.find(f.name);
      if (it == o.fns.end()) {
        throw UserError(
            fmt::format("the interpreter has no host implementation of device function `{}`; "
                        "supply one in InterpretOptions::fns",
                        f.name));
      }
      fns_.push_back(it->second);
    }
  }

  InterpretResult run() {
    InterpretResult res;
    res.snapshots.assign(o_.launches, std::vector<RankData>(p_.ranks));
    const int64_t ctas = p_.cta_tasks.empty() ? 0 : static_cast<int64_t>(p_.cta_tasks[0].size());
    std::vector<int> epoch(p_.ranks, 0);
    std::vector<std::vector<size_t>> pc(p_.ranks, std::vector<size_t>(ctas, 0));
    for (int64_t r = 0; r < p_.ranks; ++r) start_launch(static_cast<int>(r), &epoch[r], &pc[r]);
    for (;;) {
      // Runnable (rank, cta) pairs.
      std::vector<std::pair<int, int>> ready;
      bool work_left = false;
      for (int64_t r = 0; r < p_.ranks; ++r) {
        if (epoch[r] > o_.launches) continue;
        for (int64_t c = 0; c < ctas; ++c) {
          const auto& list = p_.cta_tasks[r][c];
          if (pc[r][c] >= list.size()) continue;
          work_left = true;
          if (satisfied(p_.tasks[list[pc[r][c]]], epoch[r]))
            ready.push_back({static_cast<int>(r), static_cast<int>(c)});
        }
      }
      // Proxy channels with a message in flight: delivering one is a step like running a task.
      std::vector<std::pair<int, int>> in_flight;
      for (const auto& [key, queue] : channels_) {
        if (!queue.empty()) in_flight.push_back(key);
      }
      if (ready.empty() && in_flight.empty()) {
        if (!work_left) break;
        report_deadlock(epoch, pc);
      }
      const size_t pick =
          std::uniform_int_distribution<size_t>(0, ready.size() + in_flight.size() - 1)(rng_);
      if (pick >= ready.size()) {
        res.proxy_late += deliver(in_flight[pick - ready.size()]);
        ++res.proxy_messages;
        continue;
      }
      const auto [r, c] = ready[pick];
      const Task& t = p_.tasks[p_.cta_tasks[r][c][pc[r][c]]];
      run_task(t);
      ++pc[r][c];
      ++res.tasks_run;
      // A rank whose CTAs are all done ends its launch; the host then starts the next one.
      bool done = true;
      for (int64_t k = 0; k < ctas; ++k) done &= pc[r][k] >= p_.cta_tasks[r][k].size();
      if (done) {
        res.snapshots[epoch[r] - 1][r] = data_[r];
        start_launch(r, &epoch[r], &pc[r]);
      }
    }
    return res;
  }

 private:
  void start_launch(int r, int* epoch, std::vector<size_t>* pc) {
    ++*epoch;
    if (*epoch > o_.launches) return;
    std::fill(pc->begin(), pc->end(), 0);
    // The host writes fresh inputs and the test poisons outputs and scratch before the launch.
    for (size_t b = 0; b < p_.buffers.size(); ++b) {
      if (p_.buffers[b].origin != "input" && p_.buffers[b].origin != "compiler")
        std::fill(data_[r][b].begin(), data_[r][b].end(), kNaN);
    }
    o_.inputs(r, *epoch, data_[r]);
  }

  // What one task sends one rank of another node through the proxies: the elements it wrote
  // there (buffer, flat index, value), then its signals to that rank's counters.
  struct Message {
    std::vector<std::tuple<int, int64_t, double>> writes;
    std::vector<int> signals;
    int64_t sent_at = 0;  // the sender rank's step count when it was posted
  };

  // Runs a task. Its writes into this node and its signals to it take effect at once; its writes
  // into another node's memory and its signals there become a message on the channel from its
  // rank to that one (one proxy thread per rank, in order per peer), delivered at a later step
  // of the interleaving: the data first, then the counters. Sources are read when the task runs
  // (the device task ends only once its proxy has taken the bytes), destinations change when the
  // message lands, and messages of different channels overtake each other.
  void run_task(const Task& t) {
    struct Saved {
      const Box* box;
      std::vector<std::pair<int64_t, double>> old;  // flat index, value before the task
    };
    std::vector<Saved> saved;
    for (const Box& b : t.writes) {
      if (!p_.crosses_node(t.rank, b.rank)) continue;
      Saved sv{&b, {}};
      const std::vector<double>& v = data_[b.rank][b.buffer];
      box_elements(b, [&](int64_t f) { sv.old.push_back({f, v[f]}); });
      saved.push_back(std::move(sv));
    }
    execute(t);
    std::map<int, Message> out;  // destination rank -> message
    for (const Saved& sv : saved) {
      std::vector<double>& v = data_[sv.box->rank][sv.box->buffer];
      Message& m = out[sv.box->rank];
      for (const auto& [f, old] : sv.old) {
        // Only what the task wrote (a scatter box bounds rows other tasks fill too).
        if (std::memcmp(&v[f], &old, sizeof(double)) != 0)
          m.writes.emplace_back(sv.box->buffer, f, v[f]);
      }
    }
    for (const Saved& sv : saved) {
      std::vector<double>& v = data_[sv.box->rank][sv.box->buffer];
      for (const auto& [f, old] : sv.old) v[f] = old;
    }
    for (const Signal& s : t.signals) {
      if (s.handoff == HandOff::kProxy) {
        out[p_.events[s.event].rank].signals.push_back(s.event);
      } else {
        ++counters_[s.event];
      }
    }
    ++steps_[t.rank];
    for (auto& [to, m] : out) {
      m.sent_at = steps_[t.rank];
      channels_[{t.rank, to}].push_back(std::move(m));
    }
  }

  // Lands the oldest message of a channel; returns whether its sender's rank ran a task since.
  bool deliver(const std::pair<int, int>& channel) {
    std::deque<Message>& queue = channels_[channel];
    const Message m = std::move(queue.front());
    queue.pop_front();
    for (const auto& [b, f, value] : m.writes) data_[channel.second][b][f] = value;
    for (int e : m.signals) ++counters_[e];
    return steps_[channel.first] > m.sent_at;
  }

  // Calls fn(flat index) for every element of a box of its buffer.
  template <typename F>
  void box_elements(const Box& b, F fn) const {
    const View whole{b.rank, b.buffer, 0, p_.buffers[b.buffer].shape};
    for_rows(whole, b.lo, b.hi, whole, b.lo, [&](int64_t first, int64_t, int64_t n) {
      for (int64_t i = 0; i < n; ++i) fn(first + i);
    });
  }

  bool satisfied(const Task& t, int epoch) const {
    for (const Wait& w : t.waits) {
      if (counters_[w.event] < static_cast<int64_t>(epoch - w.lag) * w.count) return false;
    }
    return true;
  }

  [[noreturn]] void report_deadlock(const std::vector<int>& epoch,
                                    const std::vector<std::vector<size_t>>& pc) const {
    std::string msg =
        fmt::format("plan `{}` deadlocks: no task can run, but work remains", p_.schedule);
    int shown = 0;
    for (int64_t r = 0; r < p_.ranks; ++r) {
      for (size_t c = 0; c < pc[r].size(); ++c) {
        const auto& list = p_.cta_tasks[r][c];
        if (pc[r][c] >= list.size() || epoch[r] > o_.launches) continue;
        const Task& t = p_.tasks[list[pc[r][c]]];
        for (const Wait& w : t.waits) {
          const int64_t want = static_cast<int64_t>(epoch[r] - w.lag) * w.count;
          if (counters_[w.event] >= want || shown >= 12) continue;
          msg += fmt::format(
              "\n  rank {} launch {} cta {}: task {} waits for event {} to reach {}, seen {}", r,
              epoch[r], c, t.label, p_.events[w.event].name, want, counters_[w.event]);
          ++shown;
        }
      }
    }
    throw UserError(msg);
  }

  void execute(const Task& t) {
    const kinds::Memory mem{p_, data_, fns_};
    kinds::kind_of(t).execute(mem, t);
  }

  const Plan& p_;
  const InterpretOptions& o_;
  std::mt19937_64 rng_;
  std::vector<RankData> data_;
  std::vector<int64_t> counters_;
  std::vector<HostFn> fns_;
  std::map<std::pair<int, int>, std::deque<Message>> channels_;  // (from rank, to rank)
  std::vector<int64_t> steps_;                                   // rank -> tasks it has run
};

}  // namespace

InterpretResult interpret(const Plan& plan, const InterpretOptions& options) {
  MKC_CHECK(options.inputs != nullptr, "InterpretOptions::inputs is required");
  Machine m(plan, options);
  InterpretResult res = m.run();
  return res;
}

namespace {

// SplitMix64's finalizer: a counter-based generator, so any element's value is known without
// drawing the ones before it (the fill runs in parallel, and gives the same values whatever
// the split).
uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

namespace {

// A token's k experts of `experts`, distinct (when k <= experts), drawn by `routing`: uniform;
// skewed (about three draws in four go to the two hot experts 0 and 1, for as long as they are
// free); or with every expert of the upper half empty (never drawn, when k <= experts / 2).
void route_token(uint64_t key, int64_t experts, int64_t k, Routing routing, double* out) {
  const int64_t pool =
      routing == Routing::kEmptyExperts && k <= experts / 2 ? experts / 2 : experts;
  uint64_t draw = 0;
  for (int64_t j = 0; j < k; ++j) {
    for (;;) {
      const uint64_t h = mix64(key + 0x9e3779b97f4a7c15ull * ++draw);
      int64_t e = static_cast<int64_t>(h % static_cast<uint64_t>(pool));
      if (routing == Routing::kSkewed && (h >> 40) % 4 != 0)
        e = static_cast<int64_t>((h >> 20) % 2);
      bool fresh = true;
      for (int64_t i = 0; i < j && k <= experts; ++i) fresh = fresh && out[i] != e;
      // A hot expert already taken: the next draw (uniform three times in four, eventually).
      if (fresh || draw > 64 * static_cast<uint64_t>(k)) {
        if (!fresh) {
          // Past the draws' budget: the lowest free expert, so the row stays distinct.
          for (e = 0; e < experts; ++e) {
            bool taken = false;
            for (int64_t i = 0; i < j; ++i) taken = taken || out[i] == e;
            if (!taken) break;
          }
        }
        out[j] = static_cast<double>(e);
        break;
      }
    }
  }
}

}  // namespace

InputFn random_inputs(const Plan& plan, uint64_t seed, Routing routing) {
  // Routing tables of alltoall operations: which buffers, and how many experts.
  std::map<int, int64_t> routes;
  // Packed sequences' cumulative lengths (attention's `seqlens`), by buffer: the rows packed.
  std::map<int, int64_t> packed;
  for (const compiler::OpInstance& op : plan.source->ops) {
    if (op.kind == compiler::OpKind::kAllToAll)
      routes[op.tensor_args.at("route")] = op.ints.at("experts");
    if (const auto it = op.tensor_args.find("seqlens"); it != op.tensor_args.end()) {
      const std::vector<int64_t>& q = op.inputs[0].shape;
      packed[it->second] = q[q.size() - 2];
    }
  }
  return [&plan, seed, routes, packed, routing](int rank, int launch, RankData& data) {
    for (size_t b = 0; b < plan.buffers.size(); ++b) {
      if (plan.buffers[b].origin != "input") continue;
      const uint64_t key = mix64(seed * 1000003u + static_cast<uint64_t>(launch) * 7919u +
                                 static_cast<uint64_t>(rank) * 104729u + b);
      std::vector<double>& v = data[b];
      auto it = routes.find(plan.buffers[b].tensor);
      if (it != routes.end()) {
        // A routing table [tokens, k]: each token's k experts, distinct.
        const std::vector<int64_t>& shape = plan.buffers[b].shape;
        const int64_t k = shape.size() > 1 ? shape[1] : 1,
                      tokens = static_cast<int64_t>(v.size()) / k;
        parallel_for(tokens, [&](int64_t t0, int64_t t1) {
          for (int64_t t = t0; t < t1; ++t)
            route_token(mix64(key + static_cast<uint64_t>(t) * 0x632be59bd9b4e019ull), it->second,
                        k, routing, v.data() + t * k);
        });
        continue;
      }
      if (auto p = packed.find(plan.buffers[b].tensor); p != packed.end()) {
        // n sequences cut at n - 1 random places (some empty, some long) between L[0] and L[n]:
        // 0 and S, or on one launch in three padding rows before and after (up to S / 8 each).
        const auto S = static_cast<uint64_t>(p->second);
        const int64_t n = static_cast<int64_t>(v.size()) - 1;
        const uint64_t h0 = mix64(key ^ 0x5bd1e9955bd1e995ull), pad = S / 8 + 1;
        const uint64_t lo = h0 % 3 == 0 ? (h0 >> 8) % pad : 0,
                       hi = h0 % 3 == 0 ? S - (h0 >> 32) % pad : S;
        for (int64_t d = 1; d < n; ++d) {
          const uint64_t h = mix64(key + 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(d));
          v[d] = static_cast<double>(lo + h % (hi - lo + 1));
        }
        v[0] = static_cast<double>(lo);
        v[n] = static_cast<double>(hi);
        std::sort(v.begin(), v.end());
        continue;
      }
      // Floats uniform in [-1, 1), other integers in [0, 8).
      const bool real = compiler::dtype_is_float(plan.buffers[b].dtype);
      parallel_for(static_cast<int64_t>(v.size()), [&](int64_t e0, int64_t e1) {
        for (int64_t e = e0; e < e1; ++e) {
          const uint64_t h = mix64(key + 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(e + 1));
          v[e] = real ? static_cast<double>(h >> 11) * 0x1p-52 - 1.0 : static_cast<double>(h % 8);
        }
      });
    }
  };
}

}  // namespace mkc::plan
