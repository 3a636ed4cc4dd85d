#include "tests/fuzz/mks_gen.h"

#include <algorithm>
#include <exception>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "compiler/pipeline.h"
#include "compiler/sema/check.h"
#include "compiler/verify_schedule.h"
#include "dsl/diagnostics.h"
#include "dsl/source.h"
#include "support/error.h"

namespace mkc::fuzz {

size_t Choices::pick(size_t n) {
  if (n == 0) return 0;
  if (seeded_) {
    state_ ^= state_ >> 12;  // xorshift64*
    state_ ^= state_ << 25;
    state_ ^= state_ >> 27;
    return static_cast<size_t>((state_ * 0x2545f4914f6cdd1dULL) >> 33) % n;
  }
  if (at_ >= bytes_.size()) return 0;
  size_t v = static_cast<unsigned char>(bytes_[at_++]);
  if (n > 256 && at_ < bytes_.size()) v = v << 8 | static_cast<unsigned char>(bytes_[at_++]);
  return v % n;
}

namespace {

// Pieces of a device body. Benign ones hide braces, directives and digraphs where C++ does not
// see them (comments, literals, a comment continued by a line splice); hostile ones put them in
// code, or leave a literal or comment open.
struct Piece {
  const char* text;
  bool hostile;
};
constexpr Piece kBodyPieces[] = {
    {"/* } %> # */ ", false},
    {"// } #include <x> %>\n", false},
    {"(void)'}'; ", false},
    {"(void)\"} #include %> <%\"; ", false},
    {"(void)R\"d( } #define )d\"; ", false},
    {"(void)u8\"}\"; ", false},
    {"(void)1'000; ", false},
    {"(void)0x1'F; ", false},
    {"{ (void)0; } ", false},
    {"// continued \\\n#include \"x\"\n", false},
    {"(void)\"a\\\nb\"; ", false},
    {"(void)sizeof(int[2]); ", false},
    {"\n#include \"/etc/passwd\"\n", true},
    {"/*\n*/ #define Z 1\n", true},
    {"%> __global__ void evil() <% ", true},
    {"\n%:define Z 1\n", true},
    {"\n?\?=define Z 1\n", true},  // a trigraph, spelled so this file has none
    {"_Pragma(\"once\") ", true},
    {"(void)\"unterminated;\n", true},
    {"/* never closed ", true},
    {"(void)'x;\n", true},
};

// The tensors every schedule may use. Shapes are small (the interpreter runs them) and N divides
// by 1, 2 and 3 (reducescatter's rows).
struct Tensor {
  const char* name;
  const char* decl;
  bool symmetric;
  bool slots;  // [2, N, W]: indexed by a slot
  bool plain;  // [N, W] f32: copy, map and comm operands
};
constexpr Tensor kTensors[] = {
    {"A", "input   A  : f32[N, W]", false, false, true},
    {"A2", "input   A2 : f32[N, W]", false, false, true},
    {"Y0", "output  Y0 : f32[N, W]", false, false, true},
    {"Y1", "output  Y1 : f32[N, W] symmetric", true, false, true},
    {"S0", "scratch S0 : f32[N, W] symmetric", true, false, true},
    {"S1", "scratch S1 : f32[N, W] symmetric", true, false, true},
    {"Bf", "scratch Bf : f32[2, N, W] symmetric", true, true, false},
    {"G", "output  G  : f32[R * N, W] symmetric", true, false, false},
    {"RS", "output  RS : f32[N / R, W]", false, false, false},
    {"Rd", "output  Rd : f32[N]", false, false, false},
    {"GA", "input   GA : bf16[N, 32]", false, false, false},
    {"GB", "input   GB : bf16[32, W]", false, false, false},
    // A ring attention block's (ring_block) and an MoE block's (moe_block) own tensors.
    {"AQ", "input   AQ : bf16[2, 8, 16]", false, false, false},
    {"AKV", "input   AKV : bf16[2, 2, 8, 16]", false, false, false},
    {"AB", "scratch AB : bf16[2, 2, 2, 8, 16] symmetric", true, false, false},
    {"AO", "output  AO : bf16[2, 8, 16]", false, false, false},
    {"MX", "input   MX : bf16[8, 16]", false, false, false},
    {"MR", "input   MR : i32[8, 2]", false, false, false},
    {"MG", "input   MG : f32[8, 2]", false, false, false},
    {"MW", "input   MW : bf16[2, 16, 16]", false, false, false},
    {"MXr", "scratch MXr : bf16[16 * R, 16] symmetric", true, false, false},
    {"MC", "scratch MC : i32[R, 2] symmetric", true, false, false},
    {"MYr", "scratch MYr : bf16[16 * R, 16]", false, false, false},
    {"MY", "output  MY : bf16[8, 16] symmetric", true, false, false},
};

struct Op {
  std::string name;
  bool comm = false;
  std::string call;                // `copy(A -> Y0)` and named arguments
  std::vector<std::string> reads;  // tensor names
  std::vector<std::string> writes;
  int loop = -1;        // index of the loop it sits in (innermost), -1 at the top level
  std::string var;      // that loop's variable
  std::string clauses;  // tile/chunk/when, rendered
};

class Generator {
 public:
  explicit Generator(Choices& c) : c_(c) {}

