// a2a_counts on rank s: the MoE dispatch's row counts: how many of this rank's routed rows go to
// each expert, written into row s of every rank's xcounts. Views {route_s, xcounts_d...} (abi.h,
// A2aCountsArgs). Device code: templates/mkc/moe.cuh.
#include "compiler/kinds/kind.h"
#include "compiler/kinds/kinds.h"
#include "compiler/kinds/view_math.h"

namespace mkc::kinds {
namespace {

class A2aCounts final : public Kind {
 public:
  A2aCounts() : Kind(TaskKind::kA2aCounts) {}
  // templates/mkc/moe.cuh: the expert histogram (moe_bins, kMoeBins ints).
  int static_smem(const Source&, const Task&) const override { return 2048 * 4; }

  size_t fixed_args() const override { return sizeof(abi::A2aCountsArgs) / 8; }

  std::vector<Touch> touches(const Task& t) const override {
    std::vector<Touch> out{Touch{0, {}, {}, false}};
    for (size_t v = 1; v < t.views.size(); ++v)
      out.push_back(Touch{static_cast<int>(v), {t.rank}, {t.rank + 1}, true});
    return out;
  }

  void execute(const Memory& mem, const Task& t) const override {
    const View& route = t.views[0];
    const int64_t E = plan::args_as<abi::A2aCountsArgs>(t).experts;
    std::vector<double> cnt(E, 0);
    for (int64_t i = 0; i < product(route.shape); ++i)
      cnt[static_cast<int64_t>(mem.of(route)[route.offset + i])] += 1;
    for (size_t d = 1; d < t.views.size(); ++d) {
      const View& xc = t.views[d];
      for (int64_t e = 0; e < E; ++e) mem.of(xc)[flat(xc, t.rank, e)] = cnt[e];
    }
  }

  void emit(Source& s, const Task&) const override {
    s.line("  mkc::a2a_counts(a, v, args, kBuffers, kRanks);");
  }

  // Its requests name its own rank's rows (the proxy reads this rank's heap and writes the
  // destination's).
  bool may_write_other_node(const Task&, const Box&) const override { return true; }
};

}  // namespace

template <>
const Kind& kind<TaskKind::kA2aCounts>() {
  static const A2aCounts k;
  return k;
}

}  // namespace mkc::kinds
