// The attention tiles on a GPU against the fp64 reference, on fresh random data with the outputs
// poisoned first: the tensor-core tile (templates/mkc/attention_sm90.cuh) for head dims 64 and
// 128, bf16 and f16, causal and not, batch >= 2, odd heads, query and key lengths that are not
// multiples of the tile (and differ from each other), one launch after another with new inputs;
// the SIMT tile where the tensor-core one does not apply; ring attention's accumulating tiles
// at 2, 3, 4 and 8 ranks sharing the GPU at batch 2; and causal attention placed in the whole
// sequence (q_start, k_start): odd offsets, and causal ring attention in the zigzag and plain
// layouts; packed sequences (seqlens); the mma.sync tile (attention_sm80.cuh) that runs without
// wgmma, on a Hopper GPU built for plain sm_90. Skipped without a GPU.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <array>
#include <cstdlib>

#include "compiler/pipeline.h"
#include "dsl/parser.h"
#include "jit/jit.h"
#include "runtime/local_job.h"
#include "runtime/verify.h"
#include "tests/support/gpu.h"

namespace mkc::rt {
namespace {

struct Built {
  std::unique_ptr<compiler::Compilation> c;
  jit::JitOutput jit;
};

// `arch`: NVRTC's target ("" the device's own).
Built build(const std::string& name, const std::string& text, int64_t ranks,
            const std::map<std::string, int64_t>& defines, const std::string& arch = "") {
  Built b;
  const DeviceInfo dev = device_info(0);
  compiler::CheckOptions opts;
  opts.ranks = {ranks};
  opts.defines = defines;
  opts.sms = dev.sm_count / std::max<int64_t>(1, (ranks + device_count() - 1) / device_count());
  opts.arch = arch.empty() ? dev.arch() : arch;
  b.c = compiler::compile_file(std::make_shared<dsl::SourceFile>(name, text), opts);
  REQUIRE_MESSAGE(b.c->ok(), dsl::render_text(b.c->diagnostics.all(), false));
  jit::JitOptions jo;
  jo.arch = arch.empty() ? dev.arch() : arch;
  jo.want_ptx = !arch.empty();  // the tile checks read it
  b.jit = jit::jit_compile(b.c->kernels[0].source, name + ".cu", b.c->kernels[0].kernel_name, jo);
  return b;
}

// `launches` checked launches, each with new inputs; returns the device paths the kernel took.
std::string run(Built& b, int launches, const std::string& label) {
  LocalJobOptions lo;
  lo.file = b.c->file;
  lo.share_gpus = true;
  LocalJob job(b.c->plans[0], b.jit.cubin, b.c->kernels[0], lo);
  for (int launch = 1; launch <= launches; ++launch) {
    for (const TensorCheck& t : checked_launch(job, b.c->plans[0], {}, 100 + launch)) {
      INFO(label << " launch " << launch << " rank " << t.rank << " tensor " << t.tensor);
      CHECK(t.unwritten == 0);
      CHECK(t.rel_error <= 1e-2);
      MESSAGE(fmt::format("{} launch {} rank {} {}: rel. L2 {:.2e}", label, launch, t.rank,
                          t.tensor, t.rel_error));
    }
  }
  std::string paths;
  for (const std::string& p : b.c->kernels[0].paths) paths += p + "; ";
  return paths;
}

const char* kAttention = R"(
schedule attn {
  param B = 1, H = 1, SQ = 128, SK = 128, D = 128, MASK = 1, KB = 128, QB = 128
  input  Q : T[B, H, SQ, D]
  input  K : T[B, H, SK, D]
  input  V : T[B, H, SK, D]
  output O : T[B, H, SQ, D]
  compute att = attention(Q, K, V -> O, causal = MASK - 1) tile(QB, KB)
}
)";

std::string attention_text(const std::string& dtype) {
  std::string s = kAttention;
  for (size_t at = s.find("T["); at != std::string::npos; at = s.find("T[", at))
    s.replace(at, 1, dtype), at += dtype.size();
  return s;
}

// A shape of kAttention and its -D values.
struct Shape {
  int64_t b, h, sq, sk, d, causal;
  const char* dtype;
  int64_t kb = 128;  // keys per block asked for: 192 takes 192-key blocks at head dim 64
  int64_t qb = 128;  // queries per tile: 192 takes three consumer warpgroups at head dim 64
};

std::map<std::string, int64_t> defines_of(const Shape& s) {
  return {{"B", s.b}, {"H", s.h},   {"SQ", s.sq},           {"SK", s.sk},
          {"D", s.d}, {"KB", s.kb}, {"MASK", s.causal + 1}, {"QB", s.qb}};
}

GPU_TEST_CASE("attention: the tensor-core tile against fp64, every shape class") {
  const std::vector<Shape> shapes = {
      {1, 1, 128, 128, 128, 0, "bf16"},
      {1, 1, 128, 128, 64, 1, "bf16"},
      {2, 4, 1000, 1000, 128, 0, "bf16"},
      {2, 4, 1000, 1000, 128, 1, "bf16"},
      {4, 1, 129, 385, 64, 0, "bf16"},
      {1, 3, 777, 300, 64, 1, "bf16"},
      {1, 32, 512, 512, 128, 1, "bf16"},
      {2, 2, 640, 2048, 128, 0, "f16"},
      {1, 2, 300, 300, 64, 1, "f16"},
      {4, 1, 129, 385, 64, 0, "bf16", 192},
      {1, 3, 777, 300, 64, 1, "bf16", 192},
      {2, 2, 1000, 1000, 64, 1, "bf16", 192},
      {1, 2, 300, 577, 64, 0, "f16", 192},
      {2, 4, 1000, 1000, 128, 1, "bf16", 192},
      // 256 tiles: CTAs run several in a row, the next tile's Q and first blocks loaded into
      // the 3-stage ring while this one finishes.
      {2, 16, 1024, 1024, 64, 0, "bf16", 192},
      {2, 16, 1024, 1000, 64, 1, "bf16", 192},
      // Tiles of 192 queries in three consumer warpgroups (512 threads), blocks of 128 keys
      // (asking for 192 keys gets 128 there): ragged query and key lengths, a tile whose third
      // warpgroup has one row (Sq 129) or none (Sq 300), causal and not, f16, odd heads.
      {1, 1, 192, 192, 64, 0, "bf16", 128, 192},
      {1, 1, 192, 192, 64, 1, "bf16", 128, 192},
      {4, 1, 129, 385, 64, 0, "bf16", 128, 192},
      {1, 3, 777, 300, 64, 1, "bf16", 128, 192},
      {2, 2, 1000, 1000, 64, 1, "bf16", 192, 192},
      {1, 2, 300, 577, 64, 0, "f16", 128, 192},
      {1, 2, 300, 300, 64, 1, "f16", 128, 192},
      // Hundreds of tiles: CTAs chain them, the next tile's Q loaded into the other slot.
      {2, 16, 1024, 1024, 64, 0, "bf16", 128, 192},
      {2, 16, 1000, 1000, 64, 1, "bf16", 128, 192},
  };
  for (const Shape& s : shapes) {
    const std::string label =
        fmt::format("{} B={} H={} Sq={} Sk={} D={} causal={} key block {} query tile {}", s.dtype,
                    s.b, s.h, s.sq, s.sk, s.d, s.causal, s.kb, s.qb);
    SUBCASE(label.c_str()) {
      Built b = build("attn", attention_text(s.dtype), 1, defines_of(s));
      const std::string paths = run(b, 2, label);
      CHECK_MESSAGE(paths.find("wgmma") != std::string::npos, paths);
      // 192-key blocks at head dim 64 with 128-query tiles only, 192-query tiles at head dim 64
      // only (compiler/kinds/attention_tile.cc).
      const int64_t queries = s.qb == 192 && s.d == 64 ? 192 : 128;
      const int64_t keys = s.kb == 192 && s.d == 64 && queries == 128 ? 192 : 128;
      CHECK_MESSAGE(paths.find(fmt::format("blocks of {} keys", keys)) != std::string::npos, paths);
      CHECK_MESSAGE(paths.find(fmt::format("tiles of {} queries", queries)) != std::string::npos,
                    paths);
      CHECK(b.c->kernels[0].threads == 128 + 2 * queries);
      MESSAGE(label << ": " << paths << b.jit.registers << " registers, " << b.jit.spill_bytes
                    << " B spilled");
      // The consumers run on 232 registers (setmaxnreg): nothing spills at either head dim.
      CHECK_MESSAGE(b.jit.spill_bytes == 0, jit::resources_text(b.jit));
    }
  }
}

GPU_TEST_CASE("attention: head dims the tensor-core tile does not take run the SIMT tile") {
  Built b = build("attn", attention_text("bf16"), 1,
                  {{"B", 2}, {"H", 1}, {"SQ", 100}, {"SK", 70}, {"D", 40}, {"MASK", 2}});
  const std::string paths = run(b, 1, "D=40");
  CHECK_MESSAGE(paths.find("SIMT") != std::string::npos, paths);
}

const char* kPacked = R"(
schedule packed {
  param H = 1, T = 128, D = 128, N = 4, MASK = 1, QB = 128
  input  Q : bf16[H, T, D]
  input  K : bf16[H, T, D]
  input  V : bf16[H, T, D]
  input  L : i32[N + 1]
  output O : bf16[H, T, D]
  compute att = attention(Q, K, V -> O, causal = MASK - 1, seqlens = L) tile(QB)
}
)";

