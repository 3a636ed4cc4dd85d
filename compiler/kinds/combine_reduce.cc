// combine_reduce on rank s: Out[t] = sum_k W[t, k] * back[t, k] for rows [r0, r1) (weights 1
// without W). Views {back_s, W_s (or back_s), Out_s} (abi.h, CombineReduceArgs). Device code:
// templates/mkc/moe.cuh.
#include <fmt/format.h>

#include "compiler/kinds/kind.h"
#include "compiler/kinds/kinds.h"
#include "compiler/kinds/view_math.h"

namespace mkc::kinds {
namespace {

class CombineReduce final : public Kind {
 public:
  CombineReduce() : Kind(TaskKind::kCombineReduce) {}

  bool runs_anywhere() const override { return true; }
  size_t fixed_args() const override { return sizeof(abi::CombineReduceArgs) / 8; }

  std::vector<Touch> touches(const Task& t) const override {
    const abi::CombineReduceArgs c = plan::args_as<abi::CombineReduceArgs>(t);
    std::vector<Touch> out{Touch{0, {c.r0}, {c.r1}, false}};
    if (c.has_weights) out.push_back(Touch{1, {c.r0}, {c.r1}, false});
    out.push_back(Touch{2, {c.r0}, {c.r1}, true});
    return out;
  }

  void execute(const Memory& mem, const Task& t) const override {
    const View &back = t.views[0], &w = t.views[1], &out = t.views[2];
    const int64_t K = back.shape[1], H = back.shape[2];
    const abi::CombineReduceArgs cr = plan::args_as<abi::CombineReduceArgs>(t);
    for (int64_t tok = cr.r0; tok < cr.r1; ++tok) {
      for (int64_t h = 0; h < H; ++h) {
        double acc = 0;
        for (int64_t k = 0; k < K; ++k)
          acc += (cr.has_weights ? mem.of(w)[flat(w, tok, k)] : 1.0) *
                 mem.of(back)[flat(back, tok, k, h)];
        mem.of(out)[flat(out, tok, h)] = acc;
      }
    }
  }

  void emit(Source& s, const Task& t) const override {
    s.line(fmt::format("  mkc::combine_reduce<{}>(a, v, args, kBuffers);", s.type_of(t, 0)));
  }
};

}  // namespace

template <>
const Kind& kind<TaskKind::kCombineReduce>() {
  static const CombineReduce k;
  return k;
}

}  // namespace mkc::kinds
