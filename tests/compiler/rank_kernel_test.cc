// The kernel of one rank (codegen::CodegenOptions::rank, issue 35), for every sample at its small
// shape at R 1, 2, 4 and 8 and across nodes (2 x 2, 2 x 4), for a first, a middle and the last
// rank:
//  - built from the rank's neighbourhood plan (what a launched process compiles: `plan_rank`) it
//    is byte for byte the kernel built for that rank from the whole world's plan: the same
//    source, tables, tensor maps and task numbering;
//  - it is the world kernel's part for that rank: its tasks are the rank's, in the plan's order,
//    each with the world kernel's views, waits and signals, and each CTA runs the world kernel's
//    list for that rank;
//  - ranks that run the same task classes share one source (the tables are data, sized to a power
//    of two), so the processes of a job compile it once where the cache is shared: on one node
//    every rank; across nodes a ring's ranks that send within the node and those that send
//    through the proxy differ.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "compiler/codegen/codegen.h"
#include "compiler/pipeline.h"
#include "dsl/parser.h"
#include "support/error.h"
#include "templates/mkc/abi.h"
#include "tests/compiler/small_shapes.h"

namespace mkc {
namespace {

using codegen::CodegenOptions;
using codegen::Generated;

std::unique_ptr<compiler::Compilation> plan_of(const std::string& name, int64_t ranks,
                                               int64_t per_node,
                                               const std::map<std::string, int64_t>& defines,
                                               int64_t rank) {
  compiler::CheckOptions opts;
  opts.ranks = {ranks};
  opts.ranks_per_node = per_node;
  opts.defines = defines;
  opts.plan_rank = rank;
  auto c = compiler::compile_file(dsl::SourceFile::read("samples/" + name + ".mks"), opts, "",
                                  /*generate=*/false);
  REQUIRE_MESSAGE(c->ok(), dsl::render_text(c->diagnostics.all(), false));
  return c;
}

Generated generate(const compiler::Compilation& c, int64_t rank) {
  CodegenOptions co;
  co.file = c.file;
  co.tables = CodegenOptions::Tables::kData;
  co.rank = rank;
  return codegen::generate(c.plans.at(0), co);
}

// A table's rows (the zero rows after the last left in).
template <typename T>
std::vector<T> rows(const Generated& g, const std::string& symbol) {
  for (const codegen::TableImage& t : g.tables) {
    if (t.symbol != symbol) continue;
    REQUIRE(t.bytes.size() % sizeof(T) == 0);
    std::vector<T> out(t.bytes.size() / sizeof(T));
    std::memcpy(out.data(), t.bytes.data(), t.bytes.size());
    return out;
  }
  FAIL("no table " << symbol);
  return {};
}

// The kernel's task classes: the comment line above each class's function.
std::vector<std::string> classes(const std::string& source) {
  std::vector<std::string> out;
  const std::string fn = "\n__device__ __forceinline__ void task_class_";
  for (size_t at = source.find(fn); at != std::string::npos; at = source.find(fn, at + 1)) {
    const size_t begin = source.rfind('\n', at - 1);
    out.push_back(source.substr(begin + 1, at - begin - 1));
  }
  return out;
}

bool same_view(const abi::View& a, const abi::View& b) {
  return std::memcmp(&a, &b, sizeof(a)) == 0;
}
bool same_wait(const abi::Wait& a, const abi::Wait& b) {
  return a.event == b.event && a.count == b.count && a.lag == b.lag && a.proxy == b.proxy;
}
bool same_signal(const abi::Signal& a, const abi::Signal& b) {
  return a.event == b.event && a.rank == b.rank && a.scope == b.scope;
}

// Rank r's kernel against the world kernel (both from the world's plan).
void check_part_of_world(const plan::Plan& p, const Generated& mine, const Generated& world,
                         int64_t r) {
  std::vector<int> want;
  for (size_t t = 0; t < p.tasks.size(); ++t)
    if (p.tasks[t].rank == r) want.push_back(static_cast<int>(t));
  REQUIRE(mine.task_ids == want);
  CHECK(mine.rank == r);
  CHECK(world.task_ids.empty());
  CHECK(mine.ctas == world.ctas);
  CHECK(mine.threads == world.threads);
  CHECK(mine.dynamic_smem == world.dynamic_smem);
  const auto mt = rows<abi::TaskRecord>(mine, "kTasks"),
             wt = rows<abi::TaskRecord>(world, "kTasks");
  const auto mv = rows<abi::View>(mine, "kViews"), wv = rows<abi::View>(world, "kViews");
  const auto mw = rows<abi::Wait>(mine, "kWaits"), ww = rows<abi::Wait>(world, "kWaits");
  const auto ms = rows<abi::Signal>(mine, "kSignals"), ws = rows<abi::Signal>(world, "kSignals");
  REQUIRE(mt.size() > want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const abi::TaskRecord& a = mt[i];
    const abi::TaskRecord& b = wt.at(want[i]);
    INFO("task " << p.tasks[want[i]].label);
    REQUIRE(a.nviews == b.nviews);
    REQUIRE(a.nargs == b.nargs);
    REQUIRE(a.nwaits == b.nwaits);
    REQUIRE(a.nsigs == b.nsigs);
    CHECK((a.cls < 0) == (b.cls < 0));
    for (int k = 0; k < a.nviews; ++k) REQUIRE(same_view(mv.at(a.view0 + k), wv.at(b.view0 + k)));
    for (int k = 0; k < a.nwaits; ++k) REQUIRE(same_wait(mw.at(a.wait0 + k), ww.at(b.wait0 + k)));
    for (int k = 0; k < a.nsigs; ++k) REQUIRE(same_signal(ms.at(a.sig0 + k), ws.at(b.sig0 + k)));
  }
  // Past the rank's tasks: zero rows only (the table's power-of-two length).
  const abi::TaskRecord zero{};
  for (size_t i = want.size(); i < mt.size(); ++i)
    REQUIRE(std::memcmp(&mt[i], &zero, sizeof(zero)) == 0);
  // Each CTA's list: the world's list of rank r, in the kernel's numbering.
  const auto m_start = rows<int>(mine, "kCtaStart"), m_list = rows<int>(mine, "kCtaList");
  const auto w_start = rows<int>(world, "kCtaStart"), w_list = rows<int>(world, "kCtaList");
  const size_t base = static_cast<size_t>(r) * (world.ctas + 1);
  for (int c = 0; c < world.ctas; ++c) {
    std::vector<int> a, b;
    for (int i = m_start.at(c); i < m_start.at(c + 1); ++i)
      a.push_back(mine.task_ids.at(m_list.at(i)));
    for (int i = w_start.at(base + c); i < w_start.at(base + c + 1); ++i) b.push_back(w_list.at(i));
    REQUIRE_MESSAGE(a == b, "CTA " << c);
  }
}

TEST_CASE("a rank's kernel from its neighbourhood is its part of the world's, every sample") {
  int checked = 0;
  for (const auto& [name, defines] : testing::samples_at_small_shapes()) {
    for (const auto& [ranks, per_node] :
         std::vector<std::pair<int64_t, int64_t>>{{1, 0}, {2, 0}, {4, 0}, {8, 0}, {4, 2}, {8, 4}}) {
      INFO(name << " at R " << ranks << ", " << (per_node ? per_node : ranks) << " per node");
      const auto whole = plan_of(name, ranks, per_node, defines, -1);
      const Generated world = generate(*whole, -1);
      std::set<std::string> sources;
      std::map<std::vector<std::string>, std::set<std::string>> by_classes;
      for (int64_t r = 0; r < ranks; ++r) {
        CAPTURE(r);
        const Generated from_world = generate(*whole, r);
        sources.insert(from_world.source);
        by_classes[classes(from_world.source)].insert(from_world.source);
        if (r != 0 && r != ranks / 2 + 1 && r != ranks - 1) continue;
        check_part_of_world(whole->plans[0], from_world, world, r);
        const auto near = plan_of(name, ranks, per_node, defines, r);
        const Generated alone = generate(*near, r);
        REQUIRE(alone.source == from_world.source);
        REQUIRE(alone.tables.size() == from_world.tables.size());
        for (size_t k = 0; k < alone.tables.size(); ++k) {
          CHECK_MESSAGE(alone.tables[k].bytes == from_world.tables[k].bytes,
                        alone.tables[k].symbol);
        }
        REQUIRE(alone.task_ids.size() == from_world.task_ids.size());
        for (size_t i = 0; i < alone.task_ids.size(); ++i) {
          REQUIRE(near->plans[0].tasks[alone.task_ids[i]].label ==
                  whole->plans[0].tasks[from_world.task_ids[i]].label);
        }
        CHECK(alone.tensor_maps.size() == from_world.tensor_maps.size());
        for (size_t k = 0; k < alone.tensor_maps.size(); ++k) {
          CHECK_FALSE(alone.tensor_maps[k] < from_world.tensor_maps[k]);
          CHECK_FALSE(from_world.tensor_maps[k] < alone.tensor_maps[k]);
        }
        ++checked;
      }
      if (per_node == 0) {
        CHECK_MESSAGE(sources.size() == 1, sources.size()
                                               << " sources among " << ranks << " ranks");
      }
      for (const auto& [paths, same] : by_classes)
        CHECK_MESSAGE(same.size() == 1, same.size() << " sources for one set of task classes");
    }
  }
  CHECK(checked >= 12 * 12);
}

TEST_CASE("a rank's kernel: refused for a rank the plan does not hold") {
  const auto shapes = testing::small_shapes();
  const auto whole = plan_of("allgather", 4, 0, shapes.at("allgather"), -1);
  CHECK_THROWS_WITH_AS(generate(*whole, 4), doctest::Contains("has no such rank"), InternalError);
  const auto near = plan_of("ring_attention", 8, 0, shapes.at("ring_attention"), 0);
  // Rank 4 is beyond rank 0's two-step neighbourhood on a ring of 8.
  CHECK_THROWS_WITH_AS(generate(*near, 4), doctest::Contains("holds none of its tasks"),
                       InternalError);
}

}  // namespace
}  // namespace mkc