  Generated run() {
    Generated out;
    out.ranks_per_node = c_.chance(25) ? 1 : 0;
    std::string s = "schedule g {\n  ranks R\n  param N = " + pick_of({"96", "48", "6"}) +
                    ", W = " + pick_of({"16", "8", "3"}) + "\n";
    for (const Tensor& t : kTensors) s += "  " + std::string(t.decl) + "\n";
    const int devices = static_cast<int>(c_.pick(3));
    for (int d = 0; d < devices; ++d) s += device(d, &out.hostile_body);
    make_ops(0);
    s += render_ops();
    if (c_.chance(30)) s += ring_block();
    if (c_.chance(30)) s += moe_block();
    if (c_.chance(10))
      s += "  roles compute = " + pick_of({"4", "100", "131", "0"}) + ", comm = 2\n";
    s += "}\n";
    out.text = s;
    return out;
  }

 private:
  std::string pick_of(std::initializer_list<const char*> options) {
    std::vector<const char*> v(options);
    return v[c_.pick(v.size())];
  }

  std::string device(int d, bool* hostile) {
    const bool two = c_.chance(40);
    std::string body;
    const int pieces = static_cast<int>(c_.pick(4));
    for (int i = 0; i < pieces; ++i) {
      // Hostile pieces now and then, so most schedules get past the check.
      const Piece& p = kBodyPieces[c_.pick(std::size(kBodyPieces))];
      if (p.hostile && !c_.chance(15)) continue;
      body += p.text;
      *hostile |= p.hostile;
    }
    arity_.push_back(two ? 2 : 1);
    return "  device dfn" + std::to_string(d) + "(x: f32" + (two ? ", y: f32" : "") +
           ") -> f32 {\n    " + body + "return x * 2.0f" + (two ? " + y" : "") + ";\n  }\n";
  }

  std::string plain_tensor(bool want_symmetric, bool may_be_input) {
    std::vector<const Tensor*> v;
    for (const Tensor& t : kTensors) {
      if (!t.plain && !t.slots) continue;
      if (want_symmetric && !t.symmetric) continue;
      if (!may_be_input && (std::string(t.name) == "A" || std::string(t.name) == "A2")) continue;
      v.push_back(&t);
    }
    const Tensor& t = *v[c_.pick(v.size())];
    if (!t.slots) return t.name;
    return std::string(t.name) + "[" + slot() + "]";
  }

  std::string slot() {
    if (!var_.empty() && c_.chance(70)) return with_var(pick_of({"@ % 2", "(@ + 1) % 2"}));
    return pick_of({"0", "1"});
  }

  std::string with_var(std::string text) {
    for (size_t p; (p = text.find('@')) != std::string::npos;) text.replace(p, 1, var_);
    return text;
  }

  static std::string base(const std::string& operand) {
    return operand.substr(0, operand.find('['));
  }

  std::string op_name() {
    // Mostly fresh; sometimes a name already taken (a parameter, a tensor, a device function,
    // a loop variable, another operation, one in another loop).
    if (c_.chance(1)) {
      const int k = static_cast<int>(c_.pick(5));
      if (k == 0) return pick_of({"N", "W", "R"});
      if (k == 1) return kTensors[c_.pick(std::size(kTensors))].name;
      if (k == 2 && !arity_.empty()) return "dfn0";
      if (k == 3 && !var_.empty()) return var_;
      if (!ops_.empty()) return ops_[c_.pick(ops_.size())].name;
    }
    return "o" + std::to_string(next_name_++);
  }

