// attention_tile: queries [q0, q1) of slice l against every key (with packed sequences, those of
// each query's own), with an online softmax whose state (f32 compiler scratch) carries over the
// instances of one merge group. Views {Q, K, V, O[, acc, max, sum]} as [L, S, D][, the
// sequences' cumulative lengths] (abi.h, AttentionTileArgs). Device code: the TMA + wgmma tile
// (templates/mkc/attention_sm90.cuh) for bf16/f16 at head dims 64 and 128, the mma.sync tile
// (templates/mkc/attention_sm80.cuh) for those on sm_80 and later without wgmma, else SIMT
// (templates/mkc/attention_simt.cuh).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "compiler/kinds/kind.h"
#include "compiler/kinds/kinds.h"
#include "compiler/kinds/view_math.h"

namespace mkc::kinds {
namespace {

class AttentionTile final : public Kind {
 public:
  AttentionTile() : Kind(TaskKind::kAttentionTile) {}
  // templates/mkc/attention_simt.cuh: the rows' running max and sum (the TMA tile has none).
  int static_smem(const Source& s, const Task& t) const override {
    return tma_d(s, t) ? 0 : 2 * 256 * 4;
  }

  size_t fixed_args() const override { return sizeof(abi::AttentionTileArgs) / 8; }

  std::vector<Touch> touches(const Task& t) const override {
    const abi::AttentionTileArgs a = plan::args_as<abi::AttentionTileArgs>(t);
    std::vector<Touch> out;
    out.push_back(Touch{0, {a.l, a.q0}, {a.l + 1, a.q1}, false});
    out.push_back(Touch{1, {a.l}, {a.l + 1}, false});
    out.push_back(Touch{2, {a.l}, {a.l + 1}, false});
    if (a.seqlens) out.push_back(Touch{static_cast<int>(a.seqlens), {}, {}, false});
    if (a.last) out.push_back(Touch{3, {a.l, a.q0}, {a.l + 1, a.q1}, true});
    if (a.accumulate) {
      for (int v = 4; v < 7; ++v) {
        if (!a.first) out.push_back(Touch{v, {a.l, a.q0}, {a.l + 1, a.q1}, false});
        out.push_back(Touch{v, {a.l, a.q0}, {a.l + 1, a.q1}, true});
      }
    }
    return out;
  }

