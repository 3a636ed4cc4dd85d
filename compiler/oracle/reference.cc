#include "compiler/oracle/reference.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <map>
#include <tuple>

#include "support/error.h"
#include "support/parallel.h"

namespace mkc::plan {
namespace {

using compiler::OpInstance;
using compiler::OpKind;
using compiler::TensorUse;

int64_t product(const std::vector<int64_t>& v, size_t from = 0) {
  int64_t p = 1;
  for (size_t i = from; i < v.size(); ++i) p *= v[i];
  return p;
}

// A tensor use's elements on one rank: base offset into the tensor's storage.
struct Ref {
  std::vector<double>* data;
  int64_t offset;
  std::vector<int64_t> shape;
  double& operator[](int64_t i) const { return (*data)[offset + i]; }
  int64_t size() const { return product(shape); }
};

class Evaluator {
 public:
  Evaluator(const compiler::CheckedSchedule& s, const HostFns& fns, const BatchFns& batch,
            std::vector<std::vector<std::vector<double>>>& d)
      : s_(s), d_(d), R_(s.ranks) {
    for (const compiler::DeviceFunction& f : s.device_fns) {
      if (auto b = batch.find(f.name); b != batch.end()) {
        fns_.push_back(b->second);
        continue;
      }
      auto it = fns.find(f.name);
      if (it == fns.end())
        throw UserError(fmt::format("no host implementation of device function `{}`", f.name));
      fns_.push_back(
          [fn = it->second, arity = f.params.size()](const std::vector<double>& args, size_t n) {
            std::vector<double> out(n), one(arity);
            for (size_t e = 0; e < n; ++e) {
              for (size_t k = 0; k < arity; ++k) one[k] = args[e * arity + k];
              out[e] = fn(one);
            }
            return out;
          });
    }
  }

  void run() {
    for (size_t i = 0; i < s_.ops.size(); ++i) op(static_cast<int>(i));
  }

 private:
  Ref ref(const TensorUse& u, int64_t rank) {
    const compiler::Tensor& t = s_.tensors[u.tensor];
    int64_t off = 0;
    for (size_t i = 0; i < u.index.size(); ++i) off += u.index[i] * product(t.shape, i + 1);
    return Ref{&d_[rank][u.tensor], off, u.shape};
  }
  Ref whole(int tensor, int64_t rank) {
    return Ref{&d_[rank][tensor], 0, s_.tensors[tensor].shape};
  }

  // A reduction's op as a code (0 sum, 1 max, 2 min), looked up once per operation, not per
  // element.
  static int red_code(const std::string& op) { return op == "sum" ? 0 : op == "max" ? 1 : 2; }
  static double red(int op, double a, double b) {
    return op == 0 ? a + b : op == 1 ? std::max(a, b) : std::min(a, b);
  }

