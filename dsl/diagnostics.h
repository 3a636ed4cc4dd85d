// Diagnostics for the user's schedules: `file:line:col: error: message [kind]`, the source line,
// a caret under the span, notes pointing at related places, and a hint. The front end collects
// all of a file's errors (up to a limit) instead of stopping at the first.
//
// Users get diagnostics; bugs in mkc get MKC_CHECK (support/check.h).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "dsl/diagnostic_kinds.h"
#include "dsl/source.h"

namespace mkc::dsl {

enum class Severity { kError, kWarning };

struct DiagNote {
  bool has_span = false;
  Span span;
  std::string message;
};

struct Diagnostic {
  Severity severity = Severity::kError;
  DiagKind kind = DiagKind::kSyntax;
  std::shared_ptr<const SourceFile> file;
  Span span;
  std::string message;
  std::vector<DiagNote> notes;
  std::string hint;

  Diagnostic& note(Span s, std::string msg) {
    notes.push_back({true, s, std::move(msg)});
    return *this;
  }
  Diagnostic& note(std::string msg) {
    notes.push_back({false, {}, std::move(msg)});
    return *this;
  }
  Diagnostic& set_hint(std::string h) {
    hint = std::move(h);
    return *this;
  }
};

class Diagnostics {
 public:
  explicit Diagnostics(size_t max_errors = 50) : max_errors_(max_errors) {}

  // Records an error and returns it for notes and a hint. Past the error limit, and for an exact
  // repeat (same kind, place and message), the returned diagnostic is a scratch one, not kept.
  Diagnostic& error(DiagKind kind, std::shared_ptr<const SourceFile> file, Span span,
                    std::string message);
  Diagnostic& warning(DiagKind kind, std::shared_ptr<const SourceFile> file, Span span,
                      std::string message);

  size_t error_count() const { return errors_; }
  bool has_errors() const { return errors_ > 0; }
  // True once the error limit is reached: parsers stop early.
  bool full() const { return errors_ >= max_errors_; }
  const std::vector<Diagnostic>& all() const { return diags_; }

 private:
  Diagnostic& add(Severity sev, DiagKind kind, std::shared_ptr<const SourceFile> file, Span span,
                  std::string message);

  size_t max_errors_;
  size_t errors_ = 0;
  std::vector<Diagnostic> diags_;
  std::set<std::tuple<int, std::string, uint32_t, std::string>> seen_;
  Diagnostic scratch_;
};

// Clang-style text: location, severity, message and [kind]; the source line with a caret and
// underline; notes; the hint. `color` adds ANSI colours (for a terminal).
std::string render_text(const Diagnostic& d, bool color);
std::string render_text(const std::vector<Diagnostic>& ds, bool color);

// One JSON object per diagnostic: file, line, column, end_line, end_column, severity, kind,
// message, notes [{file, line, column, message}], hint.
nlohmann::json to_json(const Diagnostic& d);

}  // namespace mkc::dsl
