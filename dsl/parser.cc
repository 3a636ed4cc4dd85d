#include "dsl/parser.h"

#include <fmt/format.h>

#include <algorithm>

#include "dsl/lexer.h"
#include "dsl/suggest.h"

namespace mkc::dsl {
namespace {

const std::vector<std::string> kItemKeywords = {"ranks",  "param",   "input", "output", "scratch",
                                                "device", "compute", "comm",  "loop",   "roles"};

bool is_item_start(Tok t) {
  switch (t) {
    case Tok::kRanks:
    case Tok::kParam:
    case Tok::kInput:
    case Tok::kOutput:
    case Tok::kScratch:
    case Tok::kDevice:
    case Tok::kCompute:
    case Tok::kComm:
    case Tok::kLoop:
    case Tok::kRoles:
    case Tok::kSchedule:
      return true;
    default:
      return false;
  }
}

// Binary operators by precedence (higher binds tighter).
int precedence(Tok t) {
  switch (t) {
    case Tok::kOrOr:
      return 1;
    case Tok::kAndAnd:
      return 2;
    case Tok::kEqEq:
    case Tok::kNe:
      return 3;
    case Tok::kLt:
    case Tok::kLe:
    case Tok::kGt:
    case Tok::kGe:
      return 4;
    case Tok::kPlus:
    case Tok::kMinus:
      return 5;
    case Tok::kStar:
    case Tok::kSlash:
    case Tok::kPercent:
      return 6;
    default:
      return 0;
  }
}

class Parser {
 public:
  Parser(std::shared_ptr<const SourceFile> file, Diagnostics& diags)
      : file_(file), diags_(diags), lex_(file, diags) {
    cur_ = lex_.next();
  }

  Module parse_module() {
    Module m;
    m.file = file_;
    while (cur_.kind != Tok::kEof && !diags_.full()) {
      if (cur_.kind == Tok::kSchedule) {
        recovering_ = false;
        m.schedules.push_back(parse_schedule());
      } else {
        error(cur_.span, fmt::format("expected `schedule`, found {}", describe(cur_)))
            .set_hint("a file holds schedules: `schedule name { ... }`");
        // Skip to the next `schedule`.
        while (cur_.kind != Tok::kEof && cur_.kind != Tok::kSchedule) advance();
      }
    }
    if (m.schedules.empty() && !diags_.has_errors()) {
      error(cur_.span, "the file holds no schedule")
          .set_hint("write `schedule name { ... }`; dsl/SPEC.md has the grammar");
    }
    return m;
  }

 private:
  // ---- tokens -------------------------------------------------------------------------------
  void advance() {
    prev_end_ = cur_.span.end;
    const size_t errors = diags_.error_count();
    cur_ = lex_.next();
    // After a bad character or number, what follows in the item is noise: stay quiet until the
    // next item.
    if (diags_.error_count() != errors) recovering_ = true;
  }
  bool accept(Tok k) {
    if (cur_.kind != k) return false;
    advance();
    return true;
  }
  std::string describe(const Token& t) const {
    if (t.kind == Tok::kIdent) return fmt::format("identifier `{}`", t.text);
    if (t.kind == Tok::kInt || t.kind == Tok::kFloat) return fmt::format("number `{}`", t.text);
    return tok_description(t.kind);
  }
  Diagnostic& error(Span span, std::string msg, DiagKind kind = DiagKind::kSyntax) {
    if (recovering_ && kind == DiagKind::kSyntax) {
      scratch_ = Diagnostic{};
      return scratch_;
    }
    if (kind == DiagKind::kSyntax) recovering_ = true;
    return diags_.error(kind, file_, span, std::move(msg));
  }
  // Consumes `k` or reports what was expected (`what`) and returns false.
  bool expect(Tok k, const char* what) {
    if (accept(k)) return true;
    error(cur_.span, fmt::format("expected {}{}, found {}", tok_description(k),
                                 what[0] != '\0' ? fmt::format(" {}", what) : "", describe(cur_)));
    return false;
  }
  bool expect_ident(std::string* name, Span* span, const char* what) {
    if (cur_.kind == Tok::kIdent) {
      *name = std::string(cur_.text);
      *span = cur_.span;
      advance();
      return true;
    }
    auto& d = error(cur_.span, fmt::format("expected {}, found {}", what, describe(cur_)));
    if (cur_.kind > Tok::kNot) {
      d.set_hint(fmt::format("{} is a keyword; pick another name", tok_description(cur_.kind)));
    }
    return false;
  }
  // Skips to the start of the next item or the `}` closing the current block.
  void synchronize() {
    int depth = 0;
    while (cur_.kind != Tok::kEof) {
      if (depth == 0 && (is_item_start(cur_.kind) || cur_.kind == Tok::kRBrace)) break;
      if (cur_.kind == Tok::kLBrace) ++depth;
      if (cur_.kind == Tok::kRBrace) --depth;
      advance();
    }
  }

