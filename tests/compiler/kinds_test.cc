// The task-kind registry (compiler/kinds): every TaskKind has its Kind, in the enum's order, and
// what code generation and the scheduler read of a kind follows from the task, not from a switch
// elsewhere.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "compiler/kinds/kind.h"
#include "support/error.h"

namespace mkc::kinds {
namespace {

// A Source that records the lines a kind emits and hands out tensor maps in order.
class FakeSource final : public Source {
 public:
  explicit FakeSource(bool tensor_cores) : tensor_cores_(tensor_cores) {}
  bool tensor_cores() const override { return tensor_cores_; }
  const std::string& arch() const override { return arch_; }
  std::string arch_ = "sm_90a";
  compiler::DType dtype(const Task&, size_t) const override { return compiler::DType::kBf16; }
  int static_smem_bound() const override { return static_smem; }
  int static_smem = 256;
  std::string fn_type(int64_t fn) const override { return fn < 0 ? "mkc::NoFn" : "fn"; }
  const compiler::DeviceFunction& device_fn(int64_t) const override {
    throw InternalError("no device functions here");
  }
  bool writes_other_node(const Task&) const override { return false; }
  int tensor_map(const View&, int rows, int cols) override {
    boxes.emplace_back(rows, cols);
    return maps++;
  }
  void line(const std::string& s) override { text += s + "\n"; }
  std::string text;
  int maps = 0;
  std::vector<std::pair<int, int>> boxes;  // each map's box (rows, cols), in order

