// Front-end benchmark (no GPU): how long parsing and checking a schedule takes as it grows, on
// generated schedules of chained copies and all-reduces (a chain of dependent operations is what
// the race and cycle checks work hardest on). The target is well under 100 ms for 1,000 lines in
// an optimized build (`bazel run -c opt //bench:check_bench`); the unit tests only check that
// such a schedule is accepted.
//
// Usage: check_bench [--lines 250,500,1000,2000] [--ranks 8] [--repeat 5] [--csv FILE]
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "bench/csv.h"
#include "bench/main.h"
#include "compiler/sema/check.h"
#include "dsl/diagnostics.h"
#include "dsl/parser.h"
#include "dsl/source.h"
#include "support/error.h"

namespace {

using mkc::UserError;

// About `lines` lines: tensors, then copies and all-reduces, each after the previous one.
std::string generated(int lines) {
  const int tensors = std::max(2, lines / 3);
  std::string s = "schedule big {\n  ranks R\n  param N = 4096\n";
  for (int i = 0; i < tensors; ++i) s += fmt::format("  scratch T{} : f32[N, 64] symmetric\n", i);
  for (int i = 0; i + 1 < tensors; ++i) {
    s += fmt::format("  compute c{} = copy(T{} -> T{}) tile(64, 64){}\n", i, i, i + 1,
                     i > 0 ? fmt::format(" after a{}.chunk", i - 1) : "");
    s += fmt::format("  comm    a{} = allreduce(T{}, sum) chunk(64, 64) after c{}.tile\n", i, i + 1,
                     i);
  }
  return s + "}\n";
}

std::vector<int> parse_list(const std::string& flag, const std::string& text) {
  std::vector<int> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, comma - pos);
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v <= 0 || v > 1'000'000)
      throw UserError(fmt::format("{}: `{}` is not a positive integer", flag, item));
    out.push_back(static_cast<int>(v));
    pos = comma + 1;
  }
  return out;
}

int run(int argc, char** argv) {
  std::vector<int> sizes = {250, 500, 1000, 2000};
  int ranks = 8, repeat = 5;
  std::string csv_path;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw UserError(fmt::format("{} needs a value", a));
      return argv[++i];
    };
    if (a == "--lines") {
      sizes = parse_list("--lines", value());
    } else if (a == "--ranks") {
      ranks = parse_list("--ranks", value()).at(0);
    } else if (a == "--repeat") {
      repeat = parse_list("--repeat", value()).at(0);
    } else if (a == "--csv") {
      csv_path = value();
    } else {
      throw UserError(
          fmt::format("unknown option `{}`; see the comment at the top of {}", a, __FILE__));
    }
  }
  mkc::bench::CsvWriter csv(csv_path, {"bench", "case", "lines", "ranks", "best_ms", "median_ms"});
  fmt::print("check_bench: parse + check, {} ranks, best and median of {}\n", ranks, repeat);
  fmt::print("{:>8} {:>10} {:>10}\n", "lines", "best ms", "median ms");
  for (int size : sizes) {
    const std::string text = generated(size);
    const int lines = static_cast<int>(std::count(text.begin(), text.end(), '\n'));
    std::vector<double> ms;
    for (int k = 0; k < repeat; ++k) {
      const auto t0 = std::chrono::steady_clock::now();
      mkc::dsl::Diagnostics diags;
      const auto file = std::make_shared<mkc::dsl::SourceFile>("big.mks", text);
      const mkc::dsl::Module m = mkc::dsl::parse(file, diags);
      mkc::compiler::CheckOptions opts;
      opts.ranks = {ranks};
      if (!diags.has_errors()) mkc::compiler::check(m, opts, diags);
      ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      if (diags.has_errors()) {
        fmt::print(stderr, "{}", mkc::dsl::render_text(diags.all(), false));
        return 1;
      }
    }
    std::sort(ms.begin(), ms.end());
    const double median = ms[ms.size() / 2];
    fmt::print("{:>8} {:>10.2f} {:>10.2f}\n", lines, ms.front(), median);
    csv.row({{"bench", "check_bench"},
             {"case", fmt::format("{} lines", lines)},
             {"lines", std::to_string(lines)},
             {"ranks", std::to_string(ranks)},
             {"best_ms", mkc::bench::num(ms.front())},
             {"median_ms", mkc::bench::num(median)}});
  }
  csv.finish();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return mkc::bench::guarded_main("check_bench", run, argc, argv);
}