  Op make_op() {
    Op op;
    op.loop = loop_;
    op.var = var_;
    const int kind = static_cast<int>(c_.pick(11));
    auto rw = [&](const std::string& r, const std::string& w) {
      op.reads.push_back(base(r));
      op.writes.push_back(base(w));
    };
    if (kind <= 2) {  // copy
      const std::string src = plain_tensor(false, true), dst = plain_tensor(false, false);
      op.call = "copy(" + src + " -> " + dst + ")";
      rw(src, dst);
    } else if (kind == 3 && arity_.empty()) {  // map without a device function: a copy
      const std::string src = plain_tensor(false, true), dst = plain_tensor(false, false);
      op.call = "copy(" + src + " -> " + dst + ")";
      rw(src, dst);
    } else if (kind == 3) {  // map
      const size_t f = c_.pick(arity_.size());
      const std::string a = plain_tensor(false, true), dst = plain_tensor(false, false);
      op.call = "map(dfn" + std::to_string(f) + ", " + a;
      op.reads.push_back(base(a));
      if (arity_[f] == 2) {
        const std::string b = plain_tensor(false, true);
        op.call += ", " + b;
        op.reads.push_back(base(b));
      }
      op.call += " -> " + dst + ")";
      op.writes.push_back(base(dst));
    } else if (kind == 4) {  // reduce
      const std::string src = plain_tensor(false, true);
      op.call = "reduce(" + src + " -> Rd, op = " + pick_of({"sum", "max", "min"}) + ", axis = 1)";
      rw(src, "Rd");
    } else if (kind == 5) {  // gemm
      const std::string dst = pick_of({"Y0", "S0", "Y1"});
      op.call = "gemm(GA, GB -> " + dst + ")";
      op.reads.push_back("GA");
      rw("GB", dst);
      if (c_.chance(50)) op.clauses += " tile(64, " + pick_of({"16", "32", "128"}) + ")";
    } else if (kind == 6) {  // allreduce
      const std::string x = plain_tensor(true, false);
      if (c_.chance(50)) {
        op.call = "allreduce(" + x + ", sum)";
        rw(x, x);
      } else {
        const std::string y = plain_tensor(true, false);
        op.call = "allreduce(" + x + ", " + pick_of({"sum", "max"}) + " -> " + y + ")";
        rw(x, y);
      }
    } else if (kind == 7) {  // allgather
      const std::string x = plain_tensor(false, true);
      op.call = "allgather(" + x + " -> G)";
      rw(x, "G");
    } else if (kind == 8) {  // reducescatter
      const std::string x = plain_tensor(true, false);
      op.call = "reducescatter(" + x + ", sum -> RS)";
      rw(x, "RS");
    } else if (kind == 9) {  // shift
      const std::string x = plain_tensor(false, true), y = plain_tensor(true, false);
      op.call = "shift(" + x + " -> " + y + ", by = " + pick_of({"1", "2", "-1", "0"}) + ")";
      rw(x, y);
    } else {  // put
      const std::string x = plain_tensor(false, true);
      const std::string y = pick_of({"Y1", "S0", "S1"});
      op.call = "put(" + x + " -> peer(rank + " + pick_of({"1", "2", "0"}) + ")." + y + ")";
      rw(x, y);
    }
    op.comm = kind >= 6;
    if (op.comm && c_.chance(30))
      op.clauses += " chunk(" + pick_of({"16", "1, 8", "5", "2, 3"}) + ")";
    if (!op.comm && kind != 4 && kind != 5 && c_.chance(15))
      op.clauses += " tile(" + pick_of({"64, 16", "32"}) + ")";
    if (!var_.empty() && c_.chance(25))
      op.clauses += " when(" + with_var(pick_of({"@ < R - 1", "@ > 0", "@ % 2 == 0"})) + ")";
    // A wrong keyword now and then.
    if (c_.chance(1)) op.comm = !op.comm;
    op.name = op_name();
    return op;
  }

  // `text` most of the time; now and then `other` (a dependency dropped, a slot changed).
  std::string usually(const std::string& text, const std::string& other = "") {
    return c_.chance(8) ? other : text;
  }

