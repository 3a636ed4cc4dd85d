// a2a_finish on rank d: the received rows' counts per source rank and local expert:
// counts[s, e] = xcounts[s, d * E / R + e]. Views {xcounts_d, counts_d} (abi.h, ExpertsArgs).
// Device code: templates/mkc/moe.cuh.
#include "compiler/kinds/kind.h"
#include "compiler/kinds/kinds.h"
#include "compiler/kinds/view_math.h"

namespace mkc::kinds {
namespace {

class A2aFinish final : public Kind {
 public:
  A2aFinish() : Kind(TaskKind::kA2aFinish) {}

  size_t fixed_args() const override { return sizeof(abi::ExpertsArgs) / 8; }

  std::vector<Touch> touches(const Task&) const override {
    return {Touch{0, {}, {}, false}, Touch{1, {}, {}, true}};
  }

  void execute(const Memory& mem, const Task& t) const override {
    const View &xc = t.views[0], &counts = t.views[1];
    const int64_t E = plan::args_as<abi::ExpertsArgs>(t).experts, per = E / mem.plan.ranks;
    for (int64_t s = 0; s < mem.plan.ranks; ++s) {
      for (int64_t le = 0; le < per; ++le)
        mem.of(counts)[flat(counts, s, le)] = mem.of(xc)[flat(xc, s, t.rank * per + le)];
    }
  }

  void emit(Source& s, const Task&) const override {
    s.line("  mkc::a2a_finish(a, v, args, kBuffers, kRanks);");
  }
};

}  // namespace

template <>
const Kind& kind<TaskKind::kA2aFinish>() {
  static const A2aFinish k;
  return k;
}

}  // namespace mkc::kinds
