// The benchmarks' --csv FILE: one row per measured case under a header, for bench/plot.py. Cells
// are numbers or text (quoted when they hold a comma, a quote or a newline); a cell left out is
// empty. The file is written to FILE.tmp and renamed at the end, so a bench that fails half way
// leaves no half table under FILE, and each row is flushed as it comes, so FILE.tmp shows the
// progress of a long run.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "support/error.h"

namespace mkc::bench {

class CsvWriter {
 public:
  // No file: every call does nothing (the bench ran without --csv).
  CsvWriter() = default;
  CsvWriter(std::string path, std::vector<std::string> columns)
      : path_(std::move(path)), columns_(std::move(columns)) {
    if (path_.empty()) return;
    tmp_ = path_ + ".tmp";
    file_ = std::fopen(tmp_.c_str(), "w");
    if (file_ == nullptr) throw EnvironmentError(fmt::format("--csv: cannot write `{}`", tmp_));
    write_line(columns_);
  }
  ~CsvWriter() {
    if (file_ != nullptr) std::fclose(file_);
  }
  CsvWriter(CsvWriter&& o) noexcept { *this = std::move(o); }
  CsvWriter& operator=(CsvWriter&& o) noexcept {
    std::swap(path_, o.path_);
    std::swap(tmp_, o.tmp_);
    std::swap(columns_, o.columns_);
    std::swap(file_, o.file_);
    return *this;
  }

  // One row: cells by column name; a name not in the header is an error (a typo in the bench).
  void row(const std::map<std::string, std::string>& cells) {
    if (file_ == nullptr) return;
    std::vector<std::string> line;
    for (const std::string& c : columns_) {
      const auto it = cells.find(c);
      line.push_back(it == cells.end() ? "" : it->second);
    }
    for (const auto& [name, value] : cells) {
      if (std::find(columns_.begin(), columns_.end(), name) == columns_.end())
        throw InternalError(fmt::format("csv: no column `{}`", name));
    }
    write_line(line);
  }

  // The table is complete: FILE.tmp becomes FILE.
  void finish() {
    if (file_ == nullptr) return;
    const bool ok = std::fclose(file_) == 0;
    file_ = nullptr;
    if (!ok || std::rename(tmp_.c_str(), path_.c_str()) != 0)
      throw EnvironmentError(fmt::format("--csv: cannot write `{}`", path_));
  }

 private:
  static std::string cell(const std::string& v) {
    if (v.find_first_of(",\"\n") == std::string::npos) return v;
    std::string q = "\"";
    for (char c : v) q += c == '"' ? std::string("\"\"") : std::string(1, c);
    return q + "\"";
  }
  void write_line(const std::vector<std::string>& cells) {
    std::string line;
    for (size_t i = 0; i < cells.size(); ++i) line += (i ? "," : "") + cell(cells[i]);
    line += "\n";
    std::fputs(line.c_str(), file_);
    std::fflush(file_);
  }

  std::string path_, tmp_;
  std::vector<std::string> columns_;
  std::FILE* file_ = nullptr;
};

// A number for a cell: shortest text that reads back the same.
inline std::string num(double v) {
  return fmt::format("{}", v);
}

}  // namespace mkc::bench
