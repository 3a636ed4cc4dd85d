// The kinds without device code of their own, which only wait and signal: launch_fence (first on
// every rank: peers may write into this rank's buffers once it has announced the launch),
// launch_end (last: the kernel exits once every peer's write into it has landed) and signal (an
// event raised for a peer, abi.h SignalArgs).
#include "compiler/kinds/kind.h"
#include "compiler/kinds/kinds.h"

namespace mkc::kinds {
namespace {

class Marker final : public Kind {
 public:
  Marker(TaskKind id, bool bookkeeping, size_t args)
      : Kind(id), bookkeeping_(bookkeeping), args_(args) {}
  bool bookkeeping() const override { return bookkeeping_; }
  bool has_body() const override { return false; }
  size_t fixed_args() const override { return args_; }
  std::vector<Touch> touches(const Task&) const override { return {}; }
  void execute(const Memory&, const Task&) const override {}

 private:
  bool bookkeeping_;
  size_t args_;
};

}  // namespace

template <>
const Kind& kind<TaskKind::kLaunchFence>() {
  static const Marker k(TaskKind::kLaunchFence, true, 0);
  return k;
}

template <>
const Kind& kind<TaskKind::kLaunchEnd>() {
  static const Marker k(TaskKind::kLaunchEnd, true, 0);
  return k;
}

template <>
const Kind& kind<TaskKind::kSignalOnly>() {
  static const Marker k(TaskKind::kSignalOnly, false, sizeof(abi::SignalArgs) / 8);
  return k;
}

}  // namespace mkc::kinds
