#include "compiler/interpret.h"

#include <fmt/format.h>

#include <array>
#include <cmath>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <random>
#include <tuple>

#include "support/check.h"
#include "support/error.h"
#include "support/parallel.h"

namespace mkc::plan {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

int64_t product(const std::vector<int64_t>& v, size_t from = 0) {
  int64_t p = 1;
  for (size_t i = from; i < v.size(); ++i) p *= v[i];
  return p;
}

// Flat index of a multi-index inside a view (no allocation: this is the interpreter's inner loop).
template <typename... I>
int64_t flat(const View& v, I... idx) {
  const int64_t ix[] = {static_cast<int64_t>(idx)...};
  int64_t f = 0;
  for (size_t d = 0; d < sizeof...(I); ++d) f = f * v.shape[d] + ix[d];
  return v.offset + f;
}

int64_t flat_vec(const View& v, const std::vector<int64_t>& idx) {
  int64_t f = 0;
  for (size_t d = 0; d < v.shape.size(); ++d) f = f * v.shape[d] + idx[d];
  return v.offset + f;
}

// Calls fn(src_flat, dst_flat, n) for each contiguous row of the box [lo, hi) of `src`, paired
// with the box of the same extents starting at `dst_lo` in `dst`.
template <typename F>
void for_rows(const View& src, const std::vector<int64_t>& lo, const std::vector<int64_t>& hi,
              const View& dst, const std::vector<int64_t>& dst_lo, F fn) {
  const size_t n = lo.size();
  for (size_t d = 0; d < n; ++d) {
    if (lo[d] >= hi[d]) return;
  }
  const int64_t len = n == 0 ? 1 : hi[n - 1] - lo[n - 1];
  std::vector<int64_t> idx = lo, didx = dst_lo;
  for (;;) {
    fn(flat_vec(src, idx), flat_vec(dst, didx), len);
    if (n <= 1) return;
    size_t d = n - 1;
    for (;;) {
      --d;
      ++idx[d];
      ++didx[d];
      if (idx[d] < hi[d]) break;
      didx[d] -= idx[d] - lo[d];
      idx[d] = lo[d];
      if (d == 0) return;
    }
  }
}

// Reads a range (abi.h, "ranges") at args[pos]; advances pos.
void read_range(const std::vector<int64_t>& args, size_t* pos, std::vector<int64_t>* lo,
                std::vector<int64_t>* hi) {
  int at = static_cast<int>(*pos);
  const abi::Range r = abi::read_range(reinterpret_cast<const abi::i64*>(args.data()), &at);
  lo->assign(r.lo, r.lo + r.n);
  hi->assign(r.hi, r.hi + r.n);
  *pos = static_cast<size_t>(at);
}

double reduce2(int64_t op, double a, double b) {
  if (op == 0) return a + b;
  if (op == 1) return std::max(a, b);
  return std::min(a, b);
}

class Machine {
 public:
  Machine(const Plan& p, const InterpretOptions& o) : p_(p), o_(o), rng_(o.seed) {
    data_.assign(p.ranks, RankData(p.buffers.size()));
    for (auto& rank : data_) {
      for (size_t b = 0; b < p.buffers.size(); ++b) rank[b].assign(p.buffers[b].elements(), kNaN);
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
    const int node = p_.node_of(t.rank);
    struct Saved {
      const Box* box;
      std::vector<std::pair<int64_t, double>> old;  // flat index, value before the task
    };
    std::vector<Saved> saved;
    for (const Box& b : t.writes) {
      if (p_.node_of(b.rank) == node) continue;
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

  double fn(int64_t index, const std::vector<double>& args) const { return fns_[index](args); }

  void execute(const Task& t) {
    const auto buf = [&](const View& v) -> std::vector<double>& { return data_[v.rank][v.buffer]; };
    switch (t.kind) {
      case TaskKind::kLaunchFence:
      case TaskKind::kLaunchEnd:
      case TaskKind::kSignalOnly:
        return;
      case TaskKind::kGemmTile: {
        const View &a = t.views[0], &b = t.views[1], &c = t.views[2];
        const abi::GemmTileArgs g = args_as<abi::GemmTileArgs>(t);
        const int64_t m0 = g.m0, m1 = g.m1, n0 = g.n0, n1 = g.n1, k0 = g.k0, k1 = g.k1;
        for (int64_t m = m0; m < m1; ++m) {
          for (int64_t n = n0; n < n1; ++n) {
            double acc = 0;
            const std::vector<double>& av = buf(a);
            const std::vector<double>& bv = buf(b);
            const int64_t arow = flat(a, m, 0), bcol = flat(b, 0, n), N = b.shape[1];
            for (int64_t k = k0; k < k1; ++k) acc += av[arow + k] * bv[bcol + k * N];
            if (g.has_bias) acc += buf(t.views[3])[flat(t.views[3], n)];
            if (g.fn >= 0) acc = fn(g.fn, {acc});
            buf(c)[flat(c, m, n)] = acc;
          }
        }
        return;
      }
      case TaskKind::kGroupedGemmTile: {
        const View &x = t.views[0], &w = t.views[1], &y = t.views[2], &cn = t.views[3];
        const abi::GroupedGemmTileArgs ga = args_as<abi::GroupedGemmTileArgs>(t);
        const int64_t G = w.shape[0], K = x.shape[1], N = w.shape[2];
        const int64_t lead = product(cn.shape) / G, nblocks = (N + ga.bn - 1) / ga.bn;
        // The work items in their order (abi.h): by group, then column block, then tile of bm
        // rows; (group, first row, end row, column block). Counts clamp to [0, capacity].
        const int64_t cap = std::min(x.shape[0], y.shape[0]);
        std::vector<std::array<int64_t, 4>> tiles;
        for (int64_t g = 0, first = 0; g < G; ++g) {
          int64_t n = 0;
          for (int64_t l = 0; l < lead; ++l)
            n += static_cast<int64_t>(buf(cn)[cn.offset + l * G + g]);
          n = std::max<int64_t>(n, 0);
          for (int64_t bj = 0; bj < nblocks; ++bj) {
            for (int64_t m0 = first; m0 < first + n; m0 += ga.bm)
              tiles.push_back(std::array<int64_t, 4>{
                  g, m0, std::min<int64_t>({first + n, m0 + ga.bm, std::max(m0, cap)}), bj});
          }
          first += n;
        }
        const int64_t items = static_cast<int64_t>(tiles.size());
        for (int64_t item = ga.worker; item < items; item += ga.workers) {
          const auto [g, m0, m1, bj] = tiles[item];
          const int64_t n0 = bj * ga.bn, n1 = std::min<int64_t>(N, n0 + ga.bn);
          for (int64_t r = m0; r < m1; ++r) {
            for (int64_t c = n0; c < n1; ++c) {
              double acc = 0;
              for (int64_t k = 0; k < K; ++k)
                acc += buf(x)[flat(x, r, k)] * buf(w)[flat(w, g, k, c)];
              if (ga.fn >= 0) acc = fn(ga.fn, {acc});
              buf(y)[flat(y, r, c)] = acc;
            }
          }
        }
        return;
      }
      case TaskKind::kMapTile:
      case TaskKind::kCopy: {
        const bool is_map = t.kind == TaskKind::kMapTile;
        const size_t nin = t.views.size() - 1;
        const View& y = t.views[nin];
        const int64_t row = product(y.shape, 1);
        std::vector<double> in(nin);
        // map_tile's arguments start like copy's: {r0, r1[, fn]}.
        const abi::MapTileArgs m = args_as<abi::MapTileArgs>(t);
        for (int64_t e = m.r0 * row; e < m.r1 * row; ++e) {
          for (size_t i = 0; i < nin; ++i) in[i] = buf(t.views[i])[t.views[i].offset + e];
          buf(y)[y.offset + e] = is_map ? fn(m.fn, in) : in[0];
        }
        return;
      }
      case TaskKind::kReduceTile: {
        const View &x = t.views[0], &y = t.views[1];
        const abi::ReduceTileArgs rt = args_as<abi::ReduceTileArgs>(t);
        const int64_t axis = rt.axis, op = rt.op;
        const int64_t inner = product(x.shape, axis + 1), n = x.shape[axis];
        for (int64_t e = rt.y0; e < rt.y1; ++e) {
          const int64_t outer = e / inner, in = e % inner;
          double acc = buf(x)[x.offset + (outer * n) * inner + in];
          for (int64_t k = 1; k < n; ++k)
            acc = reduce2(op, acc, buf(x)[x.offset + (outer * n + k) * inner + in]);
          buf(y)[y.offset + e] = acc;
        }
        return;
      }
      case TaskKind::kAttentionTile: {
        const View &q = t.views[0], &k = t.views[1], &v = t.views[2], &o = t.views[3];
        const abi::AttentionTileArgs at = args_as<abi::AttentionTileArgs>(t);
        const int64_t l = at.l, Sk = k.shape[1], D = q.shape[2], Dv = v.shape[2];
        const bool causal = at.causal, acc_on = at.accumulate, first = at.first, last = at.last;
        double scale = 0;
        std::memcpy(&scale, &at.scale_bits, sizeof(scale));
        // A tile that sees no key and neither opens nor closes its merge returns at once, as on
        // the device.
        if (acc_on && !first && !last && causal && at.q1 + at.causal_offset <= 0) return;
        for (int64_t qi = at.q0; qi < at.q1; ++qi) {
          double m = -std::numeric_limits<double>::infinity(), sum = 0;
          std::vector<double> acc(Dv, 0);
          if (acc_on && !first) {
            m = buf(t.views[5])[flat(t.views[5], l, qi, 0)];
            sum = buf(t.views[6])[flat(t.views[6], l, qi, 0)];
            for (int64_t d = 0; d < Dv; ++d) acc[d] = buf(t.views[4])[flat(t.views[4], l, qi, d)];
          }
          for (int64_t j = 0; j < Sk; ++j) {
            if (causal && j > qi + at.causal_offset) continue;
            double s = 0;
            const int64_t qo = flat(q, l, qi, 0), ko = flat(k, l, j, 0);
            const std::vector<double>& qv = buf(q);
            const std::vector<double>& kv = buf(k);
            for (int64_t d = 0; d < D; ++d) s += qv[qo + d] * kv[ko + d];
            s *= scale;
            const double m_new = std::max(m, s);
            const double corr = std::isinf(m) ? 0 : std::exp(m - m_new);
            const double p = std::exp(s - m_new);
            sum = sum * corr + p;
            for (int64_t d = 0; d < Dv; ++d) acc[d] = acc[d] * corr + p * buf(v)[flat(v, l, j, d)];
            m = m_new;
          }
          if (acc_on) {
            buf(t.views[5])[flat(t.views[5], l, qi, 0)] = m;
            buf(t.views[6])[flat(t.views[6], l, qi, 0)] = sum;
            for (int64_t d = 0; d < Dv; ++d) buf(t.views[4])[flat(t.views[4], l, qi, d)] = acc[d];
          }
          if (last) {
            // A query that saw no key (causal, every key after it) gets zeros.
            for (int64_t d = 0; d < Dv; ++d) buf(o)[flat(o, l, qi, d)] = sum > 0 ? acc[d] / sum : 0;
          }
        }
        return;
      }
      case TaskKind::kSend: {
        std::vector<int64_t> lo, hi, lo2, hi2;
        size_t pos = 0;
        read_range(t.args, &pos, &lo, &hi);
        if (pos < t.args.size()) {
          read_range(t.args, &pos, &lo2, &hi2);
        } else {
          lo2 = lo;
          hi2 = hi;
        }
        const View &src = t.views[0], &dst = t.views[1];
        std::vector<double>& from = buf(src);
        std::vector<double>& to = buf(dst);
        for_rows(src, lo, hi, dst, lo2, [&](int64_t a, int64_t b, int64_t n) {
          for (int64_t k = 0; k < n; ++k) to[b + k] = from[a + k];
        });
        return;
      }
      case TaskKind::kReduceSlots: {
        const abi::ReduceSlotsHead head = args_as<abi::ReduceSlotsHead>(t);
        const int64_t op = head.op, self = head.self;
        const bool out_x = head.out_in_x_coords;
        std::vector<int64_t> xlo, xhi, lo, hi;
        size_t pos = sizeof(abi::ReduceSlotsHead) / 8;
        read_range(t.args, &pos, &xlo, &xhi);
        read_range(t.args, &pos, &lo, &hi);
        const View &own = t.views[0], &slots = t.views[1], &out = t.views[2];
        const int64_t slot_elems = product(slots.shape, 1);
        View one = slots;
        one.shape.erase(one.shape.begin());
        // The reduction over the box, row by row: own's x box first, then every other slot.
        std::vector<double> acc;
        for_rows(own, xlo, xhi, own, xlo, [&](int64_t a, int64_t, int64_t n) {
          for (int64_t k = 0; k < n; ++k) acc.push_back(buf(own)[a + k]);
        });
        for (int64_t s = 0; s < static_cast<int64_t>(slots.shape[0]); ++s) {
          if (s == self) continue;
          View sv = one;
          sv.offset = slots.offset + s * slot_elems;
          size_t i = 0;
          for_rows(sv, lo, hi, sv, lo, [&](int64_t a, int64_t, int64_t n) {
            for (int64_t k = 0; k < n; ++k, ++i) acc[i] = reduce2(op, acc[i], buf(sv)[a + k]);
          });
        }
        size_t i = 0;
        const std::vector<int64_t>& olo = out_x ? xlo : lo;
        const std::vector<int64_t>& ohi = out_x ? xhi : hi;
        for_rows(out, olo, ohi, out, olo, [&](int64_t a, int64_t, int64_t n) {
          for (int64_t k = 0; k < n; ++k, ++i) buf(out)[a + k] = acc[i];
        });
        return;
      }
      case TaskKind::kA2aCounts: {
        const View& route = t.views[0];
        const int64_t E = args_as<abi::A2aCountsArgs>(t).experts;
        std::vector<double> cnt(E, 0);
        for (int64_t i = 0; i < product(route.shape); ++i)
          cnt[static_cast<int64_t>(buf(route)[route.offset + i])] += 1;
        for (size_t d = 1; d < t.views.size(); ++d) {
          const View& xc = t.views[d];
          for (int64_t e = 0; e < E; ++e) buf(xc)[flat(xc, t.rank, e)] = cnt[e];
        }
        return;
      }
      case TaskKind::kA2aSend: {
        const View &x = t.views[0], &route = t.views[1], &xc = t.views[2];
        const abi::A2aSendArgs sa = args_as<abi::A2aSendArgs>(t);
        const int64_t r0 = sa.r0, r1 = sa.r1, E = sa.experts, K = sa.k, R = p_.ranks, per = E / R;
        const int64_t H = x.shape[1];
        for (int64_t tok = r0; tok < r1; ++tok) {
          for (int64_t k = 0; k < K; ++k) {
            const int64_t e = static_cast<int64_t>(buf(route)[flat(route, tok, k)]);
            const int64_t d = e / per, le = e % per;
            int64_t pos = 0;
            for (int64_t e2 = d * per; e2 < d * per + le; ++e2) {
              for (int64_t s = 0; s < R; ++s) pos += static_cast<int64_t>(buf(xc)[flat(xc, s, e2)]);
            }
            for (int64_t s = 0; s < t.rank; ++s)
              pos += static_cast<int64_t>(buf(xc)[flat(xc, s, e)]);
            for (int64_t i = 0; i < tok * K + k; ++i)
              pos += static_cast<int64_t>(buf(route)[route.offset + i]) == e;
            const View& y = t.views[3 + d];
            const View& origin = t.views[3 + R + d];
            for (int64_t h = 0; h < H; ++h) buf(y)[flat(y, pos, h)] = buf(x)[flat(x, tok, h)];
            buf(origin)[flat(origin, pos, 0)] = static_cast<double>(t.rank);
            buf(origin)[flat(origin, pos, 1)] = static_cast<double>(tok);
            buf(origin)[flat(origin, pos, 2)] = static_cast<double>(k);
          }
        }
        return;
      }
      case TaskKind::kA2aFinish: {
        const View &xc = t.views[0], &counts = t.views[1];
        const int64_t E = args_as<abi::ExpertsArgs>(t).experts, per = E / p_.ranks;
        for (int64_t s = 0; s < p_.ranks; ++s) {
          for (int64_t le = 0; le < per; ++le)
            buf(counts)[flat(counts, s, le)] = buf(xc)[flat(xc, s, t.rank * per + le)];
        }
        return;
      }
      case TaskKind::kCombineSend: {
        const View &y = t.views[0], &origin = t.views[1], &xc = t.views[2];
        const abi::CombineSendArgs ca = args_as<abi::CombineSendArgs>(t);
        const int64_t per = ca.experts / p_.ranks, H = y.shape[1];
        int64_t total = 0;
        for (int64_t s = 0; s < p_.ranks; ++s) {
          for (int64_t le = 0; le < per; ++le)
            total += static_cast<int64_t>(buf(xc)[flat(xc, s, t.rank * per + le)]);
        }
        const int64_t p1 = total * (ca.part + 1) / ca.parts;
        for (int64_t p = total * ca.part / ca.parts; p < p1; ++p) {
          const int64_t s = static_cast<int64_t>(buf(origin)[flat(origin, p, 0)]);
          const int64_t tok = static_cast<int64_t>(buf(origin)[flat(origin, p, 1)]);
          const int64_t k = static_cast<int64_t>(buf(origin)[flat(origin, p, 2)]);
          const View& back = t.views[3 + s];
          for (int64_t h = 0; h < H; ++h) buf(back)[flat(back, tok, k, h)] = buf(y)[flat(y, p, h)];
        }
        return;
      }
      case TaskKind::kCombineReduce: {
        const View &back = t.views[0], &w = t.views[1], &out = t.views[2];
        const int64_t K = back.shape[1], H = back.shape[2];
        const abi::CombineReduceArgs cr = args_as<abi::CombineReduceArgs>(t);
        for (int64_t tok = cr.r0; tok < cr.r1; ++tok) {
          for (int64_t h = 0; h < H; ++h) {
            double acc = 0;
            for (int64_t k = 0; k < K; ++k)
              acc += (cr.has_weights ? buf(w)[flat(w, tok, k)] : 1.0) *
                     buf(back)[flat(back, tok, k, h)];
            buf(out)[flat(out, tok, h)] = acc;
          }
        }
        return;
      }
    }
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
  for (const compiler::OpInstance& op : plan.source->ops) {
    if (op.kind == compiler::OpKind::kAllToAll)
      routes[op.tensor_args.at("route")] = op.ints.at("experts");
  }
  return [&plan, seed, routes, routing](int rank, int launch, RankData& data) {
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