  void execute(const Memory& mem, const Task& t) const override {
    const auto buf = [&](const View& v) -> std::vector<double>& { return mem.of(v); };
    const View &q = t.views[0], &k = t.views[1], &v = t.views[2], &o = t.views[3];
    const abi::AttentionTileArgs at = plan::args_as<abi::AttentionTileArgs>(t);
    const int64_t l = at.l, Sk = k.shape[1], D = q.shape[2], Dv = v.shape[2];
    const bool causal = at.causal, acc_on = at.accumulate, first = at.first, last = at.last;
    double scale = 0;
    std::memcpy(&scale, &at.scale_bits, sizeof(scale));
    // A tile that sees no key and neither opens nor closes its merge returns at once, as on the
    // device.
    if (acc_on && !first && !last && causal && at.q1 + at.causal_offset <= 0) return;
    // Packed sequences: the keys of query qi's own, [lo, hi) (the checker leaves no offset).
    const auto keys_of = [&](int64_t qi) -> std::pair<int64_t, int64_t> {
      if (!at.seqlens) return {0, Sk};
      const View& lv = t.views[at.seqlens];
      const std::vector<double>& cu = buf(lv);
      // A row in no sequence (past L[n]: padding) sees no key and gets zeros.
      int64_t lo = 0, hi = 0;
      for (int64_t d = 0; d + 1 < lv.shape[0]; ++d) {
        const auto b = static_cast<int64_t>(cu[flat(lv, d)]),
                   e = static_cast<int64_t>(cu[flat(lv, d + 1)]);
        if (b <= qi && qi < e) {
          // Within the slice, as on the device (a malformed L reads nothing outside K and V).
          lo = std::clamp<int64_t>(b, 0, Sk);
          hi = std::clamp<int64_t>(e, 0, Sk);
          break;
        }
      }
      return {lo, hi};
    };
    for (int64_t qi = at.q0; qi < at.q1; ++qi) {
      double m = -std::numeric_limits<double>::infinity(), sum = 0;
      std::vector<double> acc(Dv, 0);
      if (acc_on && !first) {
        m = buf(t.views[5])[flat(t.views[5], l, qi, 0)];
        sum = buf(t.views[6])[flat(t.views[6], l, qi, 0)];
        for (int64_t d = 0; d < Dv; ++d) acc[d] = buf(t.views[4])[flat(t.views[4], l, qi, d)];
      }
      const auto [lo, hi] = keys_of(qi);
      for (int64_t j = lo; j < hi; ++j) {
        if (causal && j > qi + at.causal_offset) continue;
        double s = 0;
        const int64_t qo = flat(q, l, qi, 0), ko = flat(k, l, j, 0);
        const std::vector<double>& qv = buf(q);
        const std::vector<double>& kv = buf(k);
        for (int64_t d = 0; d < D; ++d) s += qv[qo + d] * kv[ko + d];
        s *= scale;
        const double m_new = std::max(m, s);
        const double corr = std::isinf(m) ? 0 : std::exp(m - m_new);
        const double p = std::exp(s - m_new);
        sum = sum * corr + p;
        for (int64_t d = 0; d < Dv; ++d) acc[d] = acc[d] * corr + p * buf(v)[flat(v, l, j, d)];
        m = m_new;
      }
      if (acc_on) {
        buf(t.views[5])[flat(t.views[5], l, qi, 0)] = m;
        buf(t.views[6])[flat(t.views[6], l, qi, 0)] = sum;
        for (int64_t d = 0; d < Dv; ++d) buf(t.views[4])[flat(t.views[4], l, qi, d)] = acc[d];
      }
      if (last) {
        // A query that saw no key (causal, every key after it) gets zeros.
        for (int64_t d = 0; d < Dv; ++d) buf(o)[flat(o, l, qi, d)] = sum > 0 ? acc[d] / sum : 0;
      }
    }
  }

  // Its work, in query x key pairs: its queries times the keys they see (causal: up to the last
  // query's last visible key), plus a fixed part for loading Q and writing O or the softmax state
  // (about 640 keys' worth on an H200: a tile that sees no key but writes O takes 9 us, one
  // against 8K keys 105 us). A tile that sees no key and neither opens nor closes its
  // accumulation returns at once (templates/mkc/attention_sm90.cuh): a small part only. Without
  // the fixed part such tiles, cheap on paper, all went to the least loaded CTA, and one CTA ran
  // 455 of them in a row (causal ring attention, 2.6x the attention alone).
  //
  // With packed sequences the keys a tile sees are data: the tile is charged as if the n
  // sequences were of equal length (S / n), by its rows' places in theirs. Charged by the rows'
  // places in the whole slice, the late tiles of a long packing looked up to n times dearer than
  // they are and the placement went wrong (H100, 4 x 32 x 2048 x 128 causal as 4 sequences of
  // 2,048: 1.69x the time of the same work as a batch).
  std::optional<int64_t> compute_load(const Task& t) const override {
    const auto a = plan::args_as<abi::AttentionTileArgs>(t);
    const int64_t sk = t.views.at(1).shape.at(1);
    if (a.seqlens) {
      const int64_t n = std::max<int64_t>(1, t.views.at(a.seqlens).shape.at(0) - 1);
      const int64_t mean = std::max<int64_t>(1, sk / n);
      // A tile across two sequences sees both (at most).
      const bool across = a.q0 % mean > (a.q1 - 1) % mean || a.q1 - a.q0 > mean;
      const int64_t keys = across     ? std::min(sk, 2 * mean)
                           : a.causal ? (a.q1 - 1) % mean + 1
                                      : mean;
      return (a.q1 - a.q0) * (keys + 640);
    }
    const int64_t keys = a.causal ? std::clamp<int64_t>(a.q1 + a.causal_offset, 0, sk) : sk;
    const bool returns_at_once = keys == 0 && a.accumulate && !a.first && !a.last;
    return (a.q1 - a.q0) * (returns_at_once ? 64 : keys + 640);
  }

