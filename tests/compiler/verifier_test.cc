// The plan verifier (compiler/oracle/verifier.h) and `mkc verify` (compiler/verify_schedule.h): the
// passes alone on small plans (printing the plan when a check fails), the verifier's checks each
// triggered by a plan broken on purpose, and the ring-attention race of the old lowering (boxes
// recovered from flattened views) reported as a race.
#include "compiler/oracle/verifier.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "compiler/passes/dependencies.h"
#include "compiler/passes/lower.h"
#include "compiler/passes/passes.h"
#include "compiler/passes/schedule.h"
#include "compiler/pipeline.h"
#include "compiler/sema/check.h"
#include "compiler/verify_schedule.h"
#include "dsl/parser.h"
#include "support/error.h"

namespace mkc::plan {
namespace {

struct Compiled {
  std::shared_ptr<const dsl::SourceFile> file;
  dsl::Module module;
  std::vector<compiler::CheckedSchedule> checked;
};

std::unique_ptr<Compiled> compile(std::shared_ptr<const dsl::SourceFile> file, int64_t ranks,
                                  std::map<std::string, int64_t> defines, int64_t per_node = 0) {
  auto c = std::make_unique<Compiled>();
  c->file = file;
  dsl::Diagnostics diags;
  c->module = dsl::parse(file, diags);
  compiler::CheckOptions opts;
  opts.ranks = {ranks};
  opts.ranks_per_node = per_node;
  opts.defines = std::move(defines);
  if (!diags.has_errors()) c->checked = compiler::check(c->module, opts, diags);
  REQUIRE_MESSAGE(!diags.has_errors(), dsl::render_text(diags.all(), false));
  return c;
}

std::unique_ptr<Compiled> sample(const std::string& name, int64_t ranks,
                                 std::map<std::string, int64_t> defines, int64_t per_node = 0) {
  return compile(dsl::SourceFile::read("samples/" + name + ".mks"), ranks, std::move(defines),
                 per_node);
}

std::string dump(const Plan& p) {
  return to_json(p).dump(1);
}

bool has_kind(const Report& r, const std::string& kind) {
  for (const Finding& f : r.findings) {
    if (f.kind == kind) return true;
  }
  return false;
}

// The ring-attention sample at batch 2, where the old lowering went wrong.
std::unique_ptr<Compiled> ring(int64_t R) {
  return sample("ring_attention", R, {{"B", 2}, {"H", 2}, {"S", 128 * R}, {"D", 8}});
}

// The boxes the lowering used to give an attention task: a flattened [B * H, S, D] view's
// leading index recovered from its flat offset as if the view's shape were a tail of the
// buffer's, so slice l >= H landed in the head dimension, past its end, for every batch >= 1.
Box old_box(const Plan& p, const View& v, std::vector<int64_t> lo, std::vector<int64_t> hi) {
  const Buffer& b = p.buffers[v.buffer];
  while (lo.size() < v.shape.size()) {
    lo.push_back(0);
    hi.push_back(v.shape[lo.size() - 1]);
  }
  const size_t lead = b.shape.size() - v.shape.size();
  Box out;
  out.rank = v.rank;
  out.buffer = v.buffer;
  int64_t rem = v.offset;
  for (size_t i = 0; i < lead; ++i) {
    int64_t stride = 1;
    for (size_t k = i + 1; k < b.shape.size(); ++k) stride *= b.shape[k];
    out.lo.push_back(rem / stride);
    out.hi.push_back(rem / stride + 1);
    rem %= stride;
  }
  for (size_t i = 0; i < v.shape.size(); ++i) {
    out.lo.push_back(lo[i]);
    out.hi.push_back(hi[i]);
  }
  return out;
}

void use_old_attention_boxes(Plan& p) {
  for (Task& t : p.tasks) {
    if (t.kind != TaskKind::kAttentionTile) continue;
    const abi::AttentionTileArgs a = args_as<abi::AttentionTileArgs>(t);
    t.reads[0] = old_box(p, t.views[0], {a.l, a.q0}, {a.l + 1, a.q1});
    t.reads[1] = old_box(p, t.views[1], {a.l}, {a.l + 1});
    t.reads[2] = old_box(p, t.views[2], {a.l}, {a.l + 1});
    if (a.last) t.writes.back() = old_box(p, t.views[3], {a.l, a.q0}, {a.l + 1, a.q1});
  }
}

TEST_CASE("the old ring-attention lowering is a verifier error: a race on the K,V slots") {
  for (int64_t R : {2, 3, 4}) {
    auto c = ring(R);
    Plan p = lower(c->checked[0]);
    CHECK_MESSAGE(verify(p, Stage::kLowered).ok(), verify(p, Stage::kLowered).text());
    use_old_attention_boxes(p);
    VerifyOptions vo;
    vo.file = c->file.get();
    const Report r = verify(p, Stage::kLowered, vo);
    REQUIRE_FALSE(r.ok());
    INFO(r.text());
    CHECK(r.findings[0].kind == "race");
    // Batch 1's reads of the travelling K,V block: undeclared, so the shift may overwrite them.
    CHECK(r.text().find("reads `buf`[") != std::string::npos);
    CHECK(r.text().find("att[") != std::string::npos);
    CHECK(r.text().find("samples/ring_attention.mks:") != std::string::npos);
    CHECK(has_kind(r, "box"));  // and the declared box is past the head dimension
  }
}

TEST_CASE("mkc verify passes the ring attention at batch 2, and names a missing edge as a race") {
  for (int64_t R : {2, 3, 4}) {
    auto c = ring(R);
    PassOptions po;
    po.verify = true;
    po.file = c->file.get();
    Plan p = build_plan(c->checked[0], po);  // throws VerifyError on a finding
    const Report ok = verify(p, Stage::kScheduled);
    CHECK(ok.skipped.empty());
    // Drop the waits of the second step's tiles on the shift that brought their block.
    int dropped = 0;
    std::vector<std::vector<int>> producers(p.events.size());
    for (size_t t = 0; t < p.tasks.size(); ++t) {
      for (const Signal& s : p.tasks[t].signals) producers[s.event].push_back(static_cast<int>(t));
    }
    for (Task& t : p.tasks) {
      if (t.label.rfind("att[1]", 0) != 0) continue;
      for (size_t w = 0; w < t.waits.size(); ++w) {
        const int pr = producers[t.waits[w].event].front();
        if (p.tasks[pr].label.rfind("kv[0]", 0) == 0) {
          t.waits.erase(t.waits.begin() + static_cast<long>(w));
          ++dropped;
          break;
        }
      }
    }
    REQUIRE(dropped > 0);
    const Report r = verify(p, Stage::kScheduled, {c->file.get()});
    INFO(r.text());
    REQUIRE(has_kind(r, "race"));
    CHECK(r.text().find("read-after-write race on `buf`") != std::string::npos);
  }
  // Through the command's library: exit 0, the plan and the interpreter both checked.
  const auto file = dsl::SourceFile::read("samples/ring_attention.mks");
  compiler::CheckOptions opts;
  opts.ranks = {4};
  opts.defines = {{"B", 2}, {"H", 2}, {"S", 512}, {"D", 16}};
  compiler::VerifyScheduleOptions vo;
  vo.interleavings = 2;
  const auto res = compiler::verify_schedule(file, opts, vo);
  CHECK_MESSAGE(res.exit_code == 0, res.errors);
  CHECK(res.output.find("verified") != std::string::npos);
}

TEST_CASE("lower alone: a two-rank one-shot all-reduce, its tasks and boxes") {
  auto c = sample("allreduce", 2, {{"N", 131072}});
  const Plan p = lower(c->checked[0]);
  INFO(dump(p));
  // Per rank: a fence and an end; per chunk (2): a send to the other rank and a reduction, each.
  REQUIRE(p.tasks.size() == 2 + 2 * (2 + 2) + 2);
  const Task& send = p.tasks[2];
  CHECK(send.kind == TaskKind::kSend);
  CHECK(send.label == "ar.chunk(0).to(0)");
  CHECK(send.rank == 1);
  REQUIRE(send.reads.size() == 1);
  CHECK(send.reads[0].rank == 1);
  CHECK(send.reads[0].lo == std::vector<int64_t>{0});
  CHECK(send.reads[0].hi == std::vector<int64_t>{65536});
  REQUIRE(send.writes.size() == 1);
  CHECK(send.writes[0].rank == 0);
  CHECK(p.buffers[send.writes[0].buffer].name == "ar.slots");
  CHECK(send.writes[0].lo == std::vector<int64_t>{1, 0});  // rank 1's slot on rank 0
  CHECK(send.writes[0].hi == std::vector<int64_t>{2, 65536});
  CHECK(verify(p, Stage::kLowered).ok());
}

TEST_CASE("dependencies alone: a reduction waits for its slots' sends with one counting wait") {
  for (int64_t R : {2, 3, 8}) {
    auto c = sample("allreduce", R, {{"N", 65536 * R}});
    Plan p = lower(c->checked[0]);
    derive_dependencies(p);
    CHECK_MESSAGE(verify(p, Stage::kDependencies).ok(), verify(p, Stage::kDependencies).text());
    std::vector<std::vector<int>> producers(p.events.size());
    for (size_t t = 0; t < p.tasks.size(); ++t) {
      for (const Signal& s : p.tasks[t].signals) producers[s.event].push_back(static_cast<int>(t));
    }
    int reductions = 0;
    for (const Task& t : p.tasks) {
      if (t.kind != TaskKind::kReduceSlots) continue;
      ++reductions;
      // The R - 1 sends into its slots and (a credit: it reduces in place) its own rank's R - 1
      // sends that read the chunk, all tasks of one operation: one counting wait.
      int64_t incoming = 0, outgoing = 0;
      for (const Wait& w : t.waits) {
        for (int pr : producers[w.event]) {
          (p.tasks[pr].rank == t.rank ? outgoing : incoming) += 1;
        }
      }
      CHECK_MESSAGE(incoming == R - 1, t.label << " on rank " << t.rank);
      CHECK_MESSAGE(outgoing == R - 1, t.label << " on rank " << t.rank);
      CHECK(t.waits.size() == 1);
    }
    CHECK(reductions > 0);
  }
}

TEST_CASE("dependencies alone: a ring step's tile waits once for its block's chunks") {
  auto c = ring(3);
  Plan p = lower(c->checked[0]);
  derive_dependencies(p);
  INFO(summary(p));
  int tiles = 0;
  for (const Task& t : p.tasks) {
    if (t.label.rfind("att[1]", 0) != 0) continue;
    ++tiles;
    int shift_waits = 0;
    for (const Wait& w : t.waits) {
      if (p.events[w.event].name.rfind("kv[0]", 0) == 0) {
        ++shift_waits;
        // K and V of its (batch, head): 128 rows each, one chunk of 128 rows per tensor.
        CHECK(w.count == 2);
      }
    }
    CHECK(shift_waits == 1);
  }
  CHECK(tiles == 3 * 2 * 2);  // ranks x batch x heads (one query tile each)
}

TEST_CASE("dependencies alone: a ring's credits do not pile up, a chunk's waits flat in the step") {
  // Each step's chunk overwrites a slot of the next rank that every earlier lap's readers read
  // whole; the chunks of one step cover those reads together, none alone. Were readers retired
  // only by a write containing them, step s's chunks waited for s readers (R^2 waits a rank).
  auto c = sample("ring_attention", 8, {{"B", 1}, {"H", 1}, {"S", 2048}, {"D", 16}});
  Plan p = lower(c->checked[0]);
  derive_dependencies(p);
  INFO(summary(p));
  std::map<int, size_t> most;  // step -> the most waits of one of its chunks on rank 0
  for (const Task& t : p.tasks) {
    if (t.rank != 0 || t.label.rfind("kv[", 0) != 0) continue;
    const int step = std::stoi(t.label.substr(3));
    most[step] = std::max(most[step], t.waits.size());
  }
  REQUIRE(most.size() == 7);  // steps 0 .. R - 2
  for (const auto& [step, waits] : most) {
    CAPTURE(step);
    CHECK(waits <= most[1]);
  }
  CHECK(most[6] <= 6);
}

// ---- each check, triggered
// -----------------------------------------------------------------------

std::unique_ptr<Compiled> small_allgather(int64_t R) {
  return sample("allgather", R, {{"M", 128 * R}, {"K", 4}});
}

TEST_CASE("verifier: a box outside its buffer, and one no view covers") {
  auto c = small_allgather(2);
  Plan p = lower(c->checked[0]);
  Plan q = p;
  for (Task& t : p.tasks) {
    if (t.kind == TaskKind::kSend) {
      t.writes[0].hi[0] += 100000;
      break;
    }
  }
  Report r = verify(p, Stage::kLowered);
  INFO(r.text());
  CHECK(has_kind(r, "box"));
  CHECK(r.text().find("outside the buffer") != std::string::npos);
  // In the buffer, but not where the task's views are: the send's source view is rank 0's X.
  for (Task& t : q.tasks) {
    if (t.kind == TaskKind::kSend) {
      t.reads[0].rank = 1 - t.reads[0].rank;
      break;
    }
  }
  r = verify(q, Stage::kLowered);
  INFO(r.text());
  CHECK(has_kind(r, "box"));
  CHECK(r.text().find("none of its views") != std::string::npos);
}

TEST_CASE("verifier: wait counts that do not match the signals, and a wait on another rank") {
  auto c = small_allgather(2);
  Plan p = lower(c->checked[0]);
  derive_dependencies(p);
  Plan q = p;
  for (Task& t : p.tasks) {
    if (!t.waits.empty()) {
      t.waits[0].count += 1;
      break;
    }
  }
  Report r = verify(p, Stage::kDependencies);
  INFO(r.text());
  CHECK(has_kind(r, "wait"));
  CHECK(r.text().find("signal it") != std::string::npos);
  for (Task& t : q.tasks) {
    if (!t.waits.empty()) {
      q.events[t.waits[0].event].rank = 1 - t.rank;
      break;
    }
  }
  r = verify(q, Stage::kDependencies);
  INFO(r.text());
  CHECK(r.text().find("its own rank's counters") != std::string::npos);
}

TEST_CASE("verifier: a cycle of waits, and a CTA order that contradicts the waits") {
  auto c = small_allgather(2);
  PassOptions po;
  po.verify = false;
  Plan p = build_plan(c->checked[0], po);
  REQUIRE(verify(p, Stage::kScheduled).ok());
  // A CTA list in reverse: a task before the one it waits for, on the same CTA.
  Plan q = p;
  for (Task& t : p.tasks) {
    if (t.waits.empty()) continue;
    const int ev = p.add_event(t.rank, "handmade.loop");
    t.signals.push_back(Signal{ev, HandOff::kLocal});
    t.waits.push_back(Wait{ev, 1, 0});
    break;
  }
  Report r = verify(p, Stage::kDependencies);
  INFO(r.text());
  CHECK(has_kind(r, "deadlock"));
  bool reversed = false;
  for (auto& rank : q.cta_tasks) {
    for (auto& list : rank) {
      for (size_t i = 0; i + 1 < list.size() && !reversed; ++i) {
        // Find a task that waits for (an event of) the next one in the list, then swap them.
        const Task& a = q.tasks[list[i]];
        for (const Signal& s : a.signals) {
          for (const Wait& w : q.tasks[list[i + 1]].waits) {
            if (w.event == s.event) reversed = true;
          }
        }
        if (reversed) std::swap(list[i], list[i + 1]);
      }
    }
  }
  if (reversed) {
    r = verify(q, Stage::kScheduled);
    INFO(r.text());
    CHECK(has_kind(r, "deadlock"));
  }
}

TEST_CASE("verifier: a remote write with no launch fence before it") {
  auto c = small_allgather(2);
  PassOptions po;
  po.verify = false;
  Plan p = build_plan(c->checked[0], po);
  std::vector<int> fence_events;
  for (const Task& t : p.tasks) {
    if (t.kind == TaskKind::kLaunchFence) {
      for (const Signal& s : t.signals) fence_events.push_back(s.event);
    }
  }
  int removed = 0;
  for (Task& t : p.tasks) {
    for (size_t w = 0; w < t.waits.size(); ++w) {
      if (std::find(fence_events.begin(), fence_events.end(), t.waits[w].event) !=
          fence_events.end()) {
        t.waits.erase(t.waits.begin() + static_cast<long>(w));
        ++removed;
        break;
      }
    }
  }
  REQUIRE(removed > 0);
  // The fences' counters now have fewer waiters than signals: fine for counts (waits compare
  // with signals, not the other way), but the remote writes are unfenced.
  const Report r = verify(p, Stage::kScheduled);
  INFO(r.text());
  CHECK(has_kind(r, "launch"));
  CHECK(r.text().find("launch fence") != std::string::npos);
}

TEST_CASE("verifier: tasks on no CTA, or on two") {
  auto c = small_allgather(2);
  PassOptions po;
  po.verify = false;
  Plan p = build_plan(c->checked[0], po);
  Plan q = p;
  for (auto& list : p.cta_tasks[0]) {
    if (!list.empty()) {
      list.pop_back();
      break;
    }
  }
  Report r = verify(p, Stage::kScheduled);
  INFO(r.text());
  CHECK(r.text().find("is on no CTA's list") != std::string::npos);
  for (auto& list : q.cta_tasks[0]) {
    if (!list.empty()) {
      list.push_back(list.front());
      break;
    }
  }
  r = verify(q, Stage::kScheduled);
  INFO(r.text());
  CHECK(r.text().find("more than once") != std::string::npos);
}

TEST_CASE("verifier: a plan too large for the ordering budget says what it skipped") {
  auto c = small_allgather(2);
  PassOptions po;
  po.verify = false;
  const Plan p = build_plan(c->checked[0], po);
  VerifyOptions vo;
  vo.max_clock_entries = 10;
  const Report r = verify(p, Stage::kScheduled, vo);
  CHECK(r.ok());
  CHECK(r.skipped.find("ordering checks skipped") != std::string::npos);
}

TEST_CASE("the verifier runs after every pass: a failing check names the pass") {
  auto c = small_allgather(2);
  PassOptions po;
  po.verify = true;
  const Plan p = build_plan(c->checked[0], po);  // clean plans pass
  CHECK(p.tasks.size() > 0);
  // A plan broken between passes fails in the next pass's check, named.
  Plan broken = lower(c->checked[0]);
  broken.tasks[2].writes[0].hi[0] = broken.tasks[2].writes[0].lo[0];
  try {
    verify_or_throw(broken, Stage::kLowered, "lower");
    FAIL("an empty box passed");
  } catch (const VerifyError& e) {
    CHECK(e.pass() == "lower");
    CHECK(std::string(e.what()).find("after pass `lower`") != std::string::npos);
    CHECK(std::string(e.what()).find("empty") != std::string::npos);
  }
}

TEST_CASE("mkc verify's library: a wrong output names the tensor, the rank and the writers") {
  // A schedule whose plan is fine but whose interpreter run cannot match: not constructible from
  // a correct compiler, so check the report format on a deadlock instead, which the interpreter
  // raises for a schedule whose roles leave a kind of task without CTAs.
  const auto file = std::make_shared<dsl::SourceFile>("roles.mks", R"(
schedule s {
  ranks R
  param N = 64
  input X : f32[N] symmetric
  roles compute = 1
  comm ar = allreduce(X, sum)
}
)");
  compiler::CheckOptions opts;
  opts.ranks = {2};
  const auto res = compiler::verify_schedule(file, opts, {});
  CHECK(res.exit_code == 1);
  CHECK(res.errors.find("roles") != std::string::npos);
}

// Issue 34: an unused scratch tensor of 2^28 floats in a 256-element launch took 10.5 GB, then
// std::bad_alloc (exit 2); 2^40 failed at once. The interpreter is not run past its memory bound,
// and the error names the tensor where it is declared.
TEST_CASE("mkc verify: buffers the interpreter cannot hold are refused, located, before it runs") {
  for (const char* n : {"268435456", "1099511627776"}) {
    CAPTURE(n);
    auto file = std::make_shared<dsl::SourceFile>("big.mks", fmt::format(R"(schedule s {{
  ranks R
  input X : f32[256] symmetric
  scratch S : f32[{}]
  comm ar = allreduce(X, sum)
}}
)",
                                                                         n));
    compiler::CheckOptions opts;
    opts.ranks = {2};
    const auto res = compiler::verify_schedule(file, opts, {});
    CHECK(res.exit_code == 1);
    CHECK_MESSAGE(res.errors.find("the CPU interpreter was not run: it would hold about") !=
                      std::string::npos,
                  res.errors);
    CHECK_MESSAGE(res.errors.find("`S`") != std::string::npos, res.errors);
    CHECK_MESSAGE(res.errors.find("declared at big.mks:4:3") != std::string::npos, res.errors);
  }
}

}  // namespace
}  // namespace mkc::plan

