// The plan's tables as data (codegen::CodegenOptions::Tables::kData, MKC_TABLES=data): for every
// sample at small shapes and R 1, 2, 3 (where the shape divides by 3) and two emulated nodes, the
// source declares each table with the size of its image, the code around the tables is the
// constant-table source's, and every image decodes to the numbers the constant-table source
// spells out (two independent ways of writing the same tables). NVRTC compiles every sample's
// data-table kernel at its default shape, without spills, into a cubin that holds each table's
// symbol, and its source no longer grows with the plan. MKC_TABLES takes `source` and `data` and
// refuses anything else.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "compiler/codegen/codegen.h"
#include "compiler/pipeline.h"
#include "dsl/parser.h"
#include "jit/jit.h"
#include "support/error.h"
#include "tests/compiler/small_shapes.h"

namespace mkc {
namespace {

using codegen::CodegenOptions;

// The plan of a sample; a refused schedule fails the test unless `may_refuse` (a world size the
// sample's shapes do not divide), when it is null.
std::unique_ptr<compiler::Compilation> plan_only(const std::string& path, int64_t ranks,
                                                 int64_t per_node,
                                                 const std::map<std::string, int64_t>& defines,
                                                 bool may_refuse = false) {
  compiler::CheckOptions opts;
  opts.ranks = {ranks};
  if (per_node > 0) opts.ranks_per_node = per_node;
  opts.defines = defines;
  auto c = compiler::compile_file(dsl::SourceFile::read(path), opts, "", /*generate=*/false);
  if (!c->ok() && may_refuse) return nullptr;
  REQUIRE_MESSAGE(c->ok(), dsl::render_text(c->diagnostics.all(), false));
  return c;
}

codegen::Generated generate(const compiler::Compilation& c, CodegenOptions::Tables tables) {
  CodegenOptions co;
  co.file = c.file;
  co.tables = tables;
  return codegen::generate(c.plans.at(0), co);
}

// Every integer of a constant table's initializer in the source, comments left out.
std::vector<int64_t> source_numbers(const std::string& source, const std::string& declaration) {
  const size_t at = source.find(declaration);
  REQUIRE_MESSAGE(at != std::string::npos, declaration);
  const size_t end = source.find("};", at);
  REQUIRE(end != std::string::npos);
  std::vector<int64_t> out;
  size_t i = at + declaration.size();
  while (i < end) {
    const char c = source[i];
    if (c == '/' && source[i + 1] == '/') {
      i = source.find('\n', i);
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      size_t used = 0;
      out.push_back(std::stoll(source.substr(i, 32), &used));
      i += used;
    } else {
      ++i;
    }
  }
  return out;
}

const codegen::TableImage& image(const codegen::Generated& g, const std::string& symbol) {
  for (const codegen::TableImage& t : g.tables)
    if (t.symbol == symbol) return t;
  FAIL("no table image " << symbol);
  throw std::logic_error("unreachable");
}

// An image's rows, each as the integers of its fields, the trailing zero row left out (the
// constant table's placeholder is `{}` or `0`, which spells no integer).
template <typename T, typename F>
std::vector<int64_t> image_numbers(const codegen::TableImage& t, F&& fields) {
  REQUIRE(t.bytes.size() % sizeof(T) == 0);
  const size_t rows = t.bytes.size() / sizeof(T);
  REQUIRE(rows >= 1);
  std::vector<int64_t> out;
  for (size_t r = 0; r + 1 < rows; ++r) {
    T row;
    std::memcpy(&row, t.bytes.data() + r * sizeof(T), sizeof(T));
    fields(row, &out);
  }
  T last;
  std::memcpy(&last, t.bytes.data() + (rows - 1) * sizeof(T), sizeof(T));
  const T zero{};
  CHECK_MESSAGE(std::memcmp(&last, &zero, sizeof(T)) == 0, t.symbol << " ends in a zero row");
  return out;
}

void compare_tables(const std::string& what, const codegen::Generated& src,
                    const codegen::Generated& data) {
  INFO(what);
  CHECK(src.tables.empty());
  REQUIRE(data.tables.size() == 7);
  // The same code around the tables: everything before them, and the kernel after them.
  const size_t src_at = src.source.find("// The plan: ");
  const size_t data_at = data.source.find("// The plan: ");
  REQUIRE(src_at != std::string::npos);
  REQUIRE(src_at == data_at);
  CHECK(src.source.compare(0, src_at, data.source, 0, data_at) == 0);
  const size_t src_kernel = src.source.find("extern \"C\" __global__");
  const size_t data_kernel = data.source.find("extern \"C\" __global__");
  REQUIRE(src_kernel != std::string::npos);
  REQUIRE(data_kernel != std::string::npos);
  CHECK(src.source.substr(src_kernel) == data.source.substr(data_kernel));
  CHECK(src.tensor_maps.size() == data.tensor_maps.size());
  CHECK(src.dynamic_smem == data.dynamic_smem);
  // Each table declared with its image's rows.
  const std::map<std::string, size_t> row_bytes = {{"kTasks", sizeof(abi::TaskRecord)},
                                                   {"kViews", sizeof(abi::View)},
                                                   {"kArgs", sizeof(long long)},
                                                   {"kWaits", sizeof(abi::Wait)},
                                                   {"kSignals", sizeof(abi::Signal)},
                                                   {"kCtaStart", sizeof(int)},
                                                   {"kCtaList", sizeof(int)}};
  for (const codegen::TableImage& t : data.tables) {
    REQUIRE(row_bytes.count(t.symbol));
    CHECK(data.source.find(fmt::format(
              " {}[{}];", t.symbol, t.bytes.size() / row_bytes.at(t.symbol))) != std::string::npos);
    CHECK(src.source.find(t.symbol + "[] = {") != std::string::npos);
  }
  // The numbers.
  CHECK(source_numbers(src.source, "kTasks[] = {") ==
        image_numbers<abi::TaskRecord>(
            image(data, "kTasks"), [](const abi::TaskRecord& r, std::vector<int64_t>* o) {
              o->insert(o->end(), {r.cls, r.view0, r.nviews, r.arg0, r.nargs, r.wait0, r.nwaits,
                                   r.sig0, r.nsigs});
            }));
  CHECK(source_numbers(src.source, "kViews[] = {") ==
        image_numbers<abi::View>(image(data, "kViews"),
                                 [](const abi::View& v, std::vector<int64_t>* o) {
                                   o->insert(o->end(), {v.rank, v.buffer, v.offset, v.ndim});
                                   o->insert(o->end(), v.shape, v.shape + abi::kMaxDims);
                                 }));
  // kArgs' and kCtaList's placeholders are a `0` the source spells: the image's last row is it.
  auto with_last = [](std::vector<int64_t> v) {
    v.push_back(0);
    return v;
  };
  CHECK(source_numbers(src.source, "kArgs[] = {") ==
        with_last(image_numbers<long long>(
            image(data, "kArgs"),
            [](const long long& a, std::vector<int64_t>* o) { o->push_back(a); })));
  CHECK(source_numbers(src.source, "kWaits[] = {") ==
        image_numbers<abi::Wait>(image(data, "kWaits"),
                                 [](const abi::Wait& w, std::vector<int64_t>* o) {
                                   o->insert(o->end(), {w.event, w.count, w.lag, w.proxy});
                                 }));
  CHECK(source_numbers(src.source, "kSignals[] = {") ==
        image_numbers<abi::Signal>(image(data, "kSignals"),
                                   [](const abi::Signal& s, std::vector<int64_t>* o) {
                                     o->insert(o->end(), {s.event, s.rank, s.scope});
                                   }));
  for (const char* symbol : {"kCtaStart", "kCtaList"}) {
    CHECK(
        source_numbers(src.source, std::string(symbol) + "[] = {") ==
        with_last(image_numbers<int>(
            image(data, symbol), [](const int& x, std::vector<int64_t>* o) { o->push_back(x); })));
  }
}

TEST_CASE("tables as data hold the numbers the constant tables spell, for every sample") {
  int compared = 0;
  for (const auto& [name, defines] : mkc::testing::samples_at_small_shapes()) {
    for (const auto& [ranks, per_node] :
         std::vector<std::pair<int64_t, int64_t>>{{1, 0}, {2, 0}, {3, 0}, {4, 2}}) {
      // R 3 divides few of the small shapes (powers of two): those it does not are left out.
      auto c = plan_only("samples/" + name + ".mks", ranks, per_node, defines, ranks == 3);
      if (c == nullptr) continue;
      compare_tables(fmt::format("{} at R {}{}", name, ranks,
                                 per_node ? fmt::format(", {} per node", per_node) : ""),
                     generate(*c, CodegenOptions::Tables::kSource),
                     generate(*c, CodegenOptions::Tables::kData));
      ++compared;
    }
  }
  CHECK(compared >= 40);
}

TEST_CASE("a data-table kernel's source does not grow with the plan") {
  // Four times the ranks, four times the tasks: the constant tables grow with them, the declared
  // ones are a line each.
  auto small = plan_only("samples/gemm_allreduce.mks", 2, 0, {});
  auto large = plan_only("samples/gemm_allreduce.mks", 8, 0, {});
  REQUIRE(large->plans[0].tasks.size() > 3 * small->plans[0].tasks.size());
  const auto s_src = generate(*small, CodegenOptions::Tables::kSource);
  const auto l_src = generate(*large, CodegenOptions::Tables::kSource);
  const auto s_data = generate(*small, CodegenOptions::Tables::kData);
  const auto l_data = generate(*large, CodegenOptions::Tables::kData);
  CHECK(l_src.source.size() > 3 * s_src.source.size());
  CHECK(l_data.source.size() < s_data.source.size() + 64);
  CHECK(l_data.source.size() < 16 * 1024);
}

std::string temp_dir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(base != nullptr ? base : "/tmp") + "/" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

TEST_CASE("NVRTC compiles every sample's data-table kernel, with its tables' symbols") {
  jit::JitOptions jo;
  jo.cache_dir = temp_dir("tables_cache");
  int samples = 0;
  for (const auto& entry : std::filesystem::directory_iterator("samples")) {
    if (entry.path().extension() != ".mks") continue;
    ++samples;
    auto c = plan_only(entry.path().string(), 2, 0, {});
    const codegen::Generated g = generate(*c, CodegenOptions::Tables::kData);
    const jit::JitOutput out =
        jit::jit_compile(g.source, entry.path().stem().string() + ".cu", g.kernel_name, jo);
    MESSAGE(fmt::format("{}: {} tasks, {} B of source, {} registers, {} B spills, {:.2f} s",
                        entry.path().string(), c->plans[0].tasks.size(), g.source.size(),
                        out.registers, out.spill_bytes, out.seconds));
    CHECK(out.cubin.compare(0, 4,
                            "\x7f"
                            "ELF") == 0);
    CHECK(out.registers > 0);
    CHECK_MESSAGE(out.spill_bytes == 0, entry.path() << " spills " << out.spill_bytes << " bytes");
    // The runtime finds each table by its C name (cuModuleGetGlobal).
    for (const codegen::TableImage& t : g.tables) {
      CHECK_MESSAGE(out.cubin.find(std::string(t.symbol) + '\0') != std::string::npos,
                    entry.path() << ": no symbol " << t.symbol);
    }
  }
  CHECK(samples >= 10);
}

TEST_CASE("MKC_TABLES: source, data, and a clear error for anything else") {
  const auto file = dsl::SourceFile::read("samples/allreduce.mks");
  compiler::CheckOptions opts;
  opts.ranks = {2};
  opts.defines = {{"N", 4096}};
  const char* before = std::getenv("MKC_TABLES");
  const std::string saved = before != nullptr ? before : "";
  ::setenv("MKC_TABLES", "data", 1);
  CHECK(compiler::compile_file(file, opts)->kernels.at(0).tables.size() == 7);
  ::setenv("MKC_TABLES", "source", 1);
  CHECK(compiler::compile_file(file, opts)->kernels.at(0).tables.empty());
  // Unset: the caller's choice, data unless it asks (`mkc compile` asks for the source).
  ::unsetenv("MKC_TABLES");
  CHECK(compiler::compile_file(file, opts)->kernels.at(0).tables.size() == 7);
  CHECK(compiler::compile_file(file, opts, "", true, nullptr,
                               codegen::CodegenOptions::Tables::kSource)
            ->kernels.at(0)
            .tables.empty());
  ::setenv("MKC_TABLES", "rom", 1);
  CHECK_THROWS_WITH_AS(compiler::compile_file(file, opts),
                       doctest::Contains("MKC_TABLES=rom: expected `data`"), UserError);
  if (before != nullptr) {
    ::setenv("MKC_TABLES", saved.c_str(), 1);
  } else {
    ::unsetenv("MKC_TABLES");
  }
}

}  // namespace
}  // namespace mkc
