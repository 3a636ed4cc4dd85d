// reduce_slots: the reduction of a collective's chunk: op over this rank's own box (range x of
// view 0) and the same box of every other rank's receive slot (view 1, [slots, ...], slot `self`
// left out), into view 2 at the x range (out_in_x_coords) or at the slot range. Arguments:
// ReduceSlotsHead, then ranges (abi.h). Device code: templates/mkc/reduce.cuh.
#include <fmt/format.h>

#include "compiler/kinds/kind.h"
#include "compiler/kinds/kinds.h"
#include "compiler/kinds/view_math.h"

namespace mkc::kinds {
namespace {

// A reduce_slots task's arguments by name.
struct SlotsArgs {
  abi::ReduceSlotsHead head;
  std::vector<int64_t> xlo, xhi;  // the box of the rank's own data (view 0)
  std::vector<int64_t> lo, hi;    // the box of each slot (view 1, after its slot index)
};

SlotsArgs decode(const Task& t) {
  SlotsArgs a;
  a.head = plan::args_as<abi::ReduceSlotsHead>(t);
  size_t pos = sizeof(abi::ReduceSlotsHead) / 8;
  read_range(t.args, &pos, &a.xlo, &a.xhi);
  read_range(t.args, &pos, &a.lo, &a.hi);
  return a;
}

class ReduceSlots final : public Kind {
 public:
  ReduceSlots() : Kind(TaskKind::kReduceSlots) {}

  std::vector<Touch> touches(const Task& t) const override {
    const SlotsArgs a = decode(t);
    std::vector<Touch> out;
    out.push_back(Touch{0, a.xlo, a.xhi, false});
    for (int64_t s = 0; s < t.views[1].shape[0]; ++s) {
      if (s == a.head.self) continue;
      std::vector<int64_t> lo = {s}, hi = {s + 1};
      lo.insert(lo.end(), a.lo.begin(), a.lo.end());
      hi.insert(hi.end(), a.hi.begin(), a.hi.end());
      out.push_back(Touch{1, lo, hi, false});
    }
    if (a.head.out_in_x_coords) {
      out.push_back(Touch{2, a.xlo, a.xhi, true});
    } else {
      out.push_back(Touch{2, a.lo, a.hi, true});
    }
    return out;
  }

  void execute(const Memory& mem, const Task& t) const override {
    const auto buf = [&](const View& v) -> std::vector<double>& { return mem.of(v); };
    const SlotsArgs args = decode(t);
    const int64_t op = args.head.op, self = args.head.self;
    const bool out_x = args.head.out_in_x_coords;
    const std::vector<int64_t>&xlo = args.xlo, &xhi = args.xhi, &lo = args.lo, &hi = args.hi;
    const View &own = t.views[0], &slots = t.views[1], &out = t.views[2];
    const int64_t slot_elems = product(slots.shape, 1);
    View one = slots;
    one.shape.erase(one.shape.begin());
    // The reduction over the box, row by row: own's x box first, then every other slot.
    std::vector<double> acc;
    for_rows(own, xlo, xhi, own, xlo, [&](int64_t a, int64_t, int64_t n) {
      for (int64_t k = 0; k < n; ++k) acc.push_back(buf(own)[a + k]);
    });
    for (int64_t s = 0; s < static_cast<int64_t>(slots.shape[0]); ++s) {
      if (s == self) continue;
      View sv = one;
      sv.offset = slots.offset + s * slot_elems;
      size_t i = 0;
      for_rows(sv, lo, hi, sv, lo, [&](int64_t a, int64_t, int64_t n) {
        for (int64_t k = 0; k < n; ++k, ++i) acc[i] = reduce2(op, acc[i], buf(sv)[a + k]);
      });
    }
    size_t i = 0;
    const std::vector<int64_t>& olo = out_x ? xlo : lo;
    const std::vector<int64_t>& ohi = out_x ? xhi : hi;
    for_rows(out, olo, ohi, out, olo, [&](int64_t a, int64_t, int64_t n) {
      for (int64_t k = 0; k < n; ++k, ++i) buf(out)[a + k] = acc[i];
    });
  }

  void emit(Source& s, const Task& t) const override {
    s.line(fmt::format("  mkc::reduce_slots<{}>(a, v, args, kBuffers);", s.type_of(t, 0)));
  }
};

}  // namespace

template <>
const Kind& kind<TaskKind::kReduceSlots>() {
  static const ReduceSlots k;
  return k;
}

}  // namespace mkc::kinds
