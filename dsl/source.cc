#include "dsl/source.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

#include "support/error.h"

namespace mkc::dsl {

SourceFile::SourceFile(std::string path, std::string text)
    : path_(std::move(path)), text_(std::move(text)) {
  // Offsets are 32-bit; anything larger is refused by read(), so clamp defensively here.
  if (text_.size() >= std::numeric_limits<uint32_t>::max())
    text_.resize(std::numeric_limits<uint32_t>::max() - 1);
  line_starts_.push_back(0);
  for (uint32_t i = 0; i < text_.size(); ++i) {
    if (text_[i] == '\n') line_starts_.push_back(i + 1);
  }
}

std::shared_ptr<const SourceFile> SourceFile::read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw UserError(fmt::format("cannot read `{}`: {}", path, std::strerror(errno)));
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  constexpr size_t kMaxBytes = 256u << 20;
  if (text.size() > kMaxBytes) {
    throw UserError(fmt::format("`{}` is {} bytes; schedules larger than {} MiB are refused", path,
                                text.size(), kMaxBytes >> 20));
  }
  return std::make_shared<SourceFile>(path, std::move(text));
}

LineCol SourceFile::line_col(uint32_t offset) const {
  offset = std::min<uint32_t>(offset, static_cast<uint32_t>(text_.size()));
  auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
  const uint32_t line = static_cast<uint32_t>(it - line_starts_.begin());
  return {line, offset - line_starts_[line - 1] + 1};
}

std::string_view SourceFile::line_text(uint32_t line) const {
  if (line == 0 || line > line_starts_.size()) return {};
  const uint32_t begin = line_starts_[line - 1];
  uint32_t end =
      line < line_starts_.size() ? line_starts_[line] - 1 : static_cast<uint32_t>(text_.size());
  if (end > begin && text_[end - 1] == '\r') --end;
  return std::string_view(text_).substr(begin, end - begin);
}

std::string_view SourceFile::slice(Span s) const {
  const uint32_t b = std::min<uint32_t>(s.begin, static_cast<uint32_t>(text_.size()));
  const uint32_t e = std::min<uint32_t>(std::max(s.end, b), static_cast<uint32_t>(text_.size()));
  return std::string_view(text_).substr(b, e - b);
}

std::string source_text(const SourceFile& file, Span s) {
  std::string out;
  bool space = false;
  for (char c : file.slice(s)) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      space = !out.empty();
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += c;
  }
  return out;
}

}  // namespace mkc::dsl
