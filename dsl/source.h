// A schedule's text and positions in it. Every AST node carries a Span (byte offsets into one
// SourceFile); line and column are computed on demand for diagnostics, so spans stay small.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace mkc::dsl {

// Half-open byte range [begin, end) in a SourceFile.
struct Span {
  uint32_t begin = 0;
  uint32_t end = 0;
  static Span merge(Span a, Span b) {
    return {a.begin < b.begin ? a.begin : b.begin, a.end > b.end ? a.end : b.end};
  }
};

struct LineCol {
  uint32_t line = 1;  // 1-based
  uint32_t col = 1;   // 1-based, in bytes
};

class SourceFile {
 public:
  SourceFile(std::string path, std::string text);

  // The largest schedule read() accepts.
  static constexpr size_t kMaxBytes = size_t{64} << 20;

  // Reads `path`, a regular file of at most kMaxBytes; throws UserError naming the path and the
  // reason when it cannot be read, is something else (a FIFO, a device, a directory: they could
  // block or never end) or is larger.
  static std::shared_ptr<const SourceFile> read(const std::string& path);

  const std::string& path() const { return path_; }
  const std::string& text() const { return text_; }
  LineCol line_col(uint32_t offset) const;
  // The text of 1-based `line` without its newline.
  std::string_view line_text(uint32_t line) const;
  std::string_view slice(Span s) const;

 private:
  std::string path_;
  std::string text_;
  std::vector<uint32_t> line_starts_;
};

// The source text of `s` with runs of whitespace collapsed to one space, for messages.
std::string source_text(const SourceFile& file, Span s);

}  // namespace mkc::dsl