namespace mkc::plan {
namespace {

// Across nodes: the writes of a task into another node land only before the signals its rank's
// proxy sends there after them. A consumer ordered after the writer by another path (an NVLink
// flag to a rank of the writer's node, whose proxy then signals the consumer on a channel of its
// own) may read before the data land: the verifier must call that a race, though the consumer
// happens after the writer.
TEST_CASE("verifier: across nodes, only the proxy's own signals order the data they follow") {
  auto c = sample("allgather_gemm", 4, {{"M", 512}, {"N", 256}, {"K", 64}}, 2);
  PassOptions po;
  po.verify = true;
  po.file = c->file.get();
  Plan p = build_plan(c->checked[0], po);  // verified: no finding across nodes as lowered
  CHECK(p.ranks_per_node == 2);
  int proxied = 0;
  for (const Task& t : p.tasks) {
    for (const Signal& s : t.signals) {
      proxied += s.handoff == HandOff::kProxy;
      // Every signal's hand-off follows from where its two ranks are.
      const int from = t.rank, to = p.events[s.event].rank;
      CHECK(s.handoff == (from == to                         ? HandOff::kLocal
                          : p.node_of(from) == p.node_of(to) ? HandOff::kPeerFlag
                                                             : HandOff::kProxy));
    }
  }
  CHECK(proxied > 0);
  CHECK(summary(p).find("through the proxy (2 nodes)") != std::string::npos);

  // A send of rank 0 into rank 2 (node 1), and a tile of rank 2 that reads what it wrote.
  int t0 = -1, u = -1;
  for (size_t i = 0; i < p.tasks.size() && t0 < 0; ++i) {
    const Task& t = p.tasks[i];
    if (t.kind == TaskKind::kSend && t.rank == 0 && t.writes[0].rank == 2) t0 = static_cast<int>(i);
  }
  REQUIRE(t0 >= 0);
  for (size_t i = 0; i < p.tasks.size() && u < 0; ++i) {
    const Task& t = p.tasks[i];
    if (t.kind != TaskKind::kGemmTile || t.rank != 2) continue;
    if (t.reads[0].overlaps(p.tasks[t0].writes[0])) u = static_cast<int>(i);
  }
  REQUIRE(u >= 0);
  int fence1 = -1;
  for (size_t i = 0; i < p.tasks.size(); ++i) {
    if (p.tasks[i].kind == TaskKind::kLaunchFence && p.tasks[i].rank == 1)
      fence1 = static_cast<int>(i);
  }
  REQUIRE(fence1 >= 0);
  // Reroute: the tile no longer waits for the send's signals; instead the send flags rank 1
  // (its node, NVLink), and rank 1's fence task, once flagged, signals the tile through rank 1's
  // proxy. The tile still happens after the send; the data may not have landed.
  std::set<int> of_t0;
  for (const Signal& s : p.tasks[t0].signals) of_t0.insert(s.event);
  auto& waits = p.tasks[u].waits;
  const size_t before = waits.size();
  waits.erase(std::remove_if(waits.begin(), waits.end(),
                             [&](const Wait& w) { return of_t0.count(w.event) > 0; }),
              waits.end());
  REQUIRE(waits.size() < before);
  const int on1 = p.add_event(1, "relay@r1");
  const int on2 = p.add_event(2, "relay@r2");
  p.tasks[t0].signals.push_back(Signal{on1, HandOff::kPeerFlag});
  p.tasks[fence1].waits.push_back(Wait{on1, 1, 0});
  p.tasks[fence1].signals.push_back(Signal{on2, HandOff::kProxy});
  waits.push_back(Wait{on2, 1, 0});
  const Report r = verify(p, Stage::kScheduled, {c->file.get()});
  INFO(r.text());
  REQUIRE(has_kind(r, "race"));
  CHECK(r.text().find("read-after-write race on `A`") != std::string::npos);
  CHECK(r.text().find("crosses nodes") != std::string::npos);

  // A hand-off that does not match the ranks' places is a finding too.
  Plan q = build_plan(c->checked[0], po);
  for (Task& t : q.tasks) {
    for (Signal& s : t.signals) {
      if (s.handoff == HandOff::kProxy) s.handoff = HandOff::kPeerFlag;
    }
  }
  const Report rq = verify(q, Stage::kScheduled);
  CHECK(has_kind(rq, "signal"));
  CHECK(rq.text().find("as nvlink_flag, but from rank") != std::string::npos);

  // `mkc verify --ranks-per-node`: the plan and the interpreter across nodes, every sample kind
  // of edge; code generation sends the edges between nodes through the proxy, the MoE routing
  // tasks too (their rows to another node become requests from the sender's heap).
  compiler::CheckOptions opts;
  opts.ranks = {4};
  opts.ranks_per_node = 2;
  opts.defines = {{"M", 512}, {"N", 256}, {"K", 64}};
  compiler::VerifyScheduleOptions vo;
  vo.interleavings = 2;
  const auto file = dsl::SourceFile::read("samples/allgather_gemm.mks");
  const auto res = compiler::verify_schedule(file, opts, vo);
  CHECK_MESSAGE(res.exit_code == 0, res.errors);
  CHECK(res.output.find("2 nodes of 2, edges between them through the proxy") != std::string::npos);
  CHECK(compiler::compile_file(file, opts, "", /*generate=*/false)->plans.size() == 1);
  const auto gen = compiler::compile_file(file, opts);
  REQUIRE(gen->kernels.size() == 1);
  const std::string& src = gen->kernels[0].source;
  CHECK(src.find("#define MKC_HAS_PROXY 1") != std::string::npos);
  CHECK(src.find("mkc::proxy_send_box<") != std::string::npos);
  CHECK(src.find("mkc::send_box<") != std::string::npos);  // inside a node: NVLink still
  CHECK(src.find("#define MKC_RANKS_PER_NODE 2") != std::string::npos);
  compiler::CheckOptions moe = opts;
  moe.defines = {{"T", 16}, {"H", 64}, {"F", 64}, {"E", 8}, {"TOPK", 2}};
  for (const char* name : {"moe_dispatch_gemm", "moe_ffn_combine"}) {
    INFO(name);
    const auto m =
        compiler::compile_file(dsl::SourceFile::read(fmt::format("samples/{}.mks", name)), moe);
    REQUIRE(m->kernels.size() == 1);
    CHECK(m->kernels[0].source.find("#define MKC_HAS_PROXY 1") != std::string::npos);
    // The sender stages its rows to the other node, [T * K, H] of X's type, and their origin
    // entries, [T * K, 3] i32 (plan scratch, not symmetric).
    const Buffer* sent = nullptr;
    const Buffer* staged = nullptr;
    for (const Buffer& b : m->plans[0].buffers) {
      if (b.name == "dispatch.sent") sent = &b;
      if (b.name == "dispatch.staged") staged = &b;
    }
    REQUIRE(sent != nullptr);
    REQUIRE(staged != nullptr);
    CHECK(sent->shape == std::vector<int64_t>{16 * 2, 3});
    CHECK(staged->shape == std::vector<int64_t>{16 * 2, 64});
    CHECK_FALSE(staged->symmetric);
  }
}

}  // namespace
}  // namespace mkc::plan