  void op(int i) {
    const OpInstance& op = s_.ops[i];
    switch (op.kind) {
      case OpKind::kGemm:
        for (int64_t r = 0; r < R_; ++r) {
          Ref a = ref(op.inputs[0], r), b = ref(op.inputs[1], r), c = ref(op.outputs[0], r);
          const int64_t M = a.shape[0], K = a.shape[1], N = b.shape[1];
          const auto bias = op.tensor_args.find("bias");
          std::vector<double> acc(static_cast<size_t>(M * N));
          for (int64_t m = 0; m < M; ++m) {
            for (int64_t n = 0; n < N; ++n) {
              double sum = 0;
              for (int64_t k = 0; k < K; ++k) sum += a[m * K + k] * b[k * N + n];
              if (bias != op.tensor_args.end()) sum += whole(bias->second, r)[n];
              acc[m * N + n] = sum;
            }
          }
          epilogue(op, acc);
          for (int64_t e = 0; e < M * N; ++e) c[e] = acc[e];
        }
        return;
      case OpKind::kGroupedGemm:
        for (int64_t r = 0; r < R_; ++r) {
          Ref x = ref(op.inputs[0], r), w = ref(op.inputs[1], r), y = ref(op.outputs[0], r),
              cn = whole(op.tensor_args.at("counts"), r);
          const int64_t G = w.shape[0], K = w.shape[1], N = w.shape[2];
          int64_t row = 0;
          std::vector<double> acc;
          for (int64_t g = 0; g < G; ++g) {
            int64_t rows = 0;
            for (int64_t l = 0; l < cn.size() / G; ++l) rows += static_cast<int64_t>(cn[l * G + g]);
            for (int64_t q = row; q < row + rows; ++q) {
              for (int64_t n = 0; n < N; ++n) {
                double sum = 0;
                for (int64_t k = 0; k < K; ++k) sum += x[q * K + k] * w[(g * K + k) * N + n];
                acc.push_back(sum);
              }
            }
            row += rows;
          }
          epilogue(op, acc);
          for (size_t e = 0; e < acc.size(); ++e) y[static_cast<int64_t>(e)] = acc[e];
        }
        return;
      case OpKind::kMap:
      case OpKind::kCopy:
        for (int64_t r = 0; r < R_; ++r) {
          Ref y = ref(op.outputs[0], r);
          std::vector<Ref> xs;
          for (const TensorUse& u : op.inputs) xs.push_back(ref(u, r));
          // Read everything first: an operation may read and write one tensor.
          const size_t arity = xs.size(), n = static_cast<size_t>(y.size());
          std::vector<double> args(n * arity);
          for (size_t e = 0; e < n; ++e) {
            for (size_t k = 0; k < arity; ++k) args[e * arity + k] = xs[k][static_cast<int64_t>(e)];
          }
          const std::vector<double> out =
              op.kind == OpKind::kMap ? fns_[op.device_fn](args, n) : args;
          for (size_t e = 0; e < n; ++e) y[static_cast<int64_t>(e)] = out[e];
        }
        return;
      case OpKind::kReduce:
        for (int64_t r = 0; r < R_; ++r) {
          Ref x = ref(op.inputs[0], r), y = ref(op.outputs[0], r);
          const int64_t axis = op.ints.at("axis"), inner = product(x.shape, axis + 1),
                        n = x.shape[axis], ny = y.size();
          const int code = red_code(op.reduce_op);
          for (int64_t e = 0; e < ny; ++e) {
            const int64_t outer = e / inner, in = e % inner;
            double acc = x[outer * n * inner + in];
            for (int64_t k = 1; k < n; ++k) acc = red(code, acc, x[(outer * n + k) * inner + in]);
            y[e] = acc;
          }
        }
        return;
      case OpKind::kAttention:
        attention(i);
        return;
      case OpKind::kAllReduce:
      case OpKind::kReduceScatter: {
        const int64_t n = product(op.inputs[0].shape);
        std::vector<Ref> xs;
        for (int64_t r = 0; r < R_; ++r) xs.push_back(ref(op.inputs[0], r));
        const int code = red_code(op.reduce_op);
        std::vector<double> total(n);
        parallel_for(n, [&](int64_t e0, int64_t e1) {
          for (int64_t e = e0; e < e1; ++e) {
            double acc = xs[0][e];
            for (int64_t r = 1; r < R_; ++r) acc = red(code, acc, xs[r][e]);
            total[e] = acc;
          }
        });
        const TensorUse& out = op.outputs.empty() ? op.inputs[0] : op.outputs[0];
        const int64_t shard = product(out.shape);
        for (int64_t r = 0; r < R_; ++r) {
          Ref y = ref(out, r);
          const int64_t base = op.kind == OpKind::kAllReduce ? 0 : r * shard;
          parallel_for(shard, [&](int64_t e0, int64_t e1) {
            for (int64_t e = e0; e < e1; ++e) y[e] = total[base + e];
          });
        }
        return;
      }
      case OpKind::kAllGather: {
        const int64_t part = product(op.inputs[0].shape);
        std::vector<double> all(part * R_);
        for (int64_t r = 0; r < R_; ++r) {
          Ref x = ref(op.inputs[0], r);
          parallel_for(part, [&](int64_t e0, int64_t e1) {
            for (int64_t e = e0; e < e1; ++e) all[r * part + e] = x[e];
          });
        }
        for (int64_t r = 0; r < R_; ++r) {
          Ref y = ref(op.outputs[0], r);
          parallel_for(part * R_, [&](int64_t e0, int64_t e1) {
            for (int64_t e = e0; e < e1; ++e) y[e] = all[e];
          });
        }
        return;
      }
      case OpKind::kShift:
      case OpKind::kPut: {
        std::vector<std::vector<double>> src(R_);
        for (int64_t s = 0; s < R_; ++s) {
          Ref x = ref(op.inputs[0], s);
          for (int64_t e = 0; e < x.size(); ++e) src[s].push_back(x[e]);
        }
        for (int64_t s = 0; s < R_; ++s) {
          const int64_t d = op.kind == OpKind::kShift
                                ? (((s + op.ints.at("by")) % R_) + R_) % R_
                                : ((compiler::evaluate(op.outputs[0].peer, s, s_) % R_) + R_) % R_;
          Ref y = ref(op.outputs[0], d);
          for (size_t e = 0; e < src[s].size(); ++e) y[static_cast<int64_t>(e)] = src[s][e];
        }
        return;
      }
      case OpKind::kSignal:
        return;
      case OpKind::kAllToAll:
        alltoall(i);
        return;
      case OpKind::kCombine:
        combine(i);
        return;
    }
  }

