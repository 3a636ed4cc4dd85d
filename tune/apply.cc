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

std::vector<TunableGemm> tunable_gemms(const compiler::CheckedSchedule& s, int64_t compute_ctas,
                                       int64_t sms) {
  std::vector<TunableGemm> out;
  for (const compiler::OpInstance& op : s.ops) {
    if (op.kind != compiler::OpKind::kGemm || !op.tile.empty()) continue;
    if (std::any_of(out.begin(), out.end(), [&](const TunableGemm& g) { return g.op == op.name; }))
      continue;
    // The problem the lowering ranks this GEMM's candidates by.
    out.push_back(TunableGemm{op.name, plan::gemm_problem(s, op, compute_ctas, sms, true)});
  }
  return out;
}

Entry search(const std::vector<TunableGemm>& gemms, const Measure& measure,
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
  for (const TunableGemm& g : gemms) {
    // The model's first is the compiler's own pick, measured above as the baseline.
    std::vector<GemmCandidate> cands = gemm_candidates(g.problem);
    if (!cands.empty()) cands.erase(cands.begin());
    const size_t n =
        std::min<size_t>(cands.size(), static_cast<size_t>(std::max(options.candidates, 1)));
    for (size_t i = 0; i < n; ++i) {
      if (elapsed() > options.budget_s) {
        out_of_time = true;
        break;
      }
      const GemmCandidate& c = cands[i];
      Knobs trial = best_knobs;
      trial[g.op] = plan::LowerOptions::Tuned{{c.bm, c.bn, c.bk}, c.split_k, c.cluster};
      const double us = measure(trial);
      const bool better = us < best;
      fmt::print(progress, "  {} {} [{}/{}]: {:.2f} us (model {:.0f} us){}\n", g.op, c.text(),
                 i + 1, n, us, c.predicted_us, better ? "  best so far" : "");
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