// Packed sequences (`seqlens`): every launch packs the T rows anew, cut at N - 1 random places
// (compiler/oracle/interpret.cc: sequences of one row, empty ones, ones across several tiles and
// tiles across several sequences), against the fp64 reference that sees each sequence alone.
GPU_TEST_CASE("attention over packed sequences (seqlens): both tiles, causal and not") {
  struct Shape {
    int64_t h, t, d, n, causal, qb;
  };
  const std::vector<Shape> shapes = {
      {1, 128, 128, 1, 0, 128},  {1, 128, 128, 1, 1, 128},   {3, 1000, 128, 5, 0, 128},
      {3, 1000, 128, 5, 1, 128}, {2, 2000, 128, 40, 1, 128}, {2, 1000, 64, 5, 0, 128},
      {2, 1000, 64, 5, 1, 128},  {3, 1000, 64, 5, 0, 192},   {3, 1000, 64, 7, 1, 192},
      {2, 2000, 64, 40, 1, 192}, {4, 4096, 64, 3, 1, 192},   {4, 4096, 128, 3, 1, 128},
      {1, 777, 64, 300, 1, 192},
  };
  for (const Shape& s : shapes) {
    const std::string label = fmt::format("H={} T={} D={} sequences={} causal={} query tile {}",
                                          s.h, s.t, s.d, s.n, s.causal, s.qb);
    SUBCASE(label.c_str()) {
      Built b = build(
          "packed", kPacked, 1,
          {{"H", s.h}, {"T", s.t}, {"D", s.d}, {"N", s.n}, {"MASK", s.causal + 1}, {"QB", s.qb}});
      const std::string paths = run(b, 3, label);
      CHECK_MESSAGE(paths.find("wgmma") != std::string::npos, paths);
      CHECK_MESSAGE(paths.find("packed sequences") != std::string::npos, paths);
      CHECK_MESSAGE(b.jit.spill_bytes == 0, jit::resources_text(b.jit));
      MESSAGE(label << ": " << paths << b.jit.registers << " registers");
    }
  }
  SUBCASE("head dim 40: the SIMT tile") {
    Built b = build("packed", kPacked, 1,
                    {{"H", 2}, {"T", 300}, {"D", 40}, {"N", 6}, {"MASK", 2}, {"QB", 128}});
    const std::string paths = run(b, 2, "SIMT packed");
    CHECK_MESSAGE(paths.find("SIMT") != std::string::npos, paths);
  }
}

