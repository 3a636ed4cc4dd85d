// combine_send on rank d: part `part` of `parts` of the received rows (known at run time:
// [total * part / parts, total * (part + 1) / parts)) goes back to back_s[t, k] of its origin.
// Views {Y_d, origin_d, xcounts_d, back_s...} (abi.h, CombineSendArgs). Device code:
// templates/mkc/moe.cuh.
#include <fmt/format.h>

#include "compiler/kinds/kind.h"
#include "compiler/kinds/kinds.h"
#include "compiler/kinds/view_math.h"

namespace mkc::kinds {
namespace {

class CombineSend final : public Kind {
 public:
  CombineSend() : Kind(TaskKind::kCombineSend) {}
  // templates/mkc/moe.cuh: the rows received.
  int static_smem(const Source&, const Task&) const override { return 8; }

  bool runs_anywhere() const override { return true; }
  size_t fixed_args() const override { return sizeof(abi::CombineSendArgs) / 8; }

  std::vector<Touch> touches(const Task& t) const override {
    std::vector<Touch> out;
    for (int v = 0; v < 3; ++v) out.push_back(Touch{v, {}, {}, false});
    for (size_t v = 3; v < t.views.size(); ++v)
      out.push_back(Touch{static_cast<int>(v), {}, {}, true});
    return out;
  }

  void execute(const Memory& mem, const Task& t) const override {
    const auto buf = [&](const View& v) -> std::vector<double>& { return mem.of(v); };
    const View &y = t.views[0], &origin = t.views[1], &xc = t.views[2];
    const abi::CombineSendArgs ca = plan::args_as<abi::CombineSendArgs>(t);
    const int64_t R = mem.plan.ranks, per = ca.experts / R, H = y.shape[1];
    int64_t total = 0;
    for (int64_t s = 0; s < R; ++s) {
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
  }

  // Whole boxes (the rows are known at run time), but each part moves its share of them.
  double interpreter_work(const Task& t, double touched) const override {
    return touched / static_cast<double>(plan::args_as<abi::CombineSendArgs>(t).parts);
  }

  void emit(Source& s, const Task& t) const override {
    s.line(fmt::format("  mkc::combine_send<{}>(a, v, args, kBuffers, kRanks);", s.type_of(t, 0)));
  }

  // Its requests name its own rank's rows (the proxy reads this rank's heap and writes the
  // destination's).
  bool may_write_other_node(const Task&, const Box&) const override { return true; }
};

}  // namespace

template <>
const Kind& kind<TaskKind::kCombineSend>() {
  static const CombineSend k;
  return k;
}

}  // namespace mkc::kinds