 private:
  bool tensor_cores_;
};

// A bf16 GEMM tile of 128 x 256 over K 64, with 16-byte aligned operands.
Task gemm_task() {
  Task t;
  t.kind = TaskKind::kGemmTile;
  t.views = {View{0, 0, 0, {256, 64}}, View{0, 1, 0, {64, 512}}, View{0, 2, 0, {256, 512}}};
  abi::GemmTileArgs g{};
  g.m0 = 0, g.m1 = 128, g.n0 = 0, g.n1 = 256, g.k0 = 0, g.k1 = 64;
  g.fn = -1;
  g.map_a = g.map_b = abi::kNoMap;
  plan::set_args(t, g);
  return t;
}

TEST_CASE("every task kind has its Kind, in the enum's order") {
  std::set<std::string> names;
  int count = 0;
#define MKC_CHECK_KIND(e, name_text, comm)     \
  {                                            \
    const Kind& k = kind_of(TaskKind::e);      \
    CHECK(k.id() == TaskKind::e);              \
    CHECK(std::string(k.name()) == name_text); \
    CHECK(k.is_comm() == comm);                \
    CHECK(names.insert(k.name()).second);      \
    ++count;                                   \
  }
  MKC_TASK_KINDS(MKC_CHECK_KIND)
#undef MKC_CHECK_KIND
  CHECK(count == static_cast<int>(names.size()));
  // Bookkeeping kinds have no device code; asking one for it is an internal error, not a kernel
  // that silently skips the task.
  CHECK(kind_of(TaskKind::kLaunchFence).bookkeeping());
  CHECK_FALSE(kind_of(TaskKind::kLaunchFence).has_body());
  CHECK_FALSE(kind_of(TaskKind::kSignalOnly).bookkeeping());
  FakeSource s(true);
  CHECK_THROWS_AS(kind_of(TaskKind::kSignalOnly).emit(s, Task{}), InternalError);
  // Row moves run on any CTA; a GEMM tile does not.
  CHECK(kind_of(TaskKind::kA2aSend).runs_anywhere());
  CHECK_FALSE(kind_of(TaskKind::kGemmTile).runs_anywhere());
}

TEST_CASE("a GEMM tile's class, launch and arguments follow its operands") {
  const Task t = gemm_task();
  const Kind& k = kind_of(t);
  FakeSource tc(true), simt(false);
  CHECK(class_key(tc, t) == "gemm_tile:bf16:bf16:bf16:fn-1:bias0:tma128x256:store");
  CHECK(class_key(simt, t) == "gemm_tile:bf16:bf16:bf16:fn-1:bias0");
  CHECK(k.launch(tc, t).threads == 384);
  CHECK(k.launch(simt, t).threads == 0);
  // The TMA tile gets the maps of A and B in its arguments; the portable tile its own words.
  Task with_maps = t;
  with_maps.args = k.device_args(tc, t);
  const abi::GemmTileArgs g = plan::args_as<abi::GemmTileArgs>(with_maps);
  CHECK(g.map_a == 0);
  CHECK(g.map_b == 1);
  CHECK(g.map_c == 2);  // C leaves by TMA stores: whole 64 x 64 boxes
  CHECK(tc.maps == 3);
  CHECK(k.launch(tc, t).bulk_stores);
  CHECK(k.launch(tc, t).dynamic_smem == 4 * 49152 + 2 * 2 * 8192 + 2048);
  CHECK(k.device_args(simt, t) == t.args);
  k.emit(tc, t);
  CHECK(tc.text.find("gemm_tile_tma<__nv_bfloat16") != std::string::npos);
  // C stored directly, not by TMA: a task whose last column box would run past its own end
  // inside C (TMA clips only at C's edge), a split part, an f32 C.
  {
    Task ragged = t;
    abi::GemmTileArgs r = plan::args_as<abi::GemmTileArgs>(t);
    r.n1 = 200;  // C has 512 columns: columns 192..255 of the box are another task's
    plan::set_args(ragged, r);
    CHECK(class_key(tc, ragged) == "gemm_tile:bf16:bf16:bf16:fn-1:bias0:tma128x256");
    CHECK_FALSE(k.launch(tc, ragged).bulk_stores);
    CHECK(k.launch(tc, ragged).dynamic_smem == 4 * 49152 + 2048);
    Task edge = t;
    edge.views[2].shape = {256, 200};  // the same columns at C's edge: clipped there
    r.n1 = 200;
    plan::set_args(edge, r);
    CHECK(class_key(tc, edge) == "gemm_tile:bf16:bf16:bf16:fn-1:bias0:tma128x256:store");
    // A kernel whose other classes declare 20 KB of static shared memory (an MoE dispatch's
    // histograms): the 32 KB of staging would not fit beside it.
    tc.static_smem = 20 * 1024;
    CHECK(class_key(tc, t) == "gemm_tile:bf16:bf16:bf16:fn-1:bias0:tma128x256");
    tc.static_smem = 256;
    Task split = t;
    abi::GemmTileArgs sp = plan::args_as<abi::GemmTileArgs>(t);
    sp.parts = 2;
    plan::set_args(split, sp);
    CHECK(class_key(tc, split).find(":store") == std::string::npos);
  }
  // A misaligned A (an odd element offset) cannot be loaded by TMA: the portable tile.
  Task odd = t;
  odd.views[0].offset = 1;
  CHECK(class_key(tc, odd) == "gemm_tile:bf16:bf16:bf16:fn-1:bias0");
}

TEST_CASE("the scheduler's load of an attention tile counts the keys its queries see") {
  Task t;
  t.kind = TaskKind::kAttentionTile;
  t.views = {View{0, 0, 0, {1, 256, 64}}, View{0, 1, 0, {1, 1024, 64}},
             View{0, 2, 0, {1, 1024, 64}}, View{0, 3, 0, {1, 256, 64}}};
  abi::AttentionTileArgs a{};
  a.q0 = 0, a.q1 = 128;
  a.last = 1;
  plan::set_args(t, a);
  const Kind& k = kind_of(t);
  CHECK(k.compute_load(t).value() == 128 * (1024 + 640));
  a.causal = 1;
  a.causal_offset = 0;  // the first 128 queries see keys 0..127
  plan::set_args(t, a);
  CHECK(k.compute_load(t).value() == 128 * (128 + 640));
  // Packed sequences (4 in 1024 keys): charged by the rows' place in a sequence of the mean
  // length, 256, not in the slice; a tile across two sequences sees both.
  Task packed = t;
  packed.views.push_back(View{0, 4, 0, {5}});
  a.seqlens = 4;
  const auto load = [&](int64_t q0, int64_t q1, int64_t causal) {
    a.q0 = q0, a.q1 = q1, a.causal = causal;
    plan::set_args(packed, a);
    return k.compute_load(packed).value();
  };
  CHECK(load(768, 896, 1) == 128 * (128 + 640));
  CHECK(load(896, 1024, 1) == 128 * (256 + 640));
  CHECK(load(0, 128, 1) == load(512, 640, 1));
  CHECK(load(768, 896, 0) == 128 * (256 + 640));
  CHECK(load(192, 384, 1) == 192 * (512 + 640));
  // A GEMM tile's tasks cost alike: round robin.
  CHECK_FALSE(kind_of(TaskKind::kGemmTile).compute_load(gemm_task()).has_value());
}

// The tiles a kernel runs follow its NVRTC target (support/arch.h); the compile summary names
// them (Kind::path) while the source is the same for every target.
TEST_CASE("the compile summary names the tile each target runs") {
  CHECK(tile_target("sm_90a") == TileTarget::kWgmma);
  for (const char* a : {"sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120"})
    CHECK(tile_target(a) == TileTarget::kMmaSync);
  for (const char* a : {"sm_75", "sm_7", "sm_", "compute_90", "", "sm_x90"})
    CHECK(tile_target(a) == TileTarget::kSimt);
  CHECK(arch_has_wgmma("sm_90a"));
  CHECK_FALSE(arch_has_wgmma("sm_90"));

  Task att;
  att.kind = TaskKind::kAttentionTile;
  att.views = {View{0, 0, 0, {2, 400, 128}}, View{0, 1, 0, {2, 1000, 128}},
               View{0, 2, 0, {2, 1000, 128}}, View{0, 3, 0, {2, 400, 128}}};
  abi::AttentionTileArgs a{};
  a.q0 = 0, a.q1 = 128, a.last = 1, a.key_block = 128, a.query_block = 128;
  a.map_q = a.map_k = a.map_v = abi::kNoMap;
  plan::set_args(att, a);
  const Task gemm = gemm_task();
  FakeSource s(true);
  const std::string source_sm90a = [&] {
    kind_of(att).emit(s, att);
    return s.text;
  }();
  s.arch_ = "sm_90a";
  CHECK(kind_of(att).path(s, att).find("sm_90a wgmma + TMA, head dim 128") != std::string::npos);
  CHECK(kind_of(gemm).path(s, gemm).find("sm_90a wgmma + TMA 128x256") != std::string::npos);
  s.arch_ = "sm_80";
  CHECK(kind_of(att).path(s, att) ==
        "attention_tile: mma.sync (sm_80 has no wgmma), head dim 128, tiles of 128 queries, 16 "
        "rows a warp, blocks of 32 keys");
  CHECK(kind_of(gemm).path(s, gemm).find("gemm_tile: mma.sync 128x128 (sm_80 has no wgmma") == 0);
  s.arch_ = "sm_75";
  CHECK(kind_of(att).path(s, att) == "attention_tile: SIMT (sm_75 has no mma.sync)");
  CHECK(kind_of(gemm).path(s, gemm) == "gemm_tile: SIMT (sm_75 has no mma.sync)");
  // The same source whatever the target.
  s.text.clear();
  kind_of(att).emit(s, att);
  CHECK(s.text == source_sm90a);
}

// The tensor-core attention tile walks keys in blocks of 192 at head dim 64 when the schedule
// asks (tile(128, 192)), else of 128, and takes 192 queries in three consumer warpgroups at head
// dim 64 when asked (tile(192[, k]), blocks of 128 then): its class, template arguments, Q, K and
// V boxes, threads and shared memory (attention_sm90.cuh, AttnShape: 2048 + two Q slots + the
// stages) follow.
TEST_CASE("an attention tile's key block and query tile follow tile(q, k) at head dim 64 only") {
  const auto task_at = [](int64_t d, int64_t key_block, int64_t query_block) {
    Task t;
    t.kind = TaskKind::kAttentionTile;
    t.views = {View{0, 0, 0, {2, 400, d}}, View{0, 1, 0, {2, 1000, d}}, View{0, 2, 0, {2, 1000, d}},
               View{0, 3, 0, {2, 400, d}}};
    abi::AttentionTileArgs a{};
    a.q0 = query_block, a.q1 = 2 * query_block, a.last = 1, a.key_block = key_block;
    a.query_block = query_block;
    a.map_q = a.map_k = a.map_v = abi::kNoMap;
    plan::set_args(t, a);
    return t;
  };
  struct Case {
    int64_t d, asked, asked_q;
    int keys, queries, smem;
  };
  for (const Case c : {Case{64, 192, 128, 192, 128, 2048 + 2 * 16384 + 3 * 49152},
                       Case{64, 0, 128, 128, 128, 2048 + 2 * 16384 + 4 * 32768},
                       Case{64, 64, 128, 128, 128, 2048 + 2 * 16384 + 4 * 32768},
                       Case{128, 192, 128, 128, 128, 2048 + 2 * 32768 + 2 * 65536},
                       Case{128, 0, 128, 128, 128, 2048 + 2 * 32768 + 2 * 65536},
                       Case{64, 0, 192, 128, 192, 2048 + 2 * 24576 + 4 * 32768},
                       Case{64, 128, 192, 128, 192, 2048 + 2 * 24576 + 4 * 32768},
                       Case{64, 192, 192, 128, 192, 2048 + 2 * 24576 + 4 * 32768}}) {
    CAPTURE(c.d);
    CAPTURE(c.asked);
    CAPTURE(c.asked_q);
    FakeSource s(true);
    const Task t = task_at(c.d, c.asked, c.asked_q);
    const Kind& k = kind_of(t);
    CHECK(k.key_variant(s, t) == fmt::format(":tma_d{}_k{}_q{}", c.d, c.keys, c.queries));
    CHECK(k.path(s, t).find(fmt::format("blocks of {} keys", c.keys)) != std::string::npos);
    CHECK(k.path(s, t).find(fmt::format("tiles of {} queries in {} consumer warpgroups", c.queries,
                                        c.queries / 64)) != std::string::npos);
    CHECK(k.launch(s, t).dynamic_smem == c.smem);
    CHECK(k.launch(s, t).dynamic_smem <= 227 * 1024);
    // Before Hopper the mma.sync tile's staging (attention_sm80.cuh): two stages of 64 keys (32
    // at head dim 128) and 16 rows of Q per warp, rows of d + 8; within an sm_86/89 CTA's 99 KB.
    const int warps = (128 + 2 * c.queries) / 32;
    CHECK(k.launch(s, t).portable_smem ==
          (4 * (c.d == 128 ? 32 : 64) + 16 * warps) * (c.d + 8) * 2 + 128);
    CHECK(k.launch(s, t).portable_smem <= 99 * 1024);
    // A producer warpgroup and a consumer warpgroup per 64 queries.
    CHECK(k.launch(s, t).threads == 128 + 2 * c.queries);
    // The tile of three consumer warpgroups runs as chains of a CTA's consecutive tiles: its code
    // is the chain function's, its task function empty; the others run one tile a call (a chain
    // of one).
    const std::string call =
        fmt::format("attention_chain_tma<__nv_bfloat16, __nv_bfloat16, {}, {}, {}>(a, ", c.d,
                    c.keys, c.queries);
    CHECK(k.chains(s, t) == (c.queries == 192));
    if (c.queries == 192) {
      k.emit_chain(s, t);
      CHECK(s.text.find(call + "tasks, views, args, list, n") != std::string::npos);
      s.text.clear();
      k.emit(s, t);
      CHECK(s.text.find("mkc::") == std::string::npos);
    } else {
      k.emit(s, t);
      CHECK(s.text.find(call + "&one, v, args, &only, 1,") != std::string::npos);
    }
    // The arguments the device reads: three maps, the rest as lowered.
    Task lowered = t;
    lowered.args = k.device_args(s, t);
    const auto at = plan::args_as<abi::AttentionTileArgs>(lowered);
    CHECK(at.map_q == 0);
    CHECK(at.map_k == 1);
    CHECK(at.map_v == 2);
    CHECK(at.key_block == c.asked);
    CHECK(at.query_block == c.asked_q);
    // Q's box is a query tile's rows, K's and V's a key block's.
    REQUIRE(s.boxes.size() == 3);
    CHECK(s.boxes[0] == std::pair<int, int>{c.queries, 64});
    CHECK(s.boxes[1] == std::pair<int, int>{c.keys, 64});
    CHECK(s.boxes[2] == std::pair<int, int>{c.keys, 64});
  }
  // Without tensor cores the SIMT tile runs whatever was asked.
  FakeSource simt(false);
  const Task t = task_at(64, 192, 128);
  CHECK(kind_of(t).key_variant(simt, t).empty());
  // Tiles of 192 queries at head dim 128 (two consumer warpgroups hold 128 rows): the SIMT tile.
  FakeSource tc(true);
  const Task wide = task_at(128, 0, 192);
  CHECK(kind_of(wide).key_variant(tc, wide).empty());
  CHECK(kind_of(wide).path(tc, wide).find("SIMT") != std::string::npos);
}

}  // namespace
}  // namespace mkc::kinds