namespace mkc::plan {
namespace {

// Across nodes an all-reduce goes hierarchical: only the chunk owners' node sums cross, N (N - 1)
// sends per chunk instead of one from every rank to every rank of the other nodes.
TEST_CASE(
    "lower alone: the all-reduce across 2 nodes of 4 crosses the proxies N (N - 1) times a chunk") {
  auto c = sample("allreduce", 8, {{"N", 4 * 65536}}, 4);
  PassOptions po;
  po.verify = true;
  po.file = c->file.get();
  const Plan p = build_plan(c->checked[0], po);
  REQUIRE(p.decisions.size() == 1);
  CHECK(p.decisions[0].choice == "hierarchical");
  int crossing = 0, in_node = 0;
  for (const Task& t : p.tasks) {
    if (t.kind != TaskKind::kSend) continue;
    const bool across = p.node_of(t.writes[0].rank) != p.node_of(t.rank);
    crossing += across;
    in_node += !across;
  }
  const int chunks = 4, N = 2, L = 4;
  INFO(dump(p));
  CHECK(crossing == chunks * N * (N - 1));
  // In each node: L - 1 sends to the owner, L - 1 results back, per chunk.
  CHECK(in_node == chunks * N * 2 * (L - 1));
  // Explicitly one-shot: every rank to every other, across the nodes too.
  const auto one_shot = std::make_shared<dsl::SourceFile>("one_shot.mks", R"(
schedule one_shot {
  ranks R
  input X : f32[262144] symmetric
  comm ar = allreduce(X, sum) chunk(65536) algo(one_shot)
}
)");
  auto c1 = compile(one_shot, 8, {}, 4);
  const Plan q = build_plan(c1->checked[0], po);
  CHECK(q.decisions[0].choice == "one_shot");
}

}  // namespace
}  // namespace mkc::plan