  double interpreter_work(const Task& t, double) const override {
    const abi::AttentionTileArgs a = plan::args_as<abi::AttentionTileArgs>(t);
    return static_cast<double>(a.q1 - a.q0) * static_cast<double>(t.views[1].shape[1]) *
           static_cast<double>(t.views[0].shape[2] + t.views[2].shape[2]);
  }

  std::string key_variant(const Source& s, const Task& t) const override {
    const char* packed = varlen(t) ? "_varlen" : "";
    if (const int d = tma_d(s, t))
      return fmt::format(":tma_d{}_k{}_q{}{}", d, key_block(t, d), query_block(t, d), packed);
    return packed;
  }

  // The tile the kernel runs on the target (support/arch.h): the chain function's wgmma tile on
  // sm_90a, its mma.sync tile on sm_80 and later, else SIMT.
  std::string path(const Source& s, const Task& t) const override {
    const int d = tma_d(s, t);
    const char* packed = varlen(t) ? ", packed sequences" : "";
    if (d == 0)
      return std::string(name()) + ": SIMT (needs bf16/f16 Q, K, V with head dims 64 or 128)";
    switch (tile_target(s.arch())) {
      case TileTarget::kWgmma:
        return fmt::format(
            "{}: sm_90a wgmma + TMA, head dim {}, tiles of {} queries in {} consumer warpgroups, "
            "blocks of {} keys{}",
            name(), d, query_block(t, d), query_block(t, d) / 64, key_block(t, d), packed);
      case TileTarget::kMmaSync:
        return fmt::format(
            "{}: mma.sync ({} has no wgmma), head dim {}, tiles of {} queries, 16 rows a warp, "
            "blocks of {} keys{}",
            name(), s.arch(), d, query_block(t, d), abi::attention_portable_keys(d), packed);
      case TileTarget::kSimt:
        break;
    }
    return fmt::format("{}: SIMT ({} has no mma.sync)", name(), s.arch());
  }

  Launch launch(const Source& s, const Task& t) const override {
    Launch l;
    if (const int d = tma_d(s, t)) {
      l.threads = abi::attention_threads(query_block(t, d));
      l.dynamic_smem = abi::attention_smem_bytes(d, key_block(t, d), query_block(t, d));
      // Before Hopper the chain function runs the mma.sync tile (attention_sm80.cuh).
      l.portable_smem = abi::attention_portable_smem_bytes(d, l.threads);
    }
    return l;
  }

  // The tensor-core tile of three consumer warpgroups (192 queries at head dim 64) runs its CTA's
  // consecutive tiles as one pipeline (attention_chain_tma): 2-4% faster at 2K-4K keys on an
  // H100; with two (128 queries) chains measured 1.5-2.3% slower at head dim 128, so those run
  // one tile a call (the same function, a chain of one).
  bool chains(const Source& s, const Task& t) const override {
    const int d = tma_d(s, t);
    return d != 0 && query_block(t, d) == 192;
  }

  void emit_chain(Source& s, const Task& t) const override {
    const int d = tma_d(s, t);
    s.line("  extern __shared__ unsigned char mkc_smem[];");
    s.line(chain_call(s, t, d, "tasks, views, args, list, n"));
  }

  void emit(Source& s, const Task& t) const override {
    if (chains(s, t)) {
      s.line("  // Runs as chains (chain functions below).");
    } else if (const int d = tma_d(s, t)) {
      // A chain of this one task: its record points at v and args themselves.
      s.line("  extern __shared__ unsigned char mkc_smem[];");
      s.line("  const mkc::TaskRecord one{};");
      s.line("  const int only = 0;");
      s.line(chain_call(s, t, d, "&one, v, args, &only, 1"));
    } else {
      s.line(fmt::format("  mkc::attention_tile<{}, {}>(a, v, args, kBuffers);", s.type_of(t, 0),
                         s.type_of(t, 3)));
    }
  }

