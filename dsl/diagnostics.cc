#include "dsl/diagnostics.h"

#include <fmt/format.h>

#include <algorithm>

namespace mkc::dsl {

const char* diag_kind_name(DiagKind k) {
  switch (k) {
#define MKC_DIAG_NAME(e, name, meaning) \
  case DiagKind::e:                     \
    return name;
    MKC_DIAGNOSTIC_KINDS(MKC_DIAG_NAME)
#undef MKC_DIAG_NAME
  }
  return "?";
}

const char* diag_kind_meaning(DiagKind k) {
  switch (k) {
#define MKC_DIAG_MEANING(e, name, meaning) \
  case DiagKind::e:                        \
    return meaning;
    MKC_DIAGNOSTIC_KINDS(MKC_DIAG_MEANING)
#undef MKC_DIAG_MEANING
  }
  return "?";
}

Diagnostic& Diagnostics::add(Severity sev, DiagKind kind, std::shared_ptr<const SourceFile> file,
                             Span span, std::string message) {
  scratch_ = Diagnostic{};
  if (sev == Severity::kError && errors_ >= max_errors_) return scratch_;
  const std::string path = file ? file->path() : std::string();
  if (!seen_.insert({static_cast<int>(kind), path, span.begin, message}).second) return scratch_;
  if (sev == Severity::kError && ++errors_ == max_errors_) {
    diags_.push_back(Diagnostic{sev, kind, file, span, std::move(message), {}, {}});
    Diagnostic stop{Severity::kError,
                    DiagKind::kTooManyErrors,
                    file,
                    span,
                    fmt::format("too many errors ({}); stopping here", max_errors_),
                    {},
                    {}};
    stop.set_hint("fix the errors above and run again");
    diags_.push_back(std::move(stop));
    return diags_[diags_.size() - 2];
  }
  diags_.push_back(Diagnostic{sev, kind, std::move(file), span, std::move(message), {}, {}});
  return diags_.back();
}

Diagnostic& Diagnostics::error(DiagKind kind, std::shared_ptr<const SourceFile> file, Span span,
                               std::string message) {
  return add(Severity::kError, kind, std::move(file), span, std::move(message));
}

Diagnostic& Diagnostics::warning(DiagKind kind, std::shared_ptr<const SourceFile> file, Span span,
                                 std::string message) {
  return add(Severity::kWarning, kind, std::move(file), span, std::move(message));
}

namespace {

struct Style {
  bool on;
  const char* bold() const { return on ? "\033[1m" : ""; }
  const char* red() const { return on ? "\033[1;31m" : ""; }
  const char* magenta() const { return on ? "\033[1;35m" : ""; }
  const char* green() const { return on ? "\033[1;32m" : ""; }
  const char* cyan() const { return on ? "\033[1;36m" : ""; }
  const char* reset() const { return on ? "\033[0m" : ""; }
};

// "  12 | source line" and "     |     ^~~~" under the span (clipped to its first line).
void render_snippet(std::string& out, const SourceFile& file, Span span, const Style& st) {
  const LineCol lc = file.line_col(span.begin);
  const std::string_view line = file.line_text(lc.line);
  const std::string gutter = std::to_string(lc.line);
  // Control characters would corrupt a terminal; show them as '?'.
  std::string shown(line);
  for (char& c : shown) {
    if (static_cast<unsigned char>(c) < 0x20 && c != '\t') c = '?';
  }
  fmt::format_to(std::back_inserter(out), " {} | {}\n", gutter, shown);
  std::string marker;
  const size_t col0 = lc.col - 1;
  for (size_t i = 0; i < col0 && i < line.size(); ++i) marker += line[i] == '\t' ? '\t' : ' ';
  size_t len = span.end > span.begin ? span.end - span.begin : 1;
  len = std::max<size_t>(1, std::min(len, line.size() > col0 ? line.size() - col0 : 1));
  marker += '^';
  marker.append(len - 1, '~');
  fmt::format_to(std::back_inserter(out), " {} | {}{}{}\n", std::string(gutter.size(), ' '),
                 st.green(), marker, st.reset());
}

}  // namespace

std::string render_text(const Diagnostic& d, bool color) {
  const Style st{color};
  std::string out;
  const char* sev = d.severity == Severity::kError ? "error" : "warning";
  const char* sev_color = d.severity == Severity::kError ? st.red() : st.magenta();
  if (d.file) {
    const LineCol lc = d.file->line_col(d.span.begin);
    fmt::format_to(std::back_inserter(out), "{}{}:{}:{}: {}{}:{} {}{} [{}]{}\n", st.bold(),
                   d.file->path(), lc.line, lc.col, sev_color, sev, st.reset(), st.bold(),
                   d.message, diag_kind_name(d.kind), st.reset());
    render_snippet(out, *d.file, d.span, st);
  } else {
    fmt::format_to(std::back_inserter(out), "{}mkc: {}{}:{} {}{} [{}]{}\n", st.bold(), sev_color,
                   sev, st.reset(), st.bold(), d.message, diag_kind_name(d.kind), st.reset());
  }
  for (const DiagNote& n : d.notes) {
    if (n.has_span && d.file) {
      const LineCol lc = d.file->line_col(n.span.begin);
      fmt::format_to(std::back_inserter(out), "{}{}:{}:{}: {}note:{} {}\n", st.bold(),
                     d.file->path(), lc.line, lc.col, st.cyan(), st.reset(), n.message);
      render_snippet(out, *d.file, n.span, st);
    } else {
      fmt::format_to(std::back_inserter(out), "{}note:{} {}\n", st.cyan(), st.reset(), n.message);
    }
  }
  if (!d.hint.empty()) {
    fmt::format_to(std::back_inserter(out), "{}hint:{} {}\n", st.green(), st.reset(), d.hint);
  }
  return out;
}

std::string render_text(const std::vector<Diagnostic>& ds, bool color) {
  std::string out;
  for (const Diagnostic& d : ds) out += render_text(d, color);
  return out;
}

nlohmann::json to_json(const Diagnostic& d) {
  nlohmann::json j;
  j["severity"] = d.severity == Severity::kError ? "error" : "warning";
  j["kind"] = diag_kind_name(d.kind);
  j["message"] = d.message;
  if (d.file) {
    const LineCol b = d.file->line_col(d.span.begin);
    const LineCol e = d.file->line_col(std::max(d.span.end, d.span.begin));
    j["file"] = d.file->path();
    j["line"] = b.line;
    j["column"] = b.col;
    j["end_line"] = e.line;
    j["end_column"] = e.col;
  }
  j["notes"] = nlohmann::json::array();
  for (const DiagNote& n : d.notes) {
    nlohmann::json jn;
    jn["message"] = n.message;
    if (n.has_span && d.file) {
      const LineCol lc = d.file->line_col(n.span.begin);
      jn["file"] = d.file->path();
      jn["line"] = lc.line;
      jn["column"] = lc.col;
    }
    j["notes"].push_back(jn);
  }
  if (!d.hint.empty()) j["hint"] = d.hint;
  return j;
}

}  // namespace mkc::dsl
