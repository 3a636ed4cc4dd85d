// send: the box at range `src` of view 0 into view 1 (another rank's memory, or this rank's), at
// range `dst` when it follows, else at the same coordinates. Arguments: ranges (abi.h). Device
// code: templates/mkc/movement.cuh (send_box over NVLink, proxy_send_box into another node).
#include <fmt/format.h>

#include "compiler/kinds/kind.h"
#include "compiler/kinds/kinds.h"
#include "compiler/kinds/view_math.h"

namespace mkc::kinds {
namespace {

// A send's arguments by name: the box [lo, hi) of the source and the corner of the
// destination's box (the source's lo without a dst range).
struct SendBox {
  std::vector<int64_t> lo, hi, dst_lo;
};

SendBox decode(const Task& t) {
  SendBox b;
  size_t pos = 0;
  read_range(t.args, &pos, &b.lo, &b.hi);
  b.dst_lo = b.lo;
  if (pos < t.args.size()) {
    std::vector<int64_t> dst_hi;
    read_range(t.args, &pos, &b.dst_lo, &dst_hi);
  }
  return b;
}

class Send final : public Kind {
 public:
  Send() : Kind(TaskKind::kSend) {}
  // templates/mkc/movement.cuh: proxy_send_box's first claimed entry.
  int static_smem(const Source&, const Task&) const override { return 8; }

  std::vector<Touch> touches(const Task& t) const override {
    const SendBox b = decode(t);
    // The destination box has the source's extents, over the source's dimensions.
    std::vector<int64_t> lo(b.lo.size()), hi(b.lo.size());
    for (size_t d = 0; d < lo.size(); ++d) {
      lo[d] = d < b.dst_lo.size() ? b.dst_lo[d] : b.lo[d];
      hi[d] = lo[d] + (b.hi[d] - b.lo[d]);
    }
    return {Touch{0, b.lo, b.hi, false}, Touch{1, lo, hi, true}};
  }

  void execute(const Memory& mem, const Task& t) const override {
    const SendBox b = decode(t);
    const View &src = t.views[0], &dst = t.views[1];
    std::vector<double>& from = mem.of(src);
    std::vector<double>& to = mem.of(dst);
    for_rows(src, b.lo, b.hi, dst, b.dst_lo, [&](int64_t a, int64_t c, int64_t n) {
      for (int64_t k = 0; k < n; ++k) to[c + k] = from[a + k];
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
