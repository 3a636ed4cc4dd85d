// The .mks lexer: turns text into tokens on demand. Newlines are not significant; `#` starts a
// comment to the end of the line. Bad characters and malformed numbers are reported and skipped,
// so the parser always gets a well-formed token stream ending in kEof.
//
// Device function bodies are C++, not .mks: the parser asks for them as one raw block
// (raw_block()) when it stands on the opening brace.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "dsl/diagnostics.h"
#include "dsl/source.h"

namespace mkc::dsl {

#define MKC_KEYWORDS(X)      \
  X(kSchedule, "schedule")   \
  X(kRanks, "ranks")         \
  X(kPerNode, "per_node")    \
  X(kParam, "param")         \
  X(kInput, "input")         \
  X(kOutput, "output")       \
  X(kScratch, "scratch")     \
  X(kSymmetric, "symmetric") \
  X(kLocal, "local")         \
  X(kDevice, "device")       \
  X(kCompute, "compute")     \
  X(kComm, "comm")           \
  X(kLoop, "loop")           \
  X(kIn, "in")               \
  X(kRoles, "roles")         \
  X(kAfter, "after")

enum class Tok {
  kEof,
  kIdent,
  kInt,
  kFloat,
  kLBrace,
  kRBrace,
  kLParen,
  kRParen,
  kLBracket,
  kRBracket,
  kComma,
  kColon,
  kAssign,
  kArrow,
  kPlus,
  kMinus,
  kStar,
  kSlash,
  kPercent,
  kDot,
  kDotDot,
  kLt,
  kLe,
  kGt,
  kGe,
  kEqEq,
  kNe,
  kAndAnd,
  kOrOr,
  kNot,
#define MKC_KW_ENUM(e, text) e,
  MKC_KEYWORDS(MKC_KW_ENUM)
#undef MKC_KW_ENUM
};

// How a token kind reads in a message: "`{`", "identifier", "`schedule`".
std::string tok_description(Tok t);

struct Token {
  Tok kind = Tok::kEof;
  Span span;
  std::string_view text;  // points into the SourceFile
  int64_t int_value = 0;
  double float_value = 0;
};

// An integer literal as the language writes it: decimal digits with `_` separators (4_096) or
// hexadecimal after 0x (0x1000), fitting a signed 64-bit integer. The lexer reads integers with
// it, and so does parse_integer_value().
enum class IntLiteral { kOk, kMalformed, kOutOfRange };
IntLiteral parse_int_literal(std::string_view text, int64_t* value);

// The VALUE of a `-D NAME=VALUE` override: an integer literal of the language, optionally after a
// `-`. On failure, nullopt, with `error` saying why ("`abc` is not an integer (...)").
std::optional<int64_t> parse_integer_value(std::string_view text, std::string* error);

class Lexer {
 public:
  Lexer(std::shared_ptr<const SourceFile> file, Diagnostics& diags);

  Token next();

  // Called right after the parser consumed a `{` (ending at `open_end`): scans C++ text up to the
  // matching `}`, skipping braces inside strings, character literals and comments. Returns the body
  // (without the braces); the next token is the one after `}`. Reports kUnterminated at EOF.
  std::string_view raw_block(uint32_t open_end, Span* body_span);

 private:
  void skip_space_and_comments();
  Token lex_number();

  std::shared_ptr<const SourceFile> file_;
  std::string_view text_;
  Diagnostics& diags_;
  uint32_t pos_ = 0;
};

}  // namespace mkc::dsl