  // Ring attention as samples/ring_attention.mks writes it (K,V blocks travel by shift between two
  // slots while each rank attends to the block it holds), causal or not, perturbed.
  std::string ring_block() {
    const bool causal = c_.chance(40);
    const std::string slot = usually("s % 2", "(s + 1) % 2"),
                      next = usually("(s + 1) % 2", "s % 2");
    std::string deps_kv =
        usually("ai") + usually(", kv[s - 1].chunk") + usually(", at[s - 1].tile");
    std::string deps_at =
        usually("ai") + usually(", kv[s - 1].chunk") + usually(", at[s - 1].tile");
    if (!deps_kv.empty() && deps_kv[0] == ',') deps_kv.erase(0, 2);
    if (!deps_at.empty() && deps_at[0] == ',') deps_at.erase(0, 2);
    return "  compute ai = copy(AKV -> AB[0])\n  loop s in 0 .. " + usually("R", "R + 1") +
           " {\n    comm    kv = shift(AB[" + slot + "] -> AB[" + next + "]) chunk(" +
           pick_of({"8, 16", "1, 16", "3, 5"}) + ")" + usually(" when(s < R - 1)") +
           (deps_kv.empty() ? "" : " after " + deps_kv) + "\n    compute at = attention(AQ, AB[" +
           slot + ", 0], AB[" + slot + ", 1] -> AO, accumulate = 1" +
           (causal ? ", causal = 1, q_start = rank * 8, k_start = ((rank - s) % R) * 8" : "") +
           ")" + (c_.chance(30) ? " tile(" + pick_of({"4", "8", "3"}) + ")" : "") +
           (deps_at.empty() ? "" : " after " + deps_at) + "\n  }\n";
  }

  // MoE dispatch, a grouped GEMM and combine (samples/moe_ffn_combine.mks), perturbed.
  std::string moe_block() {
    std::string s = "  comm    md = alltoall(MX -> MXr, route = MR, counts = MC, experts = " +
                    pick_of({"2 * R", "2 * R", "R"}) + ") chunk(1, 16)\n";
    s += "  compute mg = grouped_gemm(MXr, MW -> MYr, counts = MC)" +
         (c_.chance(30) ? " tile(" + pick_of({"64, 16", "128, 16", "3, 8"}) + ")" : "") +
         usually(" after md.chunk", usually("", " after md")) + "\n";
    s += "  comm    mc = combine(MYr -> MY, dispatch = md, weights = MG) chunk(1, 16)" +
         usually(" after mg.tile", usually("", " after mg")) + "\n";
    return s;
  }

  // Operations of one level: top level (depth 0) or a loop's body.
  void make_ops(int depth) {
    const int n = depth == 0 ? 1 + static_cast<int>(c_.pick(6)) : 1 + static_cast<int>(c_.pick(3));
    for (int i = 0; i < n; ++i) {
      if (depth < 2 && c_.chance(depth == 0 ? 30 : 15)) {
        const int id = static_cast<int>(loops_.size());
        const std::string var = "i" + std::to_string(id);
        const std::string hi = pick_of({"R", "2", "3", "0", "1", "R + 1"});
        loops_.push_back({var, hi, loop_});
        items_.push_back({-1, id, true});
        const int saved_loop = loop_;
        const std::string saved_var = var_;
        loop_ = id;
        var_ = var;
        make_ops(depth + 1);
        loop_ = saved_loop;
        var_ = saved_var;
        items_.push_back({-1, id, false});
        continue;
      }
      ops_.push_back(make_op());
      items_.push_back({static_cast<int>(ops_.size()) - 1, -1, false});
    }
  }

