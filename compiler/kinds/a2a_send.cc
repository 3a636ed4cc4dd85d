// a2a_send on rank s: rows [r0, r1) of X go to their experts' ranks, at the place the
// expert-major, then source-rank, then source-row order gives them, with their origin (rank,
// row, k). Views {X_s, route_s, xcounts_s, Y_d..., origin_d...} (abi.h, A2aSendArgs). Device
// code: templates/mkc/moe.cuh.
#include <fmt/format.h>

#include "compiler/kinds/kind.h"
#include "compiler/kinds/kinds.h"
#include "compiler/kinds/view_math.h"

namespace mkc::kinds {
namespace {

class A2aSend final : public Kind {
 public:
  A2aSend() : Kind(TaskKind::kA2aSend) {}
  // templates/mkc/moe.cuh: moe_bins and `before` (kMoeBins ints each), `place` (kSendChunk
  // ints), `carry`, block_exclusive_scan's warp sums.
  int static_smem(const Source&, const Task&) const override {
    return 2048 * 4 * 2 + 1024 * 4 + 3 * 8 + 32 * 4;
  }

  bool runs_anywhere() const override { return true; }
  size_t fixed_args() const override { return sizeof(abi::A2aSendArgs) / 8; }

  std::vector<Touch> touches(const Task& t) const override {
    const abi::A2aSendArgs a = plan::args_as<abi::A2aSendArgs>(t);
    std::vector<Touch> out{Touch{0, {a.r0}, {a.r1}, false}, Touch{1, {a.r0}, {a.r1}, false},
                           Touch{2, {}, {}, false}};
    for (size_t v = 3; v < t.views.size(); ++v)
      out.push_back(Touch{static_cast<int>(v), {}, {}, true});
    return out;
  }

  void execute(const Memory& mem, const Task& t) const override {
    const auto buf = [&](const View& v) -> std::vector<double>& { return mem.of(v); };
    const View &x = t.views[0], &route = t.views[1], &xc = t.views[2];
    const abi::A2aSendArgs sa = plan::args_as<abi::A2aSendArgs>(t);
    const int64_t r0 = sa.r0, r1 = sa.r1, E = sa.experts, K = sa.k, R = mem.plan.ranks, per = E / R;
    const int64_t H = x.shape[1];
    for (int64_t tok = r0; tok < r1; ++tok) {
      for (int64_t k = 0; k < K; ++k) {
        const int64_t e = static_cast<int64_t>(buf(route)[flat(route, tok, k)]);
        const int64_t d = e / per, le = e % per;
        int64_t pos = 0;
        for (int64_t e2 = d * per; e2 < d * per + le; ++e2) {
          for (int64_t s = 0; s < R; ++s) pos += static_cast<int64_t>(buf(xc)[flat(xc, s, e2)]);
        }
        for (int64_t s = 0; s < t.rank; ++s) pos += static_cast<int64_t>(buf(xc)[flat(xc, s, e)]);
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
  }

  void emit(Source& s, const Task& t) const override {
    s.line(fmt::format("  mkc::a2a_send<{}>(a, v, args, kBuffers, kRanks);", s.type_of(t, 0)));
  }

  // Its requests name its own rank's rows (the proxy reads this rank's heap and writes the
  // destination's).
  bool may_write_other_node(const Task&, const Box&) const override { return true; }
};

}  // namespace

template <>
const Kind& kind<TaskKind::kA2aSend>() {
  static const A2aSend k;
  return k;
}

}  // namespace mkc::kinds
