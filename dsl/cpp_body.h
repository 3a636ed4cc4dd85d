// A device function's body read as C++ reads it. The body is pasted into the generated kernel as
// written and compiled by NVRTC, so the lexer must find the body's end where the C++ compiler will,
// and the check must see every preprocessor directive the C++ preprocessor would run. A brace
// counter and a line scan read some bodies differently from C++ (a directive after a block comment
// that began on the line before; braces spelled `<%` `%>`; a digit separator `1'0` taken for a
// character literal), and each difference let a body close its function or include a file of the
// compiling machine.
//
// The scan follows the C++ translation phases 1-3: line splices (backslash-newline) first, then
// preprocessing tokens: comments, identifiers, pp-numbers (digit separators, exponents), character
// and string literals with their encoding prefixes, raw strings, punctuators (digraphs included).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace mkc::dsl {

struct CppBodyScan {
  static constexpr size_t kNone = static_cast<size_t>(-1);
  // The offset of the `}` that closes the body (the body's braces balanced), kNone when the text
  // ends first.
  size_t end = kNone;
  // The first thing a body may not hold, at `problem_at` (kNone when there is none): a
  // preprocessor directive or `#` anywhere (`#`, `%:`, `??=`), `_Pragma`, a brace digraph (`<%`
  // `%>`), a literal or comment not closed where C++ closes it.
  size_t problem_at = kNone;
  size_t problem_length = 0;
  std::string problem;  // "a preprocessor directive", ... (what, for a diagnostic)
  // The problem hides where the body ends (a comment or literal never closed): `end` is kNone.
  bool fatal = false;
};

// Scans `text`, which starts just after the body's opening `{`, up to the `}` that closes it.
CppBodyScan scan_cpp_body(std::string_view text);

}  // namespace mkc::dsl