  // ---- schedule and items -------------------------------------------------------------------
  Schedule parse_schedule() {
    Schedule s;
    const uint32_t begin = cur_.span.begin;
    advance();  // schedule
    expect_ident(&s.name, &s.name_span, "a schedule name after `schedule`");
    const Span open = cur_.span;
    if (!expect(Tok::kLBrace, "to open the schedule body")) synchronize();
    parse_items(&s.items, &s, open, fmt::format("schedule `{}`", s.name), 0);
    s.span = {begin, prev_end_};
    return s;
  }

  // Items up to the closing `}` of a schedule or loop body.
  void parse_items(std::vector<Item>* items, Schedule* sched, Span open, const std::string& what,
                   int loop_depth) {
    while (!diags_.full()) {
      if (cur_.kind == Tok::kRBrace) {
        advance();
        return;
      }
      if (cur_.kind == Tok::kEof) {
        diags_
            .error(DiagKind::kUnterminated, file_, cur_.span,
                   fmt::format("{} has no closing `}}`", what))
            .note(open, "opened here")
            .set_hint("add `}` at the end of the body");
        return;
      }
      if (cur_.kind == Tok::kSchedule) {
        diags_
            .error(
                DiagKind::kUnterminated, file_, cur_.span,
                fmt::format("`schedule` inside {}: the body before it has no closing `}}`", what))
            .note(open, "opened here");
        return;
      }
      recovering_ = false;
      parse_item(items, sched, loop_depth);
      if (recovering_) synchronize();
    }
  }

