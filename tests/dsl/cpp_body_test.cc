// Device-function bodies read as C++ reads them (dsl/cpp_body.h): where the body ends, and every
// preprocessor directive or brace digraph in it, however it is spelled or hidden: the reproducers
// of issue 34 (a directive after a block comment opened on the line before, braces as digraphs, a
// digit separator taken for a character literal) and the spellings the old line scan knew.
#include "dsl/cpp_body.h"

#include <doctest/doctest.h>

#include <memory>
#include <string>

#include "dsl/diagnostics.h"
#include "dsl/parser.h"
#include "dsl/source.h"

namespace mkc::dsl {
namespace {

constexpr size_t kNone = CppBodyScan::kNone;

// The scan of `body` closed by its `}`.
CppBodyScan closed(const std::string& body) {
  return scan_cpp_body(body + "}");
}

size_t problem_at(const std::string& body) {
  return closed(body).problem_at;
}

TEST_CASE("the body ends at the brace C++ closes it with") {
  CHECK(scan_cpp_body("return x; }").end == 10u);
  CHECK(scan_cpp_body("if (a) { b(); } return x; } tail").end == 26u);
  // Braces inside comments and literals do not count; a digit separator is not a quote.
  CHECK(scan_cpp_body("// }\n return '}'; }").end == 18u);
  CHECK(scan_cpp_body("/* } */ return \"}\"; }").end == 20u);
  CHECK(scan_cpp_body("return 1'000 + 0x1'f; }").end == 22u);
  CHECK(scan_cpp_body("return 1.5e+3f + 0x1p-3; }").end == 25u);
  // A line splice continues a // comment onto the next line, as C++ reads it.
  CHECK(scan_cpp_body("x; // a \\\n } still a comment\n }").end == 30u);
  // Raw strings and encoding prefixes.
  CHECK(scan_cpp_body("auto s = R\"d( } \" )d\"; }").end == 23u);
  CHECK(scan_cpp_body("auto s = u8\"}\"; auto c = L'}'; }").end == 31u);
  CHECK(scan_cpp_body("return x;").end == kNone);
  CHECK(closed("return x;").problem_at == kNone);
}

TEST_CASE("the escapes of issue 34 are seen") {
  // A directive after a block comment that began on the line before.
  const std::string comment = "return x; /*\n*/ #include \"/etc/passwd\"\n";
  CHECK(problem_at(comment) == comment.find('#'));
  CHECK(closed(comment).problem == "a preprocessor directive");
  // `#define` the same way.
  CHECK(problem_at("return x; /*\n*/ #define Y 1\n") != kNone);
  // Braces as digraphs: the brace counter saw none; C++ closes the function with `%>`.
  const std::string digraph = "return x; %> __global__ void evil() <% return;";
  CHECK(problem_at(digraph) == digraph.find('%'));
  CHECK(closed(digraph).problem.find("digraph") != std::string::npos);
  // A digit separator: the counter took `'0; } ... {'` for a character literal and skipped the
  // braces between; C++ reads a number, so the body ends at the first `}`, where C++ ends it.
  const std::string separator = "return 1'0; } namespace mkc { __global__ void evil() { '; ";
  const CppBodyScan s = scan_cpp_body(separator + "}");
  CHECK(s.end == separator.find('}'));
}

TEST_CASE("preprocessor directives, however spelled, anywhere in the body") {
  CHECK(problem_at("return x;") == kNone);
  CHECK(problem_at("#include <x>") == 0u);
  CHECK(problem_at("  return x;\n  #define X 1\n") == 14u);
  CHECK(problem_at("x;\n/* a */ /* b\n */ #pragma once") == 20u);
  CHECK(problem_at("x;\n%:include <x>") == 3u);
  // A trigraph (split so this file has none).
  CHECK(problem_at("x;\n?\?=include <x>") == 3u);
  CHECK(problem_at("x;\n\\\n#include <x>") == 5u);
  CHECK(problem_at("x;\n#\\\ninclude <x>") == 3u);
  CHECK(problem_at("return _Pragma(\"once\") x;") == 7u);
  CHECK(problem_at("return my_Pragma + _Pragmatic;") == kNone);
  CHECK(problem_at("x; // #include <x>\n") == kNone);
  CHECK(problem_at("x = a // \\\n#include <x>\n") == kNone);
  // Not at the start of a line: `#` has no place in a body outside a directive either.
  CHECK(problem_at("return x; #include <x>") == 10u);
  // In literals and comments, `#` and digraphs are text.
  CHECK(problem_at("const char* s = \"#include <x> <% %>\"; /* # */ return 1;") == kNone);
}

TEST_CASE("literals and comments C++ never closes hide the body's end") {
  for (const char* body :
       {"return \"abc;\n}", "return 'a;\n}", "/* never closed }", "auto s = R\"d( never closed }",
        "auto s = R\"(a)x\" }", "auto s = R\"a b(x)a b\"; }"}) {
    CAPTURE(body);
    const CppBodyScan s = scan_cpp_body(body);
    CHECK(s.end == kNone);
    CHECK(s.fatal);
  }
}

TEST_CASE("the lexer ends a device body where C++ does, and names what is unclosed") {
  const auto errors_of = [](const std::string& text) {
    Diagnostics diags;
    parse(std::make_shared<SourceFile>("t.mks", text), diags);
    return render_text(diags.all(), false);
  };
  // The old counter took `'0; }` for a character literal running to the line's end, and the
  // body swallowed the next line; now the body ends at `}` and the tensor is schedule text.
  const std::string ok =
      errors_of("schedule s {\n  device f(x: f32) -> f32 { return 1'0; }\n  input X : f32[4]\n}\n");
  CHECK_MESSAGE(ok.empty(), ok);
  const std::string unclosed =
      errors_of("schedule s {\n  device f(x: f32) -> f32 { return \"x; }\n}\n");
  CHECK_MESSAGE(unclosed.find("t.mks:2:36: error: device function body: a string literal not "
                              "closed on its line") != std::string::npos,
                unclosed);
}

}  // namespace
}  // namespace mkc::dsl
