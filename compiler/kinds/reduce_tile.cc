// reduce_tile: elements [y0, y1) of Y (flat) = op over `axis` of X. Views {X, Y} (abi.h,
// ReduceTileArgs). Device code: templates/mkc/reduce.cuh.
#include <fmt/format.h>

#include "compiler/kinds/kind.h"
#include "compiler/kinds/kinds.h"
#include "compiler/kinds/view_math.h"

namespace mkc::kinds {
namespace {

class ReduceTile final : public Kind {
 public:
  ReduceTile() : Kind(TaskKind::kReduceTile) {}

  size_t fixed_args() const override { return sizeof(abi::ReduceTileArgs) / 8; }

  std::vector<Touch> touches(const Task& t) const override {
    // Elements [y0, y1) of Y reduce over `axis` of X: when they are whole rows of Y, the rows of
    // X they come from; a run inside one row of a 2-D Y reduced over axis 0, that run in every
    // slice of X; else all of X.
    const abi::ReduceTileArgs r = plan::args_as<abi::ReduceTileArgs>(t);
    const std::vector<int64_t>& ys = t.views[1].shape;
    int64_t row = 1;
    for (size_t d = 1; d < ys.size(); ++d) row *= ys[d];
    std::vector<Touch> out;
    if (!ys.empty() && r.y0 % row == 0 && r.y1 % row == 0) {
      const int64_t r0 = r.y0 / row, r1 = r.y1 / row;
      if (r.axis == 0) {
        out.push_back(Touch{0, {0, r0}, {t.views[0].shape[0], r1}, false});
      } else {
        out.push_back(Touch{0, {r0}, {r1}, false});
      }
      out.push_back(Touch{1, {r0}, {r1}, true});
    } else if (r.axis == 0 && ys.size() == 2 && r.y0 < r.y1 && r.y0 / row == (r.y1 - 1) / row) {
      // A run inside one row of a 2-D Y: that run of the row in every slice.
      const int64_t y = r.y0 / row, c0 = r.y0 % row, c1 = c0 + (r.y1 - r.y0);
      out.push_back(Touch{0, {0, y, c0}, {t.views[0].shape[0], y + 1, c1}, false});
      out.push_back(Touch{1, {y, c0}, {y + 1, c1}, true});
    } else {
      out.push_back(Touch{0, {}, {}, false});
      out.push_back(Touch{1, {}, {}, true});
    }
    return out;
  }

  void execute(const Memory& mem, const Task& t) const override {
    const View &x = t.views[0], &y = t.views[1];
    const abi::ReduceTileArgs rt = plan::args_as<abi::ReduceTileArgs>(t);
    const int64_t axis = rt.axis, op = rt.op;
    const int64_t inner = product(x.shape, axis + 1), n = x.shape[axis];
    const std::vector<double>& xv = mem.of(x);
    std::vector<double>& yv = mem.of(y);
    for (int64_t e = rt.y0; e < rt.y1; ++e) {
      const int64_t outer = e / inner, in = e % inner;
      double acc = xv[x.offset + (outer * n) * inner + in];
      for (int64_t k = 1; k < n; ++k)
        acc = reduce2(op, acc, xv[x.offset + (outer * n + k) * inner + in]);
      yv[y.offset + e] = acc;
    }
  }

  void emit(Source& s, const Task& t) const override {
    s.line(fmt::format("  mkc::reduce_tile<{}, {}>(a, v, args, kBuffers);", s.type_of(t, 0),
                       s.type_of(t, 1)));
  }
};

}  // namespace

template <>
const Kind& kind<TaskKind::kReduceTile>() {
  static const ReduceTile k;
  return k;
}

}  // namespace mkc::kinds