  void parse_item(std::vector<Item>* items, Schedule* sched, int loop_depth) {
    switch (cur_.kind) {
      case Tok::kRanks: {
        RanksDecl r;
        r.span.begin = cur_.span.begin;
        advance();
        if (!expect_ident(&r.name, &r.name_span, "the world-size name after `ranks` (e.g. R)"))
          return;
        if (accept(Tok::kPerNode)) {
          if (!expect_ident(&r.per_node, &r.per_node_span,
                            "the ranks-per-node name after `per_node`"))
            return;
        }
        r.span.end = prev_end_;
        if (sched == nullptr) return;
        if (loop_depth > 0) {
          error(r.span, "`ranks` must be declared at the top of the schedule, not inside a loop");
          return;
        }
        if (sched->ranks) {
          diags_.error(DiagKind::kDuplicateName, file_, r.span, "`ranks` declared twice")
              .note(sched->ranks->span, "first declared here");
          return;
        }
        sched->ranks = r;
        return;
      }
      case Tok::kParam: {
        advance();
        do {
          ParamDecl p;
          if (!expect_ident(&p.name, &p.name_span, "a parameter name")) return;
          if (!expect(Tok::kAssign, "and a default value after the parameter name")) return;
          p.value = parse_expr();
          items->push_back(Item{std::move(p)});
        } while (accept(Tok::kComma));
        return;
      }
      case Tok::kInput:
      case Tok::kOutput:
      case Tok::kScratch: {
        TensorDecl t;
        t.span.begin = cur_.span.begin;
        t.kind = cur_.kind == Tok::kInput    ? TensorKind::kInput
                 : cur_.kind == Tok::kOutput ? TensorKind::kOutput
                                             : TensorKind::kScratch;
        advance();
        if (!expect_ident(&t.name, &t.name_span, "a tensor name")) return;
        if (!expect(Tok::kColon, "and a type after the tensor name (e.g. `A : bf16[M, K]`)"))
          return;
        if (!expect_ident(&t.dtype, &t.dtype_span, "an element type (bf16, f16, f32, ...)")) return;
        t.shape_span.begin = cur_.span.begin;
        if (!expect(Tok::kLBracket, "and the shape after the element type")) return;
        do {
          t.shape.push_back(parse_expr());
        } while (accept(Tok::kComma));
        if (!expect(Tok::kRBracket, "to close the shape")) return;
        t.shape_span.end = prev_end_;
        if (accept(Tok::kSymmetric)) {
          t.placement = Placement::kSymmetric;
        } else {
          accept(Tok::kLocal);
        }
        t.span.end = prev_end_;
        items->push_back(Item{std::move(t)});
        return;
      }
      case Tok::kDevice:
        parse_device(items);
        return;
      case Tok::kCompute:
      case Tok::kComm:
        parse_op(items);
        return;
      case Tok::kRoles: {
        advance();
        std::vector<RoleDecl> roles;
        do {
          RoleDecl r;
          // `compute` and `comm` are keywords elsewhere but role names here.
          if (cur_.kind == Tok::kCompute || cur_.kind == Tok::kComm) {
            r.role = std::string(cur_.text);
            r.role_span = cur_.span;
            advance();
          } else if (!expect_ident(&r.role, &r.role_span, "a role name (compute, comm, ...)")) {
            return;
          }
          if (!expect(Tok::kAssign, "and a CTA count after the role name")) return;
          r.count = parse_expr();
          roles.push_back(std::move(r));
        } while (accept(Tok::kComma));
        items->push_back(Item{std::move(roles)});
        return;
      }
      case Tok::kLoop: {
        Loop l;
        l.span.begin = cur_.span.begin;
        const Span kw = cur_.span;
        advance();
        if (!expect_ident(&l.var, &l.var_span, "a loop variable after `loop`")) return;
        if (!expect(Tok::kIn, "after the loop variable (`loop step in 0 .. R`)")) return;
        l.begin = parse_expr();
        if (!expect(Tok::kDotDot, "between the loop bounds (`0 .. R`)")) return;
        l.end = parse_expr();
        const Span open = cur_.span;
        if (!expect(Tok::kLBrace, "to open the loop body")) return;
        if (loop_depth + 1 > kMaxLoopDepth) {
          error(kw, fmt::format("loops nested more than {} deep", kMaxLoopDepth),
                DiagKind::kNestingTooDeep);
          recovering_ = true;
          return;
        }
        parse_items(&l.body, sched, open, fmt::format("loop `{}`", l.var), loop_depth + 1);
        l.span.end = prev_end_;
        items->push_back(Item{std::move(l)});
        return;
      }
      default: {
        auto& d = error(cur_.span, fmt::format("expected an item (param, input, output, scratch, "
                                               "device, compute, comm, loop, roles), found {}",
                                               describe(cur_)));
        if (cur_.kind == Tok::kIdent) {
          const std::string s = did_you_mean(cur_.text, kItemKeywords);
          if (!s.empty()) d.set_hint(s.substr(1));
        }
        return;
      }
    }
  }