  std::vector<int64_t> device_args(Source& s, const Task& t) const override {
    const int d = tma_d(s, t);
    if (d == 0) return t.args;
    // 3-D maps of the [L, S, D] views: boxes of 64 columns x a query tile's (Q) or a key
    // block's (K, V) rows x 1 slice.
    abi::AttentionTileArgs at = plan::args_as<abi::AttentionTileArgs>(t);
    const int kb = key_block(t, d);
    at.map_q = s.tensor_map(t.views[0], query_block(t, d), 64);
    at.map_k = s.tensor_map(t.views[1], kb, 64);
    at.map_v = s.tensor_map(t.views[2], kb, 64);
    return plan::args_words(at);
  }

 private:
  // The call of attention_chain_tma for tiles of t's class at head dim d, over the chain given by
  // `chain` (its records, views, args, list and length).
  static std::string chain_call(const Source& s, const Task& t, int d, const char* chain) {
    return fmt::format(
        "  mkc::sm90::attention_chain_tma<{}, {}, {}, {}, {}{}>(a, {}, kBuffers, mkc_smem, "
        "next_args, next_v);",
        s.type_of(t, 0), s.type_of(t, 3), d, key_block(t, d), query_block(t, d),
        varlen(t) ? ", true" : "", chain);
  }

  // Packed sequences (`seqlens`): a template argument of the tiles, so that the others' code is
  // what it was.
  static bool varlen(const Task& t) {
    return plan::args_as<abi::AttentionTileArgs>(t).seqlens != 0;
  }

  // Keys per block of the tensor-core tile at head dim d (AttnShape in attention_sm90.cuh): 192
  // at head dim 64 when the schedule asks for it (tile(128, 192)), else 128. At head dim 64 a
  // block's fixed costs (its barriers, the row maxima's shuffles, the turn between the consumer
  // warpgroups) weigh twice what they do at 128 against the block's MMAs. Tiles of 192 queries
  // take blocks of 128: three consumer warpgroups have 160 registers a thread, not 232, and S
  // and P of 192 keys do not fit beside O.
  static int key_block(const Task& t, int d) {
    return d == 64 && query_block(t, d) == 128 &&
                   plan::args_as<abi::AttentionTileArgs>(t).key_block == 192
               ? 192
               : 128;
  }

  // Queries per tile of the tensor-core tile at head dim d: 192 at head dim 64 when the schedule
  // asks for it (tile(192[, k])), in three consumer warpgroups of 64 rows (FlashAttention-3's
  // tile at head dim 64: a tile's fixed costs spread over half as many rows again, and four
  // warps per scheduler, not three, to hide the softmax's latencies); else 128 in two.
  static int query_block(const Task& t, int d) {
    return d == 64 && plan::args_as<abi::AttentionTileArgs>(t).query_block == 192 ? 192 : 128;
  }

  // The head dim (64 or 128) when the TMA + wgmma tile can take the task, else 0: Q, K, V of one
  // 16-bit type, D = Dv of 64 or 128, query tiles of at most 128 (192 at head dim 64 when the
  // op's tiles are of 192), views 16-byte aligned.
  static int tma_d(const Source& s, const Task& t) {
    if (!s.tensor_cores()) return 0;
    const View &q = t.views[0], &k = t.views[1], &v = t.views[2];
    const compiler::DType tq = s.dtype(t, 0);
    if (!is_16bit(tq) || s.dtype(t, 1) != tq || s.dtype(t, 2) != tq) return 0;
    const int64_t d = q.shape[2];
    if ((d != 64 && d != 128) || k.shape[2] != d || v.shape[2] != d) return 0;
    const abi::AttentionTileArgs a = plan::args_as<abi::AttentionTileArgs>(t);
    if (a.q1 - a.q0 > query_block(t, static_cast<int>(d))) return 0;
    for (const View* x : {&q, &k, &v}) {
      if ((x->offset * 2) % 16 != 0) return 0;
    }
    return static_cast<int>(d);
  }
};

}  // namespace

template <>
const Kind& kind<TaskKind::kAttentionTile>() {
  static const AttentionTile k;
  return k;
}

}  // namespace mkc::kinds
