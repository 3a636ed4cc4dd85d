// The tuning database: for one schedule at one set of parameters, world and target, the knobs
// `mkc tune` measured fastest for each operation (today: a GEMM's tile and its split-K parts).
// `mkc compile`, `mkc run` and the JIT API apply an entry when its key matches (MKC_TUNE,
// --tune-db; docs/TUNING.md).
//
// The file is readable JSON a user can ship with an application:
//   {"format": "mkc-tune-db", "version": 1, "entries": {"<key text>": {"key": {...},
//    "ops": {"<op>": {"tile": [bm, bn, bk], "split_k": S, "us": t}}, "us": t, "tuned_at": "..."}}}
// (an op in 2-CTA clusters also has "cluster": 2).
// Writers hold an exclusive lock on FILE.lock, re-read the file, add their entry and replace the
// file by rename, so concurrent tuners lose nothing and a reader never sees half a file. A file
// that is not JSON, or not this format, is refused by writers (an error naming it, the file left
// as it is) and skipped with a warning by readers.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace mkc::tune {

// What the measured knobs are valid for. Two keys are the same entry when every field is equal.
struct Key {
  uint64_t schedule_hash = 0;              // of the .mks file's text (schedule_hash())
  std::string schedule;                    // the schedule's name in the file
  std::map<std::string, int64_t> defines;  // -D values
  int64_t ranks = 1;
  int64_t ranks_per_node = 0;  // 0: one node
  std::string arch;            // e.g. sm_90a
  int64_t sms = 0;             // multiprocessors the kernel may use
  int nvrtc = 0;               // NVRTC's version (jit::nvrtc_version())
  // One line naming every field: the entry's name in the file, and what messages print.
  std::string text() const;
};

// FNV-1a of a schedule file's text (the key's schedule_hash).
uint64_t schedule_hash(const std::string& text);

// One operation's measured knobs.
struct OpKnobs {
  std::vector<int64_t> tile;  // the tile(...) it runs with
  int64_t split_k = 1;        // K split into this many parts (1: none)
  double us = 0;              // the kernel's time per launch with these knobs, when measured
  int64_t cluster = 1;        // CTAs per cluster (2: pairs sharing B); absent in the file: 1
};

struct Entry {
  std::map<std::string, OpKnobs> ops;  // by operation name
  double us = 0;                       // the tuned kernel's time per launch
  std::string tuned_at;                // UTC time of the measurement, ISO 8601
};

// The path to use: `flag` (--tune-db) when set, else $MKC_TUNE_DB, else tune.json in the JIT
// cache's directory `cache_dir`.
std::string db_path(const std::string& flag, const std::string& cache_dir);

// MKC_TUNE: "off" (never read the database), "cache" (the default: use an entry when there is
// one) or "on" (also tune what has none, where a GPU is there: `mkc run`). Anything else is a
// UserError naming the variable.
enum class Mode { kOff, kCache, kOn };
Mode mode_from_env();

// The entry for `key` in the file at `path`, if any. A missing file is an empty database; an
// unreadable, corrupt or foreign one adds a warning (naming the file and the problem) and gives
// nothing.
std::optional<Entry> lookup(const std::string& path, const Key& key,
                            std::vector<std::string>* warnings);

// Adds (or replaces) `key`'s entry in the file at `path`, creating it and its directory. Throws
// UserError when the file exists but is not a tuning database (it is left untouched), and
// EnvironmentError when it cannot be locked, read or written.
void store(const std::string& path, const Key& key, const Entry& entry);

// Now, in UTC, as ISO 8601 (an entry's tuned_at).
std::string utc_now();

// Every entry of the file (for `mkc tune --list` and tests); same errors as store().
std::map<std::string, std::pair<Key, Entry>> read_all(const std::string& path);

}  // namespace mkc::tune