GPU_TEST_CASE("ring attention at batch 2: 2, 3, 4 and 8 ranks sharing the GPU") {
  const std::string text = dsl::SourceFile::read("samples/ring_attention.mks")->text();
  for (int64_t R : {2, 3, 4, 8}) {
    for (int64_t H : {1, 4}) {
      const std::string label = fmt::format("ring R={} B=2 H={}", R, H);
      SUBCASE(label.c_str()) {
        Built b =
            build("ring_attention", text, R, {{"B", 2}, {"H", H}, {"S", 256 * R}, {"D", 128}});
        const std::string paths = run(b, 2, label);
        MESSAGE(label << ": " << paths);
      }
    }
  }
}

// Causal attention placed by q_start and k_start (the mask key j <= i + q_start - k_start): the
// tensor-core tile at offsets that cut its 128-key blocks and 64-row halves anywhere, rows that
// see no key (zeros), a slice that sees every key, and one that sees none.
const char* kOffset = R"(
schedule offset {
  param B = 2, H = 2, SQ = 300, SK = 400, D = 128, QS = 1, KS = 1, KB = 128, QB = 128
  input  Q : bf16[B, H, SQ, D]
  input  K : bf16[B, H, SK, D]
  input  V : bf16[B, H, SK, D]
  output O : bf16[B, H, SQ, D]
  compute att = attention(Q, K, V -> O, causal = 1, q_start = QS, k_start = KS) tile(QB, KB)
}
)";

