#include "dsl/lexer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <limits>

#include "dsl/cpp_body.h"

namespace mkc::dsl {

std::string tok_description(Tok t) {
  switch (t) {
    case Tok::kEof:
      return "end of file";
    case Tok::kIdent:
      return "identifier";
    case Tok::kInt:
      return "integer";
    case Tok::kFloat:
      return "number";
    case Tok::kLBrace:
      return "`{`";
    case Tok::kRBrace:
      return "`}`";
    case Tok::kLParen:
      return "`(`";
    case Tok::kRParen:
      return "`)`";
    case Tok::kLBracket:
      return "`[`";
    case Tok::kRBracket:
      return "`]`";
    case Tok::kComma:
      return "`,`";
    case Tok::kColon:
      return "`:`";
    case Tok::kAssign:
      return "`=`";
    case Tok::kArrow:
      return "`->`";
    case Tok::kPlus:
      return "`+`";
    case Tok::kMinus:
      return "`-`";
    case Tok::kStar:
      return "`*`";
    case Tok::kSlash:
      return "`/`";
    case Tok::kPercent:
      return "`%`";
    case Tok::kDot:
      return "`.`";
    case Tok::kDotDot:
      return "`..`";
    case Tok::kLt:
      return "`<`";
    case Tok::kLe:
      return "`<=`";
    case Tok::kGt:
      return "`>`";
    case Tok::kGe:
      return "`>=`";
    case Tok::kEqEq:
      return "`==`";
    case Tok::kNe:
      return "`!=`";
    case Tok::kAndAnd:
      return "`&&`";
    case Tok::kOrOr:
      return "`||`";
    case Tok::kNot:
      return "`!`";
#define MKC_KW_DESC(e, text) \
  case Tok::e:               \
    return "`" text "`";
      MKC_KEYWORDS(MKC_KW_DESC)
#undef MKC_KW_DESC
  }
  return "token";
}

Lexer::Lexer(std::shared_ptr<const SourceFile> file, Diagnostics& diags)
    : file_(std::move(file)), text_(file_->text()), diags_(diags) {}

void Lexer::skip_space_and_comments() {
  while (pos_ < text_.size()) {
    const char c = text_[pos_];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v') {
      ++pos_;
    } else if (c == '#') {
      while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
    } else {
      break;
    }
  }
}

