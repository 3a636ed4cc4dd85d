#include "dsl/cpp_body.h"

#include <algorithm>
#include <cctype>
#include <vector>

namespace mkc::dsl {
namespace {

bool ident_start(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_';
}

bool ident_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}

bool digit(char c) {
  return std::isdigit(static_cast<unsigned char>(c)) != 0;
}

class Scanner {
 public:
  explicit Scanner(std::string_view body) {
    // Phase 2: a backslash at the end of a line joins it to the next (also inside comments and
    // literals). `at_` maps the joined text back to the body.
    for (size_t i = 0; i < body.size(); ++i) {
      if (body[i] == '\\') {
        size_t j = i + 1;
        if (j < body.size() && body[j] == '\r') ++j;
        if (j < body.size() && body[j] == '\n') {
          i = j;
          continue;
        }
      }
      t_.push_back(body[i]);
      at_.push_back(i);
    }
    at_.push_back(body.size());
  }

  CppBodyScan run() {
    const size_t n = t_.size();
    int depth = 1;
    size_t i = 0;
    while (i < n) {
      const char c = t_[i];
      const char d = i + 1 < n ? t_[i + 1] : '\0';
      if (c == '/' && d == '/') {
        const size_t nl = t_.find('\n', i);
        i = nl == std::string::npos ? n : nl;
      } else if (c == '/' && d == '*') {
        const size_t close = t_.find("*/", i + 2);
        if (close == std::string::npos) return stop(i, 2, "a block comment that is never closed");
        i = close + 2;
      } else if (ident_start(c)) {
        size_t j = i;
        while (j < n && ident_char(t_[j])) ++j;
        const std::string_view id(t_.data() + i, j - i);
        const char next = j < n ? t_[j] : '\0';
        if (next == '"' && (id == "R" || id == "u8R" || id == "uR" || id == "UR" || id == "LR")) {
          // R"delim( ... )delim": the delimiter is at most 16 characters, none of them a space,
          // a parenthesis, a backslash or a quote.
          size_t k = j + 1;
          while (k < n && k - (j + 1) <= 16 && t_[k] != '(' && t_[k] != ')' && t_[k] != '\\' &&
                 t_[k] != '"' && !std::isspace(static_cast<unsigned char>(t_[k])))
            ++k;
          if (k >= n || t_[k] != '(')
            return stop(i, j + 1 - i, "a raw string literal with a bad delimiter");
          const std::string closing = ")" + t_.substr(j + 1, k - (j + 1)) + "\"";
          const size_t close = t_.find(closing, k + 1);
          if (close == std::string::npos)
            return stop(i, j + 1 - i, "a raw string literal that is never closed");
          i = close + closing.size();
        } else if ((next == '"' || next == '\'') &&
                   (id == "u8" || id == "u" || id == "U" || id == "L")) {
          i = j;  // an encoding prefix: the literal follows
        } else {
          if (id == "_Pragma") flag(i, j - i, "a preprocessor directive (`_Pragma`)");
          i = j;
        }
      } else if (digit(c) || (c == '.' && digit(d))) {
        // A pp-number: digits, letters, `.`, a digit separator `'` before a letter or digit, and a
        // sign after an exponent (e, E, p, P).
        size_t j = i + 1;
        while (j < n) {
          const char e = t_[j];
          const char f = j + 1 < n ? t_[j + 1] : '\0';
          if ((e == 'e' || e == 'E' || e == 'p' || e == 'P') && (f == '+' || f == '-')) {
            j += 2;
          } else if (e == '\'' && ident_char(f)) {
            j += 2;
          } else if (ident_char(e) || e == '.') {
            ++j;
          } else {
            break;
          }
        }
        i = j;
      } else if (c == '"' || c == '\'') {
        size_t j = i + 1;
        while (j < n && t_[j] != c && t_[j] != '\n') j += t_[j] == '\\' ? 2 : 1;
        if (j >= n || t_[j] != c) {
          return stop(i, 1,
                      c == '"' ? "a string literal not closed on its line"
                               : "a character literal not closed on its line");
        }
        i = j + 1;
      } else if (c == '#') {
        flag(i, 1, "a preprocessor directive");
        ++i;
      } else if (c == '%' && d == ':') {
        flag(i, 2, "a preprocessor directive");
        i += 2;
      } else if (c == '?' && d == '?' && i + 2 < n && t_[i + 2] == '=') {
        flag(i, 3, "a preprocessor directive");
        i += 3;
      } else if ((c == '<' && d == '%') || (c == '%' && d == '>')) {
        flag(i, 2, "a brace spelled as a digraph (`<%` or `%>`)");
        i += 2;
      } else {
        if (c == '{') ++depth;
        if (c == '}' && --depth == 0) {
          out_.end = at_[i];
          return out_;
        }
        ++i;
      }
    }
    return out_;
  }

 private:
  // Records the first problem; the scan goes on to find the body's end.
  void flag(size_t i, size_t len, const char* what) {
    if (out_.problem_at != CppBodyScan::kNone) return;
    out_.problem_at = at_[i];
    out_.problem_length = at_[std::min(i + len, t_.size())] - at_[i];
    out_.problem = what;
  }
  // A problem after which C++ and any other reading disagree on where the body ends: no end.
  CppBodyScan stop(size_t i, size_t len, const char* what) {
    flag(i, len, what);
    out_.end = CppBodyScan::kNone;
    out_.fatal = true;
    return out_;
  }

  std::string t_;
  std::vector<size_t> at_;
  CppBodyScan out_;
};

}  // namespace

CppBodyScan scan_cpp_body(std::string_view text) {
  return Scanner(text).run();
}

}  // namespace mkc::dsl
