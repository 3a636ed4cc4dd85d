// send: the box at range `src` of view 0 into view 1 (another rank's memory, or this rank's), at
// range `dst` when it follows, else at the same coordinates. Arguments: ranges (abi.h). Device
// code: templates/mkc/movement.cuh (send_box over NVLink, proxy_send_box into another node).
#include <fmt/format.h>

#include "compiler/kinds/kind.h"
#include "compiler/kinds/kinds.h"
#include "compiler/kinds/view_math.h"

namespace mkc::kinds {
namespace {

class Send final : public Kind {
 public:
  Send() : Kind(TaskKind::kSend) {}

  std::vector<Touch> touches(const Task& t) const override {
    int pos = 0;
    const abi::Range src = plan::read_range(t, &pos);
    std::vector<int64_t> lo(src.lo, src.lo + src.n), hi(src.hi, src.hi + src.n);
    std::vector<Touch> out;
    out.push_back(Touch{0, lo, hi, false});
    if (pos < static_cast<int>(t.args.size())) {
      const abi::Range dst = plan::read_range(t, &pos);
      for (int d = 0; d < src.n; ++d) {
        hi[d] = dst.lo[d] + (hi[d] - lo[d]);
        lo[d] = dst.lo[d];
      }
    }
    out.push_back(Touch{1, lo, hi, true});
    return out;
  }

  void execute(const Memory& mem, const Task& t) const override {
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
    std::vector<double>& from = mem.of(src);
    std::vector<double>& to = mem.of(dst);
    for_rows(src, lo, hi, dst, lo2, [&](int64_t a, int64_t b, int64_t n) {
      for (int64_t k = 0; k < n; ++k) to[b + k] = from[a + k];
    });
  }

  std::string key_tag(const Source& s, const Task& t) const override {
    return s.writes_other_node(t) ? ":proxy" : "";
  }

  void emit(Source& s, const Task& t) const override {
    s.line(fmt::format("  mkc::{}<{}>(a, v, args, kBuffers, nargs);",
                       s.writes_other_node(t) ? "proxy_send_box" : "send_box", s.type_of(t, 0)));
  }

  // The proxy reads the sending rank's heap and writes the destination's.
  bool may_write_other_node(const Task& t, const Box& b) const override {
    return t.views[0].rank == t.rank && t.views[1].rank == b.rank;
  }
  std::string why_not_other_node() const override {
    return "the proxy sends only from the sending rank's own memory";
  }
};

}  // namespace

template <>
const Kind& kind<TaskKind::kSend>() {
  static const Send k;
  return k;
}

}  // namespace mkc::kinds