GPU_TEST_CASE("attention: causal with q_start and k_start on the tensor-core tile") {
  struct Case {
    int64_t d, qs, ks, kb = 128, qb = 128;
  };
  for (const Case& k :
       {Case{128, 1, 38}, Case{64, 1, 38}, Case{128, 40, 1}, Case{64, 1, 250}, Case{128, 500, 1},
        Case{128, 1, 400}, Case{64, 200, 63}, Case{64, 1, 38, 192}, Case{64, 1, 250, 192},
        Case{64, 200, 63, 192}, Case{64, 1, 400, 192}, Case{64, 1, 38, 128, 192},
        Case{64, 1, 250, 128, 192}, Case{64, 200, 63, 128, 192}, Case{64, 1, 400, 128, 192},
        // Warpgroups whose rows see no key while the tile's last rows do (offsets -99 and -149):
        // they walk no block, release the stages, and write zeros.
        Case{64, 1, 100}, Case{128, 1, 100}, Case{64, 1, 150, 128, 192}}) {
    const std::string label = fmt::format("D={} q_start={} k_start={} key block {} query tile {}",
                                          k.d, k.qs, k.ks, k.kb, k.qb);
    SUBCASE(label.c_str()) {
      Built b = build("offset", kOffset, 1,
                      {{"D", k.d}, {"QS", k.qs}, {"KS", k.ks}, {"KB", k.kb}, {"QB", k.qb}});
      const std::string paths = run(b, 2, label);
      CHECK_MESSAGE(paths.find("wgmma") != std::string::npos, paths);
      CHECK_MESSAGE(b.jit.spill_bytes == 0, jit::resources_text(b.jit));
    }
  }
  SUBCASE("the SIMT tile, D=40 q_start=1 k_start=38") {
    Built b = build("offset", kOffset, 1, {{"D", 40}, {"QS", 1}, {"KS", 38}});
    const std::string paths = run(b, 1, "SIMT D=40 q_start=1 k_start=38");
    CHECK_MESSAGE(paths.find("SIMT") != std::string::npos, paths);
  }
}

// Causal ring attention in the zigzag layout (samples/ring_attention_causal.mks): the fp64
// reference places each block by its q_start / k_start, which tests/compiler/causal_attention_test
// shows to be causal attention over the whole sequence. Chunks of 200 (a partial second tile),
// batch 2, at 1, 2, 3, 4 and 8 ranks sharing the GPU; D 128 and 64.
GPU_TEST_CASE("causal ring attention, zigzag, at batch 2: 1, 2, 3, 4 and 8 ranks") {
  const std::string text = dsl::SourceFile::read("samples/ring_attention_causal.mks")->text();
  for (int64_t R : {1, 2, 3, 4, 8}) {
    for (int64_t D : {128, 64}) {
      const int64_t H = R == 8 ? 2 : 3;
      const std::string label = fmt::format("causal ring R={} B=2 H={} C=200 D={}", R, H, D);
      SUBCASE(label.c_str()) {
        Built b = build("ring_attention_causal", text, R,
                        {{"B", 2}, {"H", H}, {"S", 2 * 200 * R}, {"D", D}});
        const std::string paths = run(b, 2, label);
        CHECK_MESSAGE(paths.find("wgmma") != std::string::npos, paths);
      }
    }
  }
}

