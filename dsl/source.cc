#include "dsl/source.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

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

namespace {

// What a file that is not a regular one is, for the message refusing it.
const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

std::shared_ptr<const SourceFile> SourceFile::read(const std::string& path) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; only regular files are read, so the
  // flag changes nothing else.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw UserError(fmt::format("cannot read `{}`: {}", path, std::strerror(errno)));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    throw UserError(fmt::format("cannot read `{}`: {}", path, std::strerror(errno)));
  // A FIFO would block or never end, /dev/zero never ends: schedules come from regular files.
  if (!S_ISREG(st.st_mode)) {
    throw UserError(
        fmt::format("cannot read `{}`: it is {}; mkc reads schedules from regular files", path,
                    file_kind(st.st_mode)));
  }
  const auto too_big = [&](uint64_t bytes) {
    return UserError(fmt::format("`{}` is {} bytes; schedules larger than {} MiB are refused", path,
                                 bytes, kMaxBytes >> 20));
  };
  if (static_cast<uint64_t>(st.st_size) > kMaxBytes) throw too_big(st.st_size);
  // Read to the cap plus one byte: a file that grows while it is read is still refused.
  std::string text(static_cast<size_t>(st.st_size) + 1, '\0');
  size_t got = 0;
  while (true) {
    if (got == text.size()) {
      if (text.size() > kMaxBytes) throw too_big(got);
      text.resize(std::min<size_t>(text.size() * 2, kMaxBytes + 1));
    }
    const ssize_t k = ::read(fd, text.data() + got, text.size() - got);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) throw UserError(fmt::format("cannot read `{}`: {}", path, std::strerror(errno)));
    if (k == 0) break;
    got += static_cast<size_t>(k);
  }
  text.resize(got);
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