  void parse_device(std::vector<Item>* items) {
    DeviceFn f;
    f.span.begin = cur_.span.begin;
    advance();
    if (!expect_ident(&f.name, &f.name_span, "a device function name")) return;
    if (!expect(Tok::kLParen, "to open the parameter list")) return;
    if (cur_.kind != Tok::kRParen) {
      do {
        DeviceParam p;
        Span ns;
        if (!expect_ident(&p.name, &ns, "a parameter name")) return;
        if (!expect(Tok::kColon, "and a type after the parameter name (`x: f32`)")) return;
        Span ts;
        if (!expect_ident(&p.type, &ts, "a parameter type")) return;
        p.span = Span::merge(ns, ts);
        f.params.push_back(p);
      } while (accept(Tok::kComma));
    }
    if (!expect(Tok::kRParen, "to close the parameter list")) return;
    if (!expect(Tok::kArrow, "and the return type (`-> f32`)")) return;
    if (!expect_ident(&f.ret_type, &f.ret_span, "a return type")) return;
    if (cur_.kind != Tok::kLBrace) {
      error(cur_.span, fmt::format("expected `{{` to open the C++ body, found {}", describe(cur_)));
      return;
    }
    // The lexer has read exactly through `{` (one token of lookahead), so the raw scan starts
    // right after it.
    f.body = std::string(lex_.raw_block(cur_.span.end, &f.body_span));
    prev_end_ = f.body_span.end + 1;
    cur_ = lex_.next();
    f.span.end = prev_end_;
    items->push_back(Item{std::move(f)});
  }

  void parse_op(std::vector<Item>* items) {
    OpDecl op;
    op.comm = cur_.kind == Tok::kComm;
    op.span.begin = cur_.span.begin;
    advance();
    if (!expect_ident(&op.name, &op.name_span, "a name for the operation")) return;
    if (!expect(Tok::kAssign, "after the operation's name")) return;
    if (!expect_ident(
            &op.op, &op.op_span,
            op.comm ? "a communication (allreduce, put, ...)" : "a computation (gemm, map, ...)"))
      return;
    if (!expect(Tok::kLParen, "to open the argument list")) return;
    if (cur_.kind != Tok::kRParen) {
      for (;;) {
        if (cur_.kind == Tok::kIdent) {
          // `key = value` or an operand starting with a name.
          Token name_tok = cur_;
          advance();
          if (accept(Tok::kAssign)) {
            NamedArg na;
            na.key = std::string(name_tok.text);
            na.key_span = name_tok.span;
            na.value = parse_operand(nullptr);
            op.named.push_back(std::move(na));
          } else {
            Operand o = parse_operand(&name_tok);
            if (!op.named.empty()) {
              error(o.span, "positional argument after a named one")
                  .set_hint("put tensors first, then `-> outputs`, then `key = value` arguments");
            }
            (op.has_arrow ? op.outputs : op.inputs).push_back(std::move(o));
          }
        } else {
          Operand o = parse_operand(nullptr);
          (op.has_arrow ? op.outputs : op.inputs).push_back(std::move(o));
        }
        if (accept(Tok::kComma)) continue;
        if (cur_.kind == Tok::kArrow) {
          if (op.has_arrow) {
            error(cur_.span, "a second `->` in one argument list");
            return;
          }
          op.has_arrow = true;
          advance();
          continue;
        }
        break;
      }
    }
    if (!expect(Tok::kRParen, "to close the argument list")) return;
    parse_clauses(&op);
    op.span.end = prev_end_;
    items->push_back(Item{std::move(op)});
  }

  void parse_clauses(OpDecl* op) {
    for (;;) {
      if (cur_.kind == Tok::kAfter) {
        Clause c;
        c.name = "after";
        c.span.begin = cur_.span.begin;
        advance();
        do {
          DepRef d;
          d.span.begin = cur_.span.begin;
          if (!expect_ident(&d.target, &d.target_span, "an operation name after `after`")) return;
          if (accept(Tok::kLBracket)) {
            d.iteration = parse_expr();
            if (!expect(Tok::kRBracket, "to close the iteration index")) return;
          }
          if (accept(Tok::kDot)) {
            Span gs;
            if (!expect_ident(&d.granule, &gs, "`tile` or `chunk` after `.`")) return;
            if (d.granule != "tile" && d.granule != "chunk") {
              error(gs, fmt::format("expected `tile` or `chunk` after `.`, found `{}`", d.granule))
                  .set_hint(
                      "`after x` waits for all of x, `after x.tile` / `after x.chunk` per tile or "
                      "chunk");
              return;
            }
          }
          d.span.end = prev_end_;
          c.deps.push_back(std::move(d));
        } while (accept(Tok::kComma));
        c.span.end = prev_end_;
        op->clauses.push_back(std::move(c));
        continue;
      }
      if (cur_.kind != Tok::kIdent) return;
      Clause c;
      c.name = std::string(cur_.text);
      c.span = cur_.span;
      advance();
      if (!expect(Tok::kLParen, fmt::format("after clause `{}`", c.name).c_str())) return;
      if (c.name == "algo") {
        expect_ident(&c.word, &c.word_span, "an algorithm name (one_shot, two_shot, ring)");
      } else if (cur_.kind != Tok::kRParen) {
        do {
          c.args.push_back(parse_expr());
        } while (accept(Tok::kComma));
      }
      if (!expect(Tok::kRParen, "to close the clause")) return;
      c.span.end = prev_end_;
      op->clauses.push_back(std::move(c));
    }
  }