  void attention(int i) {
    const OpInstance& op = s_.ops[i];
    const bool acc = compiler::accumulates(op);
    const bool first = op.first_of_group, last = op.last_of_group;
    const size_t nd = op.inputs[0].shape.size();
    const int64_t D = op.inputs[0].shape[nd - 1];
    const double scale = op.floats.at("scale");  // the checker sets the default
    const bool causal = op.ints.count("causal") && op.ints.at("causal");
    for (int64_t r = 0; r < R_; ++r) {
      Ref q = ref(op.inputs[0], r), k = ref(op.inputs[1], r), v = ref(op.inputs[2], r),
          o = ref(op.outputs[0], r);
      const int64_t L = product(std::vector<int64_t>(q.shape.begin(), q.shape.end() - 2));
      const int64_t Sq = q.shape[nd - 2], Sk = k.shape[nd - 2], Dv = v.shape[nd - 1];
      // Keys and values seen so far by this merge group (the accumulating attentions into this
      // slice of O), [l][j], each with the first query of its instance that sees it (causal: key
      // j of an instance is visible to query i when j <= i + offset).
      auto& seen = seen_[{op.outputs[0].tensor, op.outputs[0].index, r}];
      if (!acc || first) seen.clear();
      if (seen.empty()) seen.resize(L);
      const int64_t offset = causal ? compiler::causal_offset(op, r, s_, Sq, Sk) : 0;
      // Packed sequences (`seqlens`, never merged): position p's sequence, -1 past the last.
      std::vector<int64_t> seq_of(static_cast<size_t>(std::max(Sq, Sk)), 0);
      if (const auto it = op.tensor_args.find("seqlens"); it != op.tensor_args.end()) {
        Ref cu = whole(it->second, r);
        std::fill(seq_of.begin(), seq_of.end(), -1);
        for (int64_t d = 0; d + 1 < cu.size(); ++d) {
          for (auto p = static_cast<int64_t>(cu[d]); p < static_cast<int64_t>(cu[d + 1]); ++p) {
            if (p >= 0 && p < static_cast<int64_t>(seq_of.size())) seq_of[p] = d;
          }
        }
      }
      for (int64_t l = 0; l < L; ++l) {
        for (int64_t j = 0; j < Sk; ++j) {
          SeenKey key;
          key.k.resize(D);
          key.v.resize(Dv);
          for (int64_t d = 0; d < D; ++d) key.k[d] = k[(l * Sk + j) * D + d];
          for (int64_t d = 0; d < Dv; ++d) key.v[d] = v[(l * Sk + j) * Dv + d];
          key.first_query = causal ? j - offset : std::numeric_limits<int64_t>::min();
          key.seq = seq_of[j];
          seen[l].push_back(std::move(key));
        }
      }
      if (acc && !last) continue;
      for (int64_t l = 0; l < L; ++l) {
        for (int64_t qi = 0; qi < Sq; ++qi) {
          std::vector<double> s;
          double mx = -std::numeric_limits<double>::infinity();
          for (size_t j = 0; j < seen[l].size(); ++j) {
            if (qi < seen[l][j].first_query || seen[l][j].seq != seq_of[qi] || seq_of[qi] < 0) {
              s.push_back(-std::numeric_limits<double>::infinity());
              continue;
            }
            double dot = 0;
            for (int64_t d = 0; d < D; ++d) dot += q[(l * Sq + qi) * D + d] * seen[l][j].k[d];
            s.push_back(dot * scale);
            mx = std::max(mx, s.back());
          }
          double sum = 0;
          std::vector<double> out(Dv, 0);
          for (size_t j = 0; j < s.size(); ++j) {
            // A masked key adds nothing (not 0 x its value: a padding row may hold anything).
            if (std::isinf(s[j])) continue;
            const double p = std::exp(s[j] - mx);
            sum += p;
            for (int64_t d = 0; d < Dv; ++d) out[d] += p * seen[l][j].v[d];
          }
          // A query that sees no key gets zeros.
          for (int64_t d = 0; d < Dv; ++d) o[(l * Sq + qi) * Dv + d] = sum > 0 ? out[d] / sum : 0;
        }
      }
      seen.clear();
    }
  }