// The plain layout (rank r holds chunk r) with the global mask: later ranks' blocks are fully
// masked, so a rank's last instances see no key and one of them writes O from the state.
const char* kRingCausalPlain = R"(
schedule ring_causal {
  ranks R
  param B = 2, H = 2, S = 1024, D = 128, QB = 128
  input   Q   : bf16[B, H, S / R, D]
  input   KV  : bf16[2, B, H, S / R, D]
  scratch buf : bf16[2, 2, B, H, S / R, D] symmetric
  output  O   : bf16[B, H, S / R, D]
  compute init = copy(KV -> buf[0])
  loop step in 0 .. R {
    comm    kv  = shift(buf[step % 2] -> buf[(step + 1) % 2], by = 1) chunk(128, D)
                  when(step < R - 1) after init, kv[step - 1].chunk
    compute att = attention(Q, buf[step % 2, 0], buf[step % 2, 1] -> O, causal = 1,
                            accumulate = 1, q_start = rank * (S / R),
                            k_start = (rank - step) % R * (S / R))
                  tile(QB, 128) after init, kv[step - 1].chunk, att[step - 1].tile
  }
}
)";

GPU_TEST_CASE("causal ring attention, plain layout: masked blocks of later ranks, 3 and 4 ranks") {
  for (int64_t R : {3, 4}) {
    const std::string label = fmt::format("plain causal ring R={} B=2 H=2 S={}", R, 333 * R);
    SUBCASE(label.c_str()) {
      Built b = build("ring_causal", kRingCausalPlain, R, {{"S", 333 * R}});
      run(b, 2, label);
    }
  }
  // Tiles of 192 queries at head dim 64 (three consumer warpgroups) carrying the state across
  // the ring's steps, the masked blocks returning at once.
  for (int64_t R : {3, 4}) {
    const std::string label =
        fmt::format("plain causal ring R={} B=2 H=2 S={} D=64 query tile 192", R, 333 * R);
    SUBCASE(label.c_str()) {
      Built b = build("ring_causal", kRingCausalPlain, R, {{"S", 333 * R}, {"D", 64}, {"QB", 192}});
      const std::string paths = run(b, 2, label);
      CHECK_MESSAGE(paths.find("tiles of 192 queries") != std::string::npos, paths);
    }
  }
}

