// copy: rows [r0, r1) of the source view into the same rows of the destination. Views {X, Y}
// (abi.h, CopyArgs). Y's rows may be longer than X's (a GEMM's staged operand,
// compiler/passes/lower.h, GemmStaging): each row of X goes to the start of Y's, and the rest of
// Y's row is no data of X's (the device may zero the rest of the row's last 16-byte word; the
// staged operands are zero there anyway). Device code: templates/mkc/movement.cuh (copy_rows).
#include <fmt/format.h>

#include <algorithm>

#include "compiler/kinds/kind.h"
#include "compiler/kinds/kinds.h"
#include "compiler/kinds/view_math.h"

namespace mkc::kinds {
namespace {

class Copy final : public Kind {
 public:
  Copy() : Kind(TaskKind::kCopy) {}

  size_t fixed_args() const override { return sizeof(abi::CopyArgs) / 8; }

  std::vector<Touch> touches(const Task& t) const override {
    const abi::CopyArgs c = plan::args_as<abi::CopyArgs>(t);
    return rows_of_every_view(t, c.r0, c.r1);
  }

  void execute(const Memory& mem, const Task& t) const override {
    const View &x = t.views[0], &y = t.views.back();
    const abi::CopyArgs c = plan::args_as<abi::CopyArgs>(t);
    const int64_t xrow = product(x.shape, 1), yrow = product(y.shape, 1);
    const std::vector<double>& from = mem.of(x);
    std::vector<double>& to = mem.of(y);
    for (int64_t r = c.r0; r < c.r1; ++r)
      std::copy_n(from.begin() + x.offset + r * xrow, xrow, to.begin() + y.offset + r * yrow);
  }

  void emit(Source& s, const Task& t) const override {
    s.line(fmt::format("  mkc::copy_rows<{}>(a, v, args, kBuffers);", s.type_of(t, 0)));
  }
};

}  // namespace

std::vector<Touch> rows_of_every_view(const Task& t, int64_t r0, int64_t r1) {
  std::vector<Touch> out;
  for (size_t v = 0; v + 1 < t.views.size(); ++v)
    out.push_back(Touch{static_cast<int>(v), {r0}, {r1}, false});
  out.push_back(Touch{static_cast<int>(t.views.size()) - 1, {r0}, {r1}, true});
  return out;
}

template <>
const Kind& kind<TaskKind::kCopy>() {
  static const Copy k;
  return k;
}

}  // namespace mkc::kinds