  // An argument. `first` is an identifier the caller has already consumed, if any.
  Operand parse_operand(const Token* first) {
    Operand o;
    Token name_tok;
    if (first != nullptr) {
      name_tok = *first;
    } else if (cur_.kind == Tok::kIdent) {
      name_tok = cur_;
      advance();
    } else {
      o.kind = Operand::Kind::kExpr;
      o.expr = parse_expr();
      o.span = o.expr.span;
      return o;
    }
    o.span = name_tok.span;
    if (name_tok.text == "peer" && cur_.kind == Tok::kLParen) {
      advance();
      o.peer = parse_expr();
      expect(Tok::kRParen, "to close `peer(`");
      o.kind = Operand::Kind::kPeer;
      if (accept(Tok::kDot)) {
        o.kind = Operand::Kind::kPeerTensor;
        if (!expect_ident(&o.name, &o.name_span, "a tensor name after `peer(...).`")) return o;
        parse_index(&o);
      }
      o.span.end = prev_end_;
      return o;
    }
    if (cur_.kind == Tok::kLBracket) {
      o.kind = Operand::Kind::kName;
      o.name = std::string(name_tok.text);
      o.name_span = name_tok.span;
      parse_index(&o);
      o.span.end = prev_end_;
      return o;
    }
    if (precedence(cur_.kind) > 0 || cur_.kind == Tok::kLParen) {
      // An expression that starts with a name: `step + 1`, `min(a, b)`.
      Expr lhs = name_expr(name_tok);
      if (cur_.kind == Tok::kLParen) lhs = finish_call(name_tok, 1);
      o.kind = Operand::Kind::kExpr;
      o.expr = parse_binary_rest(1, std::move(lhs), 1);
      o.span = o.expr.span;
      return o;
    }
    o.kind = Operand::Kind::kName;
    o.name = std::string(name_tok.text);
    o.name_span = name_tok.span;
    return o;
  }

  void parse_index(Operand* o) {
    if (!accept(Tok::kLBracket)) return;
    do {
      o->index.push_back(parse_expr());
    } while (accept(Tok::kComma));
    expect(Tok::kRBracket, "to close the index");
  }

  // ---- expressions --------------------------------------------------------------------------
  Expr parse_expr() { return parse_binary(1, 0); }

  Expr parse_binary(int min_prec, int depth) {
    Expr lhs = parse_unary(depth);
    return parse_binary_rest(min_prec, std::move(lhs), depth);
  }

  Expr parse_binary_rest(int min_prec, Expr lhs, int depth) {
    for (;;) {
      const int prec = precedence(cur_.kind);
      if (prec == 0 || prec < min_prec) return lhs;
      const Token op = cur_;
      advance();
      Expr rhs = parse_binary(prec + 1, depth + 1);
      Expr e;
      e.kind = Expr::Kind::kBinary;
      e.op = std::string(op.text);
      e.span = Span::merge(lhs.span, rhs.span);
      e.height = 1 + std::max(lhs.height, rhs.height);
      e.args.push_back(std::move(lhs));
      e.args.push_back(std::move(rhs));
      if (e.height > kMaxExprHeight) return too_tall(op.span);
      lhs = std::move(e);
    }
  }

  Expr error_expr(Span span) {
    Expr e;
    e.kind = Expr::Kind::kInt;
    e.int_value = 1;
    e.span = span;
    return e;
  }

