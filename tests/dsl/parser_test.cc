// Lexer and parser on their own: tokens, AST shape and spans, raw device bodies, error recovery,
// and diagnostics rendering (text with and without colour, JSON).
#include "dsl/parser.h"

#include <doctest/doctest.h>

#include <memory>
#include <string>

#include "dsl/ast_json.h"
#include "dsl/diagnostics.h"
#include "dsl/lexer.h"

namespace mkc::dsl {
namespace {

std::shared_ptr<const SourceFile> src(std::string text) {
  return std::make_shared<SourceFile>("t.mks", std::move(text));
}

std::vector<Token> lex_all(const std::string& text, Diagnostics& diags) {
  auto f = src(text);
  Lexer lex(f, diags);
  std::vector<Token> out;
  for (Token t = lex.next(); t.kind != Tok::kEof; t = lex.next()) out.push_back(t);
  return out;
}

TEST_CASE("lexer: ranges, arrows, numbers and comments") {
  Diagnostics d;
  const auto toks = lex_all("loop s in 0..R { # comment ( \n 0x10 4_096 0.125 1e-3 -> == != }", d);
  CHECK_FALSE(d.has_errors());
  REQUIRE(toks.size() == 15);
  CHECK(toks[0].kind == Tok::kLoop);
  CHECK(toks[3].kind == Tok::kInt);
  CHECK(toks[4].kind == Tok::kDotDot);
  CHECK(toks[5].kind == Tok::kIdent);
  CHECK(toks[7].int_value == 16);
  CHECK(toks[8].int_value == 4096);
  CHECK(toks[9].kind == Tok::kFloat);
  CHECK(toks[9].float_value == doctest::Approx(0.125));
  CHECK(toks[10].float_value == doctest::Approx(1e-3));
  CHECK(toks[11].kind == Tok::kArrow);
  CHECK(toks[12].kind == Tok::kEqEq);
  CHECK(toks[13].kind == Tok::kNe);
}

TEST_CASE("lexer: a run of bad bytes is one error, and lexing goes on") {
  Diagnostics d;
  const auto toks = lex_all("a \x01\x02\x03\xff b", d);
  CHECK(d.error_count() == 1);
  CHECK(d.all()[0].kind == DiagKind::kInvalidCharacter);
  REQUIRE(toks.size() == 2);
  CHECK(toks[1].text == "b");
}

constexpr const char* kSchedule = R"(schedule gemm_allreduce {
  ranks R per_node L
  param M = 128, N = 256
  input  A : bf16[M, 64]
  output C : bf16[M, N] symmetric
  device gelu(x: f32) -> f32 {
    // a brace in a comment } and in a string "}" must not end the body
    return x > 0.0f ? x : 0.0f;
  }
  compute mm = gemm(A, B -> C, epilogue = gelu) tile(128, 256, 64) rows_from(rank)
  comm    ar = allreduce(C, sum) chunk(128, 256) after mm.tile algo(one_shot)
  loop step in 0 .. R {
    comm kv = put(C -> peer(rank + 1).C) when(step < R - 1) after kv[step - 1].chunk
  }
  roles compute = 100, comm = 32
}
)";