  // Rows arrive expert-major, then by source rank, then in the source's (row, k) order.
  void alltoall(int i) {
    const OpInstance& op = s_.ops[i];
    const int64_t E = op.ints.at("experts"), per = E / R_;
    const int route_t = op.tensor_args.at("route");
    const int64_t K = s_.tensors[route_t].shape[1], H = op.inputs[0].shape[1];
    auto& where = placed_[i];  // (source rank, row, k) -> (destination rank, row)
    for (int64_t d = 0; d < R_; ++d) {
      Ref y = ref(op.outputs[0], d), counts = whole(op.tensor_args.at("counts"), d);
      int64_t pos = 0;
      for (int64_t le = 0; le < per; ++le) {
        const int64_t e = d * per + le;
        for (int64_t s = 0; s < R_; ++s) {
          Ref x = ref(op.inputs[0], s), route = whole(route_t, s);
          int64_t n = 0;
          for (int64_t t = 0; t < x.shape[0]; ++t) {
            for (int64_t k = 0; k < K; ++k) {
              if (static_cast<int64_t>(route[t * K + k]) != e) continue;
              for (int64_t h = 0; h < H; ++h) y[pos * H + h] = x[t * H + h];
              where[{s, t, k}] = {d, pos};
              ++pos;
              ++n;
            }
          }
          counts[s * per + le] = static_cast<double>(n);
        }
      }
    }
  }

  void combine(int i) {
    const OpInstance& op = s_.ops[i];
    const auto& where = placed_.at(op.dispatch_op);
    const auto w = op.tensor_args.find("weights");
    for (int64_t s = 0; s < R_; ++s) {
      Ref out = ref(op.outputs[0], s);
      const int64_t T = out.shape[0], H = out.shape[1];
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t h = 0; h < H; ++h) out[t * H + h] = 0;
      }
      for (const auto& [key, dst] : where) {
        const auto [src, t, k] = key;
        if (src != s) continue;
        Ref y = ref(op.inputs[0], dst.first);
        const double weight = w != op.tensor_args.end()
                                  ? whole(w->second, s)[t * whole(w->second, s).shape[1] + k]
                                  : 1.0;
        for (int64_t h = 0; h < H; ++h) out[t * H + h] += weight * y[dst.second * H + h];
      }
    }
  }

  const compiler::CheckedSchedule& s_;
  std::vector<std::vector<std::vector<double>>>& d_;
  int64_t R_;
  // A GEMM's epilogue function over its accumulators, all at once.
  void epilogue(const OpInstance& op, std::vector<double>& acc) {
    if (op.device_fn >= 0) acc = fns_[op.device_fn](acc, acc.size());
  }

  std::vector<BatchFn> fns_;
  // A key (and its value) an accumulating attention has seen, and the first query of its
  // instance that sees it (causal mask).
  struct SeenKey {
    std::vector<double> k, v;
    int64_t first_query;
    int64_t seq;  // its packed sequence (`seqlens`), else 0
  };
  // By output slice (tensor, index) and rank.
  std::map<std::tuple<int, std::vector<int64_t>, int64_t>, std::vector<std::vector<SeenKey>>> seen_;
  std::map<int, std::map<std::tuple<int64_t, int64_t, int64_t>, std::pair<int64_t, int64_t>>>
      placed_;
};

}  // namespace

void reference(const compiler::CheckedSchedule& s, const HostFns& fns, const BatchFns& batch,
               std::vector<std::vector<std::vector<double>>>& data) {
  Evaluator(s, fns, batch, data).run();
}

void reference(const compiler::CheckedSchedule& s, const HostFns& fns,
               std::vector<std::vector<std::vector<double>>>& data) {
  reference(s, fns, {}, data);
}

}  // namespace mkc::plan
