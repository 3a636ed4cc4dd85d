// map_tile: rows [r0, r1) of Y = the schedule's device function fn applied element by element to
// the same rows of the inputs. Views {X0, X1, ..., Y} (abi.h, MapTileArgs). Device code:
// templates/mkc/map.cuh (map_range), with the function called as ::NAME.
#include <fmt/format.h>

#include "compiler/kinds/kind.h"
#include "compiler/kinds/kinds.h"
#include "compiler/kinds/view_math.h"
#include "compiler/sema/device_code.h"

namespace mkc::kinds {
namespace {

class MapTile final : public Kind {
 public:
  MapTile() : Kind(TaskKind::kMapTile) {}

  size_t fixed_args() const override { return sizeof(abi::MapTileArgs) / 8; }

  std::vector<Touch> touches(const Task& t) const override {
    const abi::MapTileArgs m = plan::args_as<abi::MapTileArgs>(t);
    return rows_of_every_view(t, m.r0, m.r1);
  }

  void execute(const Memory& mem, const Task& t) const override {
    const size_t nin = t.views.size() - 1;
    const View& y = t.views[nin];
    const int64_t row = product(y.shape, 1);
    std::vector<double> in(nin);
    const abi::MapTileArgs m = plan::args_as<abi::MapTileArgs>(t);
    for (int64_t e = m.r0 * row; e < m.r1 * row; ++e) {
      for (size_t i = 0; i < nin; ++i) in[i] = mem.of(t.views[i])[t.views[i].offset + e];
      mem.of(y)[y.offset + e] = mem.call(m.fn, in);
    }
  }

  std::string key_variant(const Source&, const Task& t) const override {
    return fmt::format(":fn{}", plan::args_as<abi::MapTileArgs>(t).fn);
  }

  void emit(Source& s, const Task& t) const override {
    // The function over the tile's rows, 8 elements a thread at once. The function is called as
    // ::NAME and the generated names start with mkc_, so that no device function name is hidden
    // by them.
    const size_t n = t.views.size() - 1;
    const compiler::DeviceFunction& f = s.device_fn(plan::args_as<abi::MapTileArgs>(t).fn);
    std::string params, call, ptrs;
    for (size_t i = 0; i < n; ++i) {
      s.line(fmt::format("  const auto* mkc_x{} = mkc::view_ptr<{}>(a, v[{}], kBuffers);", i,
                         s.type_of(t, i), i));
      params += fmt::format("{}{} mkc_p{}", i ? ", " : "", s.type_of(t, i), i);
      call += fmt::format("{}mkc::convert<{}>(mkc_p{})", i ? ", " : "",
                          compiler::cuda_type(f.params[i].second), i);
      ptrs += fmt::format(", mkc_x{}", i);
    }
    s.line(
        fmt::format("  auto* mkc_y = mkc::view_ptr<{}>(a, v[{}], kBuffers);", s.type_of(t, n), n));
    s.line(fmt::format("  const long long mkc_row = mkc::elems_from(v[{}], 1);", n));
    s.line("  const mkc::abi::MapTileArgs& mkc_m = mkc::args_as<mkc::abi::MapTileArgs>(args);");
    s.line(
        fmt::format("  mkc::map_range(mkc_y, mkc_m.r0 * mkc_row, mkc_m.r1 * mkc_row, []({}) "
                    "{{ return ::{}({}); }}{});",
                    params, f.name, call, ptrs));
  }
};

}  // namespace

template <>
const Kind& kind<TaskKind::kMapTile>() {
  static const MapTile k;
  return k;
}

}  // namespace mkc::kinds
