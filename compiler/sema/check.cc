// The checker's driver: check() runs a Checker per schedule and world size, and Checker::run() is
// the list of its phases. What each phase does is in the file named beside it (checker.h lists
// them all).
#include "compiler/sema/check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <set>

#include "compiler/sema/checker.h"
#include "dsl/lexer.h"
#include "support/check.h"
#include "support/error.h"

namespace mkc::compiler {

using dsl::DiagKind;

Checker::Checker(const dsl::Module& m, const dsl::Schedule& s, const CheckOptions& o, int64_t ranks,
                 int64_t per_node, dsl::Diagnostics& d)
    : file_(m.file), sched_(s), opts_(o), diags_(d) {
  out_.name = s.name;
  out_.ranks = ranks;
  out_.ranks_per_node = per_node;
  out_.ast = &s;
  r_note_ = fmt::format(" (with {} = {})", s.ranks ? s.ranks->name : std::string("R"), ranks);
  if (s.ranks) ranks_names_ = {s.ranks->name, s.ranks->per_node};
}

bool Checker::run(CheckedSchedule* result) {
  const size_t errors_before = diags_.error_count();
  // Names and parameters (check_names.cc, check_decls.cc).
  declare_names();
  // A clash of names (reported, with both places) leaves a name meaning two things; everything
  // after resolves names, so it stops here rather than check a schedule it cannot read.
  if (diags_.error_count() != errors_before) return false;
  check_defines();
  evaluate_params();
  // Declarations and operations are checked even after errors, so one run reports all of a
  // file's mistakes; a tensor that failed its own check is skipped silently where it is used.
  for (const dsl::Item& it : sched_.items) check_decl_item(it);
  // Operations, loops unrolled within their budget (check_loops.cc, check_ops.cc,
  // check_clauses.cc).
  check_budget();
  {
    LoopEnv env;
    unroll(sched_.items, env, {}, false);
    MKC_CHECK(diags_.error_count() != errors_before ||
                  out_.ops.size() <= static_cast<size_t>(instance_bound_),
              "{} instances unrolled, past the bound of {} proved before", out_.ops.size(),
              instance_bound_);
    mark_first_and_last();
    // Dependencies, then the safety rules (check_deps.cc).
    resolve_deps();
  }
  if (diags_.error_count() == errors_before) check_races();
  if (diags_.error_count() == errors_before) check_cycles();
  if (diags_.error_count() == errors_before) check_forward_waits();
  if (diags_.error_count() != errors_before) return false;
  *result = std::move(out_);
  return true;
}

void add_define(std::string_view text, CheckOptions* options) {
  const size_t eq = text.find('=');
  const std::string name(text.substr(0, eq));
  if (eq == std::string_view::npos || name.empty()) {
    throw UserError(fmt::format("-D {}: expected -D NAME=VALUE, e.g. -D M=4096", text));
  }
  const bool ident = (std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_') &&
                     std::all_of(name.begin(), name.end(), [](char c) {
                       return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
                     });
  if (!ident) throw UserError(fmt::format("-D {}: `{}` is not a parameter name", text, name));
  std::string why;
  const std::optional<int64_t> value = dsl::parse_integer_value(text.substr(eq + 1), &why);
  if (!value) throw UserError(fmt::format("-D {}: {}", text, why));
  const auto [it, inserted] = options->defines.emplace(name, *value);
  if (!inserted) {
    throw UserError(fmt::format("-D {}: `{}` is already set (-D {}={}); give each parameter once",
                                text, name, name, it->second));
  }
}

std::vector<CheckedSchedule> check(const dsl::Module& module, const CheckOptions& options,
                                   dsl::Diagnostics& diags) {
  std::vector<CheckedSchedule> out;
  std::vector<int64_t> sizes = options.ranks;
  if (sizes.empty()) sizes = {1, 2, 4, 8};
  std::set<std::string> names;
  for (const dsl::Schedule& s : module.schedules) {
    if (!names.insert(s.name).second) {
      diags.error(DiagKind::kDuplicateName, module.file, s.name_span,
                  fmt::format("schedule `{}` is declared twice in this file", s.name));
      continue;
    }
    for (int64_t r : sizes) {
      if (r <= 0 || r > kMaxRanks) {
        throw UserError(
            fmt::format("--ranks {}: the world size must be between 1 and {}", r, kMaxRanks));
      }
      int64_t per_node = options.ranks_per_node > 0 ? options.ranks_per_node : r;
      if (r % per_node != 0) {
        throw UserError(
            fmt::format("--ranks {} is not a multiple of --ranks-per-node {}", r, per_node));
      }
      CheckedSchedule cs;
      Checker c(module, s, options, r, per_node, diags);
      if (!c.run(&cs)) break;
      if (r == sizes.back()) out.push_back(std::move(cs));
    }
  }
  if (diags.has_errors()) out.clear();
  return out;
}

}  // namespace mkc::compiler