// Without wgmma (sm_80 and later; here a Hopper GPU built for plain sm_90): the chain function's
// mma.sync tile (templates/mkc/attention_sm80.cuh), every feature of the task: ragged query and
// key lengths, batch and odd heads, bf16 and f16, causal and not, 192-query tiles (16 warps),
// causal offsets (rows that see no key), packed sequences, and ring attention's state carried
// across ranks' steps.
GPU_TEST_CASE("attention without wgmma: the mma.sync tile against fp64") {
  const DeviceInfo dev = device_info(0);
  if (dev.cc_major < 8) {
    MESSAGE("skipped: mma.sync needs sm_80 or later");
    return;
  }
  const std::string arch = dev.arch() == "sm_90a" ? "sm_90" : dev.arch();
  // On Hopper, the runtime takes the GPU for one without wgmma too (MKC_ARCH, read by
  // DeviceInfo::arch): the kernel then gets the portable tiles' shared memory, as on an A100.
  struct ArchGuard {
    explicit ArchGuard(const std::string& a) {
      if (const char* was = std::getenv("MKC_ARCH")) before = was;
      setenv("MKC_ARCH", a.c_str(), 1);
    }
    ~ArchGuard() {
      if (before.empty()) {
        unsetenv("MKC_ARCH");
      } else {
        setenv("MKC_ARCH", before.c_str(), 1);
      }
    }
    std::string before;
  } guard(arch);
  // The kernel runs mma.sync and no wgmma, and an attention-only kernel of 384 threads (168
  // registers) spills nothing. At 512 (192-query tiles: 128 registers) ptxas spills 192 bytes of
  // the task loop's and the round's values, and ring attention's kernel (its comm tasks beside)
  // about 20, none inside the MMA loop (cuobjdump -sass, 2026-12-07): recorded, not held.
  const auto check_tile = [](const Built& b, const std::string& label, bool no_spills = true) {
    CHECK_MESSAGE(b.jit.ptx.find("mma.sync.aligned.m16n8k16") != std::string::npos, label);
    CHECK_MESSAGE(b.jit.ptx.find("wgmma") == std::string::npos, label);
    // The compile summary names the tile that runs.
    std::string paths;
    for (const std::string& p : b.c->kernels[0].paths) paths += p + "; ";
    CHECK_MESSAGE(paths.find("attention_tile: mma.sync") != std::string::npos, paths);
    if (no_spills && b.c->kernels[0].threads <= 384)
      CHECK_MESSAGE(b.jit.spill_bytes == 0, label << ": " << jit::resources_text(b.jit));
    MESSAGE(label << ": " << jit::resources_text(b.jit));
  };
  for (const Shape& s : std::vector<Shape>{{1, 1, 128, 128, 128, 0, "bf16"},
                                           {2, 4, 1000, 1000, 128, 1, "bf16"},
                                           {4, 1, 129, 385, 64, 0, "bf16"},
                                           {1, 3, 777, 300, 64, 1, "f16"},
                                           {2, 2, 640, 2048, 128, 0, "f16"},
                                           {1, 32, 512, 512, 128, 1, "bf16"},
                                           {1, 2, 300, 577, 64, 0, "f16", 128, 192},
                                           {2, 2, 1000, 1000, 64, 1, "bf16", 128, 192}}) {
    const std::string label =
        fmt::format("mma.sync {} B={} H={} Sq={} Sk={} D={} causal={} query tile {}", s.dtype, s.b,
                    s.h, s.sq, s.sk, s.d, s.causal, s.qb);
    SUBCASE(label.c_str()) {
      Built b = build("attn", attention_text(s.dtype), 1, defines_of(s), arch);
      run(b, 2, label);
      check_tile(b, label);
    }
  }
  for (const auto& [d, qs, ks] : std::vector<std::array<int64_t, 3>>{
           {128, 1, 100}, {64, 200, 63}, {128, 500, 1}, {64, 1, 400}, {128, 1, 38}}) {
    const std::string label = fmt::format("mma.sync D={} q_start={} k_start={}", d, qs, ks);
    SUBCASE(label.c_str()) {
      Built b = build("offset", kOffset, 1, {{"D", d}, {"QS", qs}, {"KS", ks}}, arch);
      run(b, 2, label);
      check_tile(b, label);
    }
  }
  for (const auto& [h, t, d, n, causal] : std::vector<std::array<int64_t, 5>>{
           {3, 1000, 128, 5, 1}, {2, 2000, 64, 40, 1}, {1, 777, 64, 300, 0}}) {
    const std::string label =
        fmt::format("mma.sync packed H={} T={} D={} sequences={} causal={}", h, t, d, n, causal);
    SUBCASE(label.c_str()) {
      Built b = build("packed", kPacked, 1,
                      {{"H", h}, {"T", t}, {"D", d}, {"N", n}, {"MASK", causal + 1}}, arch);
      run(b, 3, label);
      check_tile(b, label);
    }
  }
  SUBCASE("mma.sync plain causal ring R=3") {
    Built b = build("ring_causal", kRingCausalPlain, 3, {{"S", 999}}, arch);
    run(b, 2, "mma.sync plain causal ring R=3");
    check_tile(b, "mma.sync plain causal ring R=3", false);
  }
}

}  // namespace
}  // namespace mkc::rt
