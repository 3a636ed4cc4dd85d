#include "tune/apply.h"

#include <fmt/format.h>
#include <fmt/ostream.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <limits>
#include <memory>

#include "jit/jit.h"
#include "jit/nvrtc.h"
#include "support/error.h"

namespace mkc::tune {
namespace {

std::string tile_text(const std::vector<int64_t>& t) {
  std::string out;
  for (int64_t v : t) out += fmt::format("{}{}", out.empty() ? "" : ", ", v);
  return "tile(" + out + ")";
}

std::string knobs_text(const plan::LowerOptions::Tuned& k) {
  if (k.split_k > 1) return fmt::format("{} split-K {}", tile_text(k.tile), k.split_k);
  if (k.cluster > 1) return fmt::format("{} cluster {}", tile_text(k.tile), k.cluster);
  return tile_text(k.tile);
}

}  // namespace

Key tune_key(const dsl::SourceFile& file, const compiler::CheckedSchedule& s,
             const compiler::CheckOptions& options, const std::string& arch) {
  Key k;
  k.schedule_hash = schedule_hash(file.text());
  k.schedule = s.name;
  k.defines = s.params;  // every parameter's value, defaults included
  k.ranks = s.ranks;
  k.ranks_per_node = s.ranks_per_node;
  k.arch = arch;
  k.sms = options.sms;
  k.nvrtc = jit::nvrtc_version();
  return k;
}

std::string default_db_path(const std::string& flag) {
  if (!flag.empty()) return flag;
  if (const char* e = std::getenv("MKC_TUNE_DB"); e != nullptr && *e != '\0') return e;
  try {
    return db_path("", jit::cache_dir(jit::JitOptions{}));
  } catch (const EnvironmentError&) {
    return "";
  }
}

compiler::TunedFor tuned_from_db(const std::string& path,
                                 std::shared_ptr<const dsl::SourceFile> file,
                                 const compiler::CheckOptions& options, const std::string& arch,
                                 std::ostream& err) {
  if (mode_from_env() == Mode::kOff) return nullptr;
  auto warned = std::make_shared<bool>(false);
  return [path, file, options, arch, &err, warned](const compiler::CheckedSchedule& s) {
    Knobs out;
    std::vector<std::string> warnings;
    const Key key = tune_key(*file, s, options, arch);
    const std::optional<Entry> e = lookup(path, key, &warnings);
    if (!*warned) {
      for (const std::string& w : warnings) fmt::print(err, "mkc: warning: {}\n", w);
      *warned = !warnings.empty();
    }
    if (!e) return out;
    std::string applied;
    for (const auto& [op, k] : e->ops) {
      out[op] = plan::LowerOptions::Tuned{k.tile, k.split_k, k.cluster};
      applied += fmt::format("{}{} {}", applied.empty() ? "" : ", ", op, knobs_text(out[op]));
    }
    fmt::print(err, "mkc: note: tuned knobs from `{}` ({}): {}\n", path, e->tuned_at, applied);
    return out;
  };
}

std::vector<TunableOp> tunable_ops(const compiler::CheckedSchedule& s, int64_t compute_ctas,
                                   int64_t sms) {
  std::vector<TunableOp> out;
  for (const compiler::OpInstance& op : s.ops) {
    if (!op.tile.empty()) continue;
    if (std::any_of(out.begin(), out.end(), [&](const TunableOp& t) { return t.op == op.name; }))
      continue;
    if (op.kind == compiler::OpKind::kGemm) {
      // The problem the lowering ranks this GEMM's candidates by.
      out.push_back(
          TunableOp{op.name, op.kind, plan::gemm_problem(s, op, compute_ctas, sms, true), {}, {}});
    } else if (op.kind == compiler::OpKind::kAttention) {
      // At head dim 64 (compiler/kinds/attention_tile.cc): 128 or 192 queries a tile, key blocks
      // of 128 or (with 128 queries) 192; 16-bit Q, K and V, as the tensor-core tile takes them.
      const compiler::TensorUse& q = op.inputs.at(0);
      const compiler::DType t = s.tensors.at(q.tensor).dtype;
      const bool half = t == compiler::DType::kBf16 || t == compiler::DType::kF16;
      if (half && !q.shape.empty() && q.shape.back() == 64) {
        const int64_t rows = plan::attention_default_rows(s, op);
        std::vector<std::vector<int64_t>> others;
        if (rows != 128) others.push_back({128, 128});
        others.push_back({128, 192});
        out.push_back(TunableOp{op.name, op.kind, {}, {rows, 128}, others});
      }
    }
  }
  return out;
}

Entry search(const std::vector<TunableOp>& ops, const Measure& measure,
             const SearchOptions& options, std::ostream& progress) {
  const auto start = std::chrono::steady_clock::now();
  const auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  Knobs best_knobs;
  const double base = measure(best_knobs);
  fmt::print(progress, "  the compiler's own choice: {:.2f} us\n", base);
  progress.flush();
  double best = base;
  Entry entry;
  bool out_of_time = false;
  for (const TunableOp& o : ops) {
    // Each trial's knobs and its line: the model's candidates after its first, the compiler's own
    // pick, measured above as the baseline (a GEMM), or the other tiles (an attention).
    std::vector<std::pair<plan::LowerOptions::Tuned, std::string>> trials;
    if (o.kind == compiler::OpKind::kGemm) {
      std::vector<GemmCandidate> cands = gemm_candidates(o.problem);
      if (!cands.empty()) cands.erase(cands.begin());
      cands.resize(
          std::min<size_t>(cands.size(), static_cast<size_t>(std::max(options.candidates, 1))));
      for (const GemmCandidate& c : cands) {
        trials.push_back({plan::LowerOptions::Tuned{{c.bm, c.bn, c.bk}, c.split_k, c.cluster},
                          fmt::format("{} (model {:.0f} us)", c.text(), c.predicted_us)});
      }
    } else {
      for (const std::vector<int64_t>& t : o.tiles)
        trials.push_back({plan::LowerOptions::Tuned{t, 1, 1}, tile_text(t)});
    }
    for (size_t i = 0; i < trials.size(); ++i) {
      if (elapsed() > options.budget_s) {
        out_of_time = true;
        break;
      }
      Knobs trial = best_knobs;
      trial[o.op] = trials[i].first;
      const double us = measure(trial);
      const bool better = us < best;
      fmt::print(progress, "  {} {} [{}/{}]: {:.2f} us{}\n", o.op, trials[i].second, i + 1,
                 trials.size(), us, better ? "  best so far" : "");
      progress.flush();
      if (better) {
        best = us;
        best_knobs = trial;
      }
    }
    if (out_of_time) {
      fmt::print(progress, "  the time budget ({:.0f} s) is spent: the best so far wins\n",
                 options.budget_s);
      break;
    }
  }
  for (const auto& [op, k] : best_knobs)
    entry.ops[op] = OpKnobs{k.tile, k.split_k, best, k.cluster};
  entry.us = best;
  return entry;
}

}  // namespace mkc::tune