  // Skips the rest of an expression that is too deep, without recursing, once its error is out.
  Expr skip_deep_expr() {
    recovering_ = true;
    while (cur_.kind != Tok::kEof && !is_item_start(cur_.kind) && cur_.kind != Tok::kRBrace)
      advance();
    return error_expr(cur_.span);
  }

  // An expression taller than kMaxExprHeight, found at `at` (the operator that made it so).
  Expr too_tall(Span at) {
    if (!deep_reported_) {
      deep_reported_ = true;
      diags_
          .error(DiagKind::kNestingTooDeep, file_, at,
                 fmt::format("expression more than {} operators deep", kMaxExprHeight))
          .set_hint(
              "each operator of a chain like `a + b + c` is one level; split a long sum or "
              "product over several `param`s");
    }
    return skip_deep_expr();
  }

  Expr parse_unary(int depth) {
    if (depth > kMaxExprDepth) {
      if (!deep_reported_) {
        deep_reported_ = true;
        diags_
            .error(DiagKind::kNestingTooDeep, file_, cur_.span,
                   fmt::format("expression nested more than {} deep", kMaxExprDepth))
            .set_hint("split it with a `param`");
      }
      return skip_deep_expr();
    }
    if (cur_.kind == Tok::kMinus || cur_.kind == Tok::kNot) {
      const Token op = cur_;
      advance();
      Expr operand = parse_unary(depth + 1);
      Expr e;
      e.kind = Expr::Kind::kUnary;
      e.op = std::string(op.text);
      e.span = Span::merge(op.span, operand.span);
      e.height = 1 + operand.height;
      e.args.push_back(std::move(operand));
      if (e.height > kMaxExprHeight) return too_tall(op.span);
      return e;
    }
    return parse_primary(depth);
  }

  Expr name_expr(const Token& t) {
    Expr e;
    e.kind = Expr::Kind::kName;
    e.name = std::string(t.text);
    e.span = t.span;
    return e;
  }

  Expr finish_call(const Token& name, int depth) {
    Expr e;
    e.kind = Expr::Kind::kCall;
    e.name = std::string(name.text);
    advance();  // (
    if (cur_.kind != Tok::kRParen) {
      do {
        e.args.push_back(parse_binary(1, depth + 1));
        e.height = std::max(e.height, 1 + e.args.back().height);
      } while (accept(Tok::kComma));
    }
    expect(Tok::kRParen, "to close the call");
    e.span = {name.span.begin, prev_end_};
    if (e.height > kMaxExprHeight) return too_tall(name.span);
    return e;
  }

  Expr parse_primary(int depth) {
    const Token t = cur_;
    switch (t.kind) {
      case Tok::kInt: {
        advance();
        Expr e;
        e.kind = Expr::Kind::kInt;
        e.int_value = t.int_value;
        e.span = t.span;
        return e;
      }
      case Tok::kFloat: {
        advance();
        Expr e;
        e.kind = Expr::Kind::kFloat;
        e.float_value = t.float_value;
        e.span = t.span;
        return e;
      }
      case Tok::kIdent:
        advance();
        if (cur_.kind == Tok::kLParen) return finish_call(t, depth);
        return name_expr(t);
      case Tok::kLParen: {
        advance();
        Expr e = parse_binary(1, depth + 1);
        expect(Tok::kRParen, "to close `(`");
        // Keep the parenthesised span so diagnostics underline what the user wrote.
        e.span = {t.span.begin, prev_end_};
        return e;
      }
      default:
        error(t.span, fmt::format("expected an expression, found {}", describe(t)));
        return error_expr(t.span);
    }
  }

  std::shared_ptr<const SourceFile> file_;
  Diagnostics& diags_;
  Lexer lex_;
  Token cur_;
  uint32_t prev_end_ = 0;
  bool recovering_ = false;
  bool deep_reported_ = false;
  Diagnostic scratch_;
};

}  // namespace

Module parse(std::shared_ptr<const SourceFile> file, Diagnostics& diags) {
  Parser p(std::move(file), diags);
  return p.parse_module();
}

}  // namespace mkc::dsl