TEST_CASE("parser: a full schedule gives the expected tree") {
  Diagnostics d;
  const Module m = parse(src(kSchedule), d);
  REQUIRE_FALSE(d.has_errors());
  REQUIRE(m.schedules.size() == 1);
  const Schedule& s = m.schedules[0];
  CHECK(s.name == "gemm_allreduce");
  REQUIRE(s.ranks.has_value());
  CHECK(s.ranks->name == "R");
  CHECK(s.ranks->per_node == "L");
  REQUIRE(s.items.size() == 9);  // 2 params, 2 tensors, device, 2 ops, loop, roles

  const auto& fn = std::get<DeviceFn>(s.items[4].node);
  CHECK(fn.name == "gelu");
  CHECK(fn.body.find("return x > 0.0f") != std::string::npos);
  CHECK(fn.body.find("\"}\"") != std::string::npos);

  const auto& mm = std::get<OpDecl>(s.items[5].node);
  CHECK_FALSE(mm.comm);
  CHECK(mm.op == "gemm");
  CHECK(mm.inputs.size() == 2);
  CHECK(mm.outputs.size() == 1);
  REQUIRE(mm.named.size() == 1);
  CHECK(mm.named[0].key == "epilogue");
  REQUIRE(mm.clauses.size() == 2);
  CHECK(mm.clauses[0].name == "tile");
  CHECK(mm.clauses[0].args.size() == 3);
  CHECK(mm.clauses[1].name == "rows_from");

  const auto& ar = std::get<OpDecl>(s.items[6].node);
  REQUIRE(ar.clauses.size() == 3);
  CHECK(ar.clauses[1].deps[0].target == "mm");
  CHECK(ar.clauses[1].deps[0].granule == "tile");
  CHECK(ar.clauses[2].word == "one_shot");

  const auto& loop = std::get<Loop>(s.items[7].node);
  CHECK(loop.var == "step");
  REQUIRE(loop.body.size() == 1);
  const auto& put = std::get<OpDecl>(loop.body[0].node);
  CHECK(put.outputs[0].kind == Operand::Kind::kPeerTensor);
  CHECK(expr_to_string(put.outputs[0].peer) == "(rank + 1)");
  const DepRef& dep = put.clauses[1].deps[0];
  REQUIRE(dep.iteration.has_value());
  CHECK(expr_to_string(*dep.iteration) == "(step - 1)");

  const auto& roles = std::get<std::vector<RoleDecl>>(s.items[8].node);
  CHECK(roles.size() == 2);
  CHECK(roles[0].role == "compute");

  // Spans: the gemm op name sits on line 10, column 11.
  const LineCol lc = m.file->line_col(mm.name_span.begin);
  CHECK(lc.line == 10);
  CHECK(lc.col == 11);
}

TEST_CASE("parser: operator precedence and parentheses") {
  Diagnostics d;
  const Module m =
      parse(src("schedule s { param A = 1 + 2 * 3 - (4 - 5) % 2, B = -A < 3 && 1 }"), d);
  REQUIRE_FALSE(d.has_errors());
  const auto& a = std::get<ParamDecl>(m.schedules[0].items[0].node);
  CHECK(expr_to_string(a.value) == "((1 + (2 * 3)) - ((4 - 5) % 2))");
  const auto& b = std::get<ParamDecl>(m.schedules[0].items[1].node);
  CHECK(expr_to_string(b.value) == "((-A < 3) && 1)");
}

TEST_CASE("parser: recovers and reports a mistake in each of several items") {
  Diagnostics d;
  parse(src("schedule s {\n  input A bf16[4]\n  param = 3\n  compute x = gemm(A B -> C)\n  input Z "
            ": f32[4]\n}\n"),
        d);
  REQUIRE(d.error_count() == 3);
  CHECK(d.all()[0].file->line_col(d.all()[0].span.begin).line == 2);
  CHECK(d.all()[1].file->line_col(d.all()[1].span.begin).line == 3);
  CHECK(d.all()[2].file->line_col(d.all()[2].span.begin).line == 4);
}

TEST_CASE("parser: deep nesting is an error, not a stack overflow") {
  Diagnostics d;
  const std::string deep =
      "schedule s { param M = " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }";
  parse(src(deep), d);
  REQUIRE(d.has_errors());
  CHECK(d.all()[0].kind == DiagKind::kNestingTooDeep);

  Diagnostics d2;
  std::string loops = "schedule s {";
  for (int i = 0; i < 5000; ++i) loops += " loop i" + std::to_string(i) + " in 0 .. 2 {";
  parse(src(loops), d2);
  REQUIRE(d2.has_errors());
  CHECK(d2.all()[0].kind == DiagKind::kNestingTooDeep);
}

TEST_CASE("parser: a chain of operators is bounded by its height, not only by brackets") {
  // 20,000 terms overflowed the stack of every later recursive walk (evaluation, copies, the
  // JSON dump); any binary operator chains alike, and so do unary operators and calls.
  for (const char* op : {" + ", " * ", " && ", " - ", " < "}) {
    std::string chain = "schedule s { param M = 1";
    for (int i = 0; i < 20000; ++i) chain += std::string(op) + "1";
    Diagnostics d;
    parse(src(chain + " }"), d);
    REQUIRE_MESSAGE(d.has_errors(), op);
    CHECK(d.all()[0].kind == DiagKind::kNestingTooDeep);
    CHECK(d.all()[0].message == "expression more than 1024 operators deep");
  }
  // A sum at the limit parses, and its tree is as tall as it is long.
  std::string sum = "schedule s { param M = 1";
  for (int i = 1; i < kMaxExprHeight; ++i) sum += " + 1";
  Diagnostics ok;
  const Module m = parse(src(sum + " }"), ok);
  REQUIRE_FALSE(ok.has_errors());
  CHECK(std::get<ParamDecl>(m.schedules[0].items[0].node).value.height == kMaxExprHeight);
  Diagnostics over;
  parse(src(sum + " + 1 }"), over);
  CHECK(over.has_errors());
  // Heights add up through brackets and calls.
  Diagnostics d;
  const Module h = parse(src("schedule s { param M = -(1 + 2) * max(3, 4 + 5 * 6) }"), d);
  REQUIRE_FALSE(d.has_errors());
  CHECK(std::get<ParamDecl>(h.schedules[0].items[0].node).value.height == 5);
}