Token Lexer::lex_number() {
  const uint32_t start = pos_;
  bool is_float = false;
  while (pos_ < text_.size() &&
         (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_')) {
    ++pos_;
  }
  // A fraction needs a digit after the dot, so `0..R` lexes as 0, .., R.
  if (pos_ + 1 < text_.size() && text_[pos_] == '.' &&
      std::isdigit(static_cast<unsigned char>(text_[pos_ + 1]))) {
    is_float = true;
    ++pos_;
    while (pos_ < text_.size() && std::isalnum(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  // Exponent sign: 1e-3.
  if (pos_ < text_.size() && (text_[pos_] == '-' || text_[pos_] == '+') && pos_ > start &&
      (text_[pos_ - 1] == 'e' || text_[pos_ - 1] == 'E') && text_.substr(start, 2) != "0x") {
    is_float = true;
    ++pos_;
    while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  Token t;
  t.span = {start, pos_};
  t.text = text_.substr(start, pos_ - start);
  const bool hex = t.text.size() > 2 && t.text[0] == '0' && (t.text[1] == 'x' || t.text[1] == 'X');
  if (!is_float && !hex) is_float = t.text.find_first_of("eE") != std::string_view::npos;
  IntLiteral status = IntLiteral::kOk;
  if (is_float) {
    t.kind = Tok::kFloat;
    std::string digits;
    for (char c : t.text) {
      if (c != '_') digits += c;
    }
    errno = 0;
    char* end = nullptr;
    t.float_value = std::strtod(digits.c_str(), &end);
    if (errno == ERANGE) status = IntLiteral::kOutOfRange;
    if (end == nullptr || *end != '\0' || t.text.back() == '_') status = IntLiteral::kMalformed;
  } else {
    t.kind = Tok::kInt;
    status = parse_int_literal(t.text, &t.int_value);
  }
  if (status != IntLiteral::kOk) {
    const bool range = status == IntLiteral::kOutOfRange;
    diags_
        .error(DiagKind::kInvalidNumber, file_, t.span,
               range ? fmt::format("number `{}` is out of range", t.text)
                     : fmt::format("malformed number `{}`", t.text))
        .set_hint(range ? "integers must fit in 64 bits (at most 9223372036854775807)"
                        : "write integers as 4096, 4_096 or 0x1000, decimals as 0.125");
    t.int_value = 1;  // A harmless value so checking can go on.
    t.float_value = 1;
  }
  return t;
}

IntLiteral parse_int_literal(std::string_view text, int64_t* value) {
  *value = 0;
  // Digits (and `_` between them) only: no sign, no space, no trailing separator.
  if (text.empty() || !std::isdigit(static_cast<unsigned char>(text[0])) || text.back() == '_')
    return IntLiteral::kMalformed;
  std::string digits;
  for (char c : text) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return IntLiteral::kMalformed;
    if (c != '_') digits += c;
  }
  const bool hex = digits.size() > 2 && digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X');
  // strtoull would accept a sign after the 0x; the text has none, but its digits must follow.
  if (hex && !std::isxdigit(static_cast<unsigned char>(digits[2]))) return IntLiteral::kMalformed;
  errno = 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(digits.c_str(), &end, hex ? 16 : 10);
  if (end == nullptr || *end != '\0') return IntLiteral::kMalformed;
  if (errno == ERANGE || v > static_cast<unsigned long long>(std::numeric_limits<int64_t>::max()))
    return IntLiteral::kOutOfRange;
  *value = static_cast<int64_t>(v);
  return IntLiteral::kOk;
}

std::optional<int64_t> parse_integer_value(std::string_view text, std::string* error) {
  const bool negative = !text.empty() && text[0] == '-';
  const std::string_view literal = negative ? text.substr(1) : text;
  int64_t v = 0;
  switch (parse_int_literal(literal, &v)) {
    case IntLiteral::kOk:
      return negative ? -v : v;
    case IntLiteral::kOutOfRange:
      *error = fmt::format("`{}` is out of range: integers must fit in 64 bits", text);
      return std::nullopt;
    case IntLiteral::kMalformed:
      break;
  }
  *error = fmt::format("`{}` is not an integer (write 4096, 4_096 or 0x1000)", text);
  return std::nullopt;
}

Token Lexer::next() {
  for (;;) {
    skip_space_and_comments();
    Token t;
    if (pos_ >= text_.size()) {
      t.kind = Tok::kEof;
      t.span = {static_cast<uint32_t>(text_.size()), static_cast<uint32_t>(text_.size())};
      return t;
    }
    const uint32_t start = pos_;
    const char c = text_[pos_];
    const auto make = [&](Tok k, uint32_t len) {
      pos_ += len;
      t.kind = k;
      t.span = {start, pos_};
      t.text = text_.substr(start, len);
      return t;
    };
    const char n = pos_ + 1 < text_.size() ? text_[pos_ + 1] : '\0';
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      while (pos_ < text_.size() &&
             (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_'))
        ++pos_;
      t.span = {start, pos_};
      t.text = text_.substr(start, pos_ - start);
      t.kind = Tok::kIdent;
#define MKC_KW_MATCH(e, kw) \
  if (t.text == kw) t.kind = Tok::e;
      MKC_KEYWORDS(MKC_KW_MATCH)
#undef MKC_KW_MATCH
      return t;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) return lex_number();
    switch (c) {
      case '{':
        return make(Tok::kLBrace, 1);
      case '}':
        return make(Tok::kRBrace, 1);
      case '(':
        return make(Tok::kLParen, 1);
      case ')':
        return make(Tok::kRParen, 1);
      case '[':
        return make(Tok::kLBracket, 1);
      case ']':
        return make(Tok::kRBracket, 1);
      case ',':
        return make(Tok::kComma, 1);
      case ':':
        return make(Tok::kColon, 1);
      case '+':
        return make(Tok::kPlus, 1);
      case '*':
        return make(Tok::kStar, 1);
      case '/':
        return make(Tok::kSlash, 1);
      case '%':
        return make(Tok::kPercent, 1);
      case '-':
        return n == '>' ? make(Tok::kArrow, 2) : make(Tok::kMinus, 1);
      case '.':
        return n == '.' ? make(Tok::kDotDot, 2) : make(Tok::kDot, 1);
      case '=':
        return n == '=' ? make(Tok::kEqEq, 2) : make(Tok::kAssign, 1);
      case '<':
        return n == '=' ? make(Tok::kLe, 2) : make(Tok::kLt, 1);
      case '>':
        return n == '=' ? make(Tok::kGe, 2) : make(Tok::kGt, 1);
      case '!':
        return n == '=' ? make(Tok::kNe, 2) : make(Tok::kNot, 1);
      case '&':
        if (n == '&') return make(Tok::kAndAnd, 2);
        break;
      case '|':
        if (n == '|') return make(Tok::kOrOr, 2);
        break;
      default:
        break;
    }
    // Not a token: report the whole run of such bytes once (a binary file gives a few errors,
    // not one per byte), then go on.
    uint32_t end = pos_ + 1;
    while (end < text_.size() && end - start < 64) {
      const unsigned char b = static_cast<unsigned char>(text_[end]);
      if (std::isalnum(b) || std::isspace(b) ||
          std::string_view("{}()[],:+-*/%.=<>!#_").find(static_cast<char>(b)) !=
              std::string_view::npos)
        break;
      ++end;
    }
    const unsigned char uc = static_cast<unsigned char>(c);
    diags_
        .error(DiagKind::kInvalidCharacter, file_, {start, end},
               uc >= 0x20 && uc < 0x7f ? fmt::format("unexpected character `{}`", c)
                                       : fmt::format("unexpected byte 0x{:02x}", uc))
        .set_hint(uc >= 0x80 ? "schedules are ASCII outside comments; is this a text file?"
                             : "comments start with `#`");
    pos_ = end;
  }
}

std::string_view Lexer::raw_block(uint32_t open_end, Span* body_span) {
  // The body ends where C++ ends it (dsl/cpp_body.h): literals, comments, digit separators and
  // line splices read as the C++ compiler reads them, so no body can close its function early.
  const uint32_t start = open_end;
  const CppBodyScan scan = scan_cpp_body(text_.substr(start));
  if (scan.end != CppBodyScan::kNone) {
    const uint32_t close = start + static_cast<uint32_t>(scan.end);
    *body_span = {start, close};
    pos_ = close + 1;
    return text_.substr(start, close - start);
  }
  pos_ = static_cast<uint32_t>(text_.size());
  *body_span = {start, pos_};
  if (scan.fatal) {
    const uint32_t at = start + static_cast<uint32_t>(scan.problem_at);
    diags_
        .error(DiagKind::kUnterminated, file_,
               {at, at + static_cast<uint32_t>(std::max<size_t>(scan.problem_length, 1))},
               fmt::format("device function body: {}", scan.problem))
        .set_hint("close it: the body is C++, and C++ reads it to the end of the file from here");
  } else {
    diags_
        .error(DiagKind::kUnterminated, file_, {open_end - 1, open_end},
               "device function body has no closing `}`")
        .set_hint("balance the braces of the C++ body");
  }
  return text_.substr(start);
}

}  // namespace mkc::dsl