  // The dependencies of operation `k`: on every earlier operation touching what it touches (per
  // tile or chunk now and then), on the previous iteration of the operations of its own loop, and
  // now and then one anywhere (forward, itself, a later iteration, the wrong granularity).
  std::string deps_of(size_t k) {
    const Op& op = ops_[k];
    std::vector<std::string> deps;
    auto feeds = [](const Op& a, const Op& b) {  // b reads what a writes
      for (const auto& w : a.writes)
        for (const auto& x : b.reads)
          if (w == x) return true;
      return false;
    };
    auto touches = [](const Op& a, const Op& b) {
      for (const auto& w : a.writes) {
        for (const auto& x : b.reads)
          if (w == x) return true;
        for (const auto& x : b.writes)
          if (w == x) return true;
      }
      for (const auto& r : a.reads)
        for (const auto& x : b.writes)
          if (r == x) return true;
      return false;
    };
    for (size_t j = 0; j < ops_.size(); ++j) {
      const Op& other = ops_[j];
      if (!touches(other, op) || c_.chance(8)) continue;
      const bool same_loop = op.loop >= 0 && other.loop == op.loop;
      if (j < k) {
        // An operation of an enclosing or the same loop: the same iteration by plain name; one
        // of a loop this operation is not in: every iteration.
        std::string d = other.name;
        if (feeds(other, op) && c_.chance(25)) d += other.comm ? ".chunk" : ".tile";
        deps.push_back(d);
        if (same_loop) deps.push_back(other.name + "[" + op.var + " - 1]");
      } else if (j > k && same_loop) {
        deps.push_back(other.name + "[" + op.var + " - 1]");
      } else if (j == k && op.loop >= 0) {
        deps.push_back(op.name + "[" + op.var + " - 1]");
      }
    }
    if (c_.chance(8) && !ops_.empty()) {  // one anywhere
      const Op& other = ops_[c_.pick(ops_.size())];
      std::string d = other.name;
      if (other.loop >= 0 && c_.chance(50)) {
        const std::string v = op.var.empty() ? "0" : op.var;
        d += "[" + pick_of({"@ + 1", "@ - 1", "0", "@", "-1", "9"}) + "]";
        for (size_t p; (p = d.find('@')) != std::string::npos;) d.replace(p, 1, v);
      }
      if (c_.chance(40)) d += c_.chance(50) ? ".tile" : ".chunk";
      deps.push_back(d);
    }
    std::string out;
    for (const auto& d : deps) out += (out.empty() ? " after " : ", ") + d;
    return out;
  }

  std::string render_ops() {
    std::string s;
    int depth = 1;
    for (const Item& it : items_) {
      const std::string pad(2 * depth, ' ');
      if (it.loop >= 0 && it.open) {
        s += pad + "loop " + loops_[it.loop].var + " in 0 .. " + loops_[it.loop].hi + " {\n";
        ++depth;
      } else if (it.loop >= 0) {
        --depth;
        s += std::string(2 * depth, ' ') + "}\n";
      } else {
        const Op& op = ops_[it.op];
        s += pad + (op.comm ? "comm    " : "compute ") + op.name + " = " + op.call + op.clauses +
             deps_of(it.op) + "\n";
      }
    }
    return s;
  }

  struct Loop {
    std::string var, hi;
    int parent;
  };
  struct Item {
    int op;    // an operation, or -1
    int loop;  // a loop's opening or closing brace, or -1
    bool open;
  };

  Choices& c_;
  std::vector<int> arity_;
  std::vector<Op> ops_;
  std::vector<Loop> loops_;
  std::vector<Item> items_;
  int loop_ = -1;
  std::string var_;
  int next_name_ = 0;
};

bool is_size_limit(const std::string& errors) {
  // verify_schedule refuses to interpret what is too large for the CPU; not a finding.
  return errors.find("but the CPU interpreter was not run") != std::string::npos;
}

}  // namespace

Generated generate_schedule(Choices& choices) {
  return Generator(choices).run();
}

std::string check_property(const Generated& g, int* verified) {
  auto file = std::make_shared<dsl::SourceFile>("gen.mks", g.text);
  auto fail = [&](const std::string& what) {
    return what + "\n--- schedule (ranks per node " + std::to_string(g.ranks_per_node) + ") ---\n" +
           g.text;
  };
  for (const int64_t r : {1, 2, 3}) {
    compiler::CheckOptions opts;
    opts.ranks = {r};
    if (r == 2) opts.ranks_per_node = g.ranks_per_node;
    bool compiled = false;
    try {
      auto c = compiler::compile_file(file, opts, "", /*generate=*/opts.ranks_per_node == 0);
      compiled = c->ok();
      if (g.hostile_body && c->ok())
        return fail("R " + std::to_string(r) + ": a hostile device body was accepted");
    } catch (const UserError&) {
      continue;
    } catch (const std::exception& e) {
      return fail("R " + std::to_string(r) + ": compile threw " + e.what());
    }
    if (!compiled) continue;
    compiler::VerifyScheduleOptions vo;
    vo.interleavings = 2;
    vo.launches = 2;
    vo.max_work = 2e6;
    vo.max_bytes = 64e6;
    try {
      const auto v = compiler::verify_schedule(file, opts, vo);
      if (v.exit_code != 0 && !is_size_limit(v.errors))
        return fail("R " + std::to_string(r) + ": compile accepted it, verify found:\n" + v.errors);
      if (v.exit_code == 0 && verified != nullptr) ++*verified;
    } catch (const UserError&) {
    } catch (const std::exception& e) {
      return fail("R " + std::to_string(r) + ": verify threw " + e.what());
    }
  }
  return "";
}

}  // namespace mkc::fuzz