TEST_CASE("lexer: integer literals, and the values of -D overrides by the same rules") {
  int64_t v = 0;
  CHECK(parse_int_literal("4_096", &v) == IntLiteral::kOk);
  CHECK(v == 4096);
  CHECK(parse_int_literal("0x10", &v) == IntLiteral::kOk);
  CHECK(v == 16);
  CHECK(parse_int_literal("9223372036854775807", &v) == IntLiteral::kOk);
  CHECK(parse_int_literal("9223372036854775808", &v) == IntLiteral::kOutOfRange);
  CHECK(parse_int_literal("0x8000000000000000", &v) == IntLiteral::kOutOfRange);
  for (const char* bad : {"", "abc", "12x4", "4096_", " 5", "+5", "-5", "0x", "0x-1", "1.5"}) {
    CHECK_MESSAGE(parse_int_literal(bad, &v) == IntLiteral::kMalformed, bad);
  }
  std::string why;
  CHECK(parse_integer_value("4_096", &why) == 4096);
  CHECK(parse_integer_value("0x1000", &why) == 4096);
  CHECK(parse_integer_value("-3", &why) == -3);
  CHECK_FALSE(parse_integer_value("abc", &why));
  CHECK(why == "`abc` is not an integer (write 4096, 4_096 or 0x1000)");
  CHECK_FALSE(parse_integer_value("99999999999999999999", &why));
  CHECK(why == "`99999999999999999999` is out of range: integers must fit in 64 bits");
  // The lexer reads integers the same way.
  Diagnostics d;
  const auto toks = lex_all("4096_ 0x1f", d);
  REQUIRE(d.error_count() == 1);
  CHECK(d.all()[0].message == "malformed number `4096_`");
  CHECK(toks[1].int_value == 31);
}

TEST_CASE("parser: empty and schedule-less files are errors") {
  Diagnostics d;
  parse(src(""), d);
  REQUIRE(d.error_count() == 1);
  CHECK(d.all()[0].message == "the file holds no schedule");
  Diagnostics d2;
  parse(src("param M = 4"), d2);
  CHECK(d2.all()[0].message.find("expected `schedule`") == 0);
}

TEST_CASE("diagnostics: text, colour and JSON") {
  auto f = src("schedule s {\n\tinput X : f32[bogus]\n}\n");
  Diagnostics d;
  d.error(DiagKind::kUndefinedName, f, {28, 33}, "undefined name `bogus`")
      .set_hint("did you mean `M`?");
  const std::string plain = render_text(d.all(), false);
  CHECK(plain ==
        "t.mks:2:16: error: undefined name `bogus` [undefined-name]\n"
        " 2 | \tinput X : f32[bogus]\n"
        "   | \t              ^~~~~\n"
        "hint: did you mean `M`?\n");
  const std::string colored = render_text(d.all(), true);
  CHECK(colored.find("\033[1;31merror:") != std::string::npos);
  const nlohmann::json j = to_json(d.all()[0]);
  CHECK(j["kind"] == "undefined-name");
  CHECK(j["line"] == 2);
  CHECK(j["column"] == 16);
  CHECK(j["end_column"] == 21);
  CHECK(j["hint"] == "did you mean `M`?");
}

TEST_CASE("diagnostics: an exact repeat is reported once") {
  auto f = src("x");
  Diagnostics d;
  d.error(DiagKind::kSyntax, f, {0, 1}, "same");
  d.error(DiagKind::kSyntax, f, {0, 1}, "same");
  CHECK(d.error_count() == 1);
}

}  // namespace
}  // namespace mkc::dsl
