#include "tune/db.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "support/error.h"
#include "support/hash.h"

namespace mkc::tune {
namespace {

using nlohmann::json;

constexpr const char* kFormat = "mkc-tune-db";
constexpr int kVersion = 1;
// A database is a small file: a few entries per schedule and shape. Anything far larger is not
// one of ours (and is not read into memory).
constexpr uintmax_t kMaxFileBytes = 64ull << 20;

json key_json(const Key& k) {
  json d = json::object();
  for (const auto& [n, v] : k.defines) d[n] = v;
  return json{{"schedule_hash", fmt::format("{:016x}", k.schedule_hash)},
              {"schedule", k.schedule},
              {"defines", d},
              {"ranks", k.ranks},
              {"ranks_per_node", k.ranks_per_node},
              {"arch", k.arch},
              {"sms", k.sms},
              {"nvrtc", k.nvrtc}};
}

json entry_json(const Key& k, const Entry& e) {
  json ops = json::object();
  for (const auto& [name, o] : e.ops)
    ops[name] =
        o.cluster > 1
            ? json{{"tile", o.tile}, {"split_k", o.split_k}, {"cluster", o.cluster}, {"us", o.us}}
            : json{{"tile", o.tile}, {"split_k", o.split_k}, {"us", o.us}};
  return json{{"key", key_json(k)}, {"ops", ops}, {"us", e.us}, {"tuned_at", e.tuned_at}};
}

// Field readers that say what is wrong instead of throwing nlohmann's errors.
const json& field(const json& j, const char* name, const std::string& where) {
  if (!j.is_object() || !j.contains(name)) throw UserError(fmt::format("{}: no `{}`", where, name));
  return j.at(name);
}
int64_t int_field(const json& j, const char* name, const std::string& where) {
  const json& v = field(j, name, where);
  if (!v.is_number_integer())
    throw UserError(fmt::format("{}: `{}` is not an integer", where, name));
  return v.get<int64_t>();
}
double number_field(const json& j, const char* name, const std::string& where) {
  const json& v = field(j, name, where);
  if (!v.is_number()) throw UserError(fmt::format("{}: `{}` is not a number", where, name));
  return v.get<double>();
}
std::string string_field(const json& j, const char* name, const std::string& where) {
  const json& v = field(j, name, where);
  if (!v.is_string()) throw UserError(fmt::format("{}: `{}` is not a string", where, name));
  return v.get<std::string>();
}

Key parse_key(const json& j, const std::string& where) {
  Key k;
  const std::string h = string_field(j, "schedule_hash", where);
  char* end = nullptr;
  errno = 0;
  k.schedule_hash = std::strtoull(h.c_str(), &end, 16);
  if (h.empty() || errno != 0 || *end != '\0')
    throw UserError(fmt::format("{}: `schedule_hash` `{}` is not a hex number", where, h));
  k.schedule = string_field(j, "schedule", where);
  const json& d = field(j, "defines", where);
  if (!d.is_object()) throw UserError(fmt::format("{}: `defines` is not an object", where));
  for (const auto& [n, v] : d.items()) {
    if (!v.is_number_integer())
      throw UserError(fmt::format("{}: define `{}` is not an integer", where, n));
    k.defines[n] = v.get<int64_t>();
  }
  k.ranks = int_field(j, "ranks", where);
  k.ranks_per_node = int_field(j, "ranks_per_node", where);
  k.arch = string_field(j, "arch", where);
  k.sms = int_field(j, "sms", where);
  k.nvrtc = static_cast<int>(int_field(j, "nvrtc", where));
  return k;
}

Entry parse_entry(const json& j, const std::string& where) {
  Entry e;
  const json& ops = field(j, "ops", where);
  if (!ops.is_object()) throw UserError(fmt::format("{}: `ops` is not an object", where));
  for (const auto& [name, o] : ops.items()) {
    const std::string at = fmt::format("{}, op `{}`", where, name);
    OpKnobs k;
    const json& tile = field(o, "tile", at);
    if (!tile.is_array() || tile.empty() || tile.size() > 3)
      throw UserError(fmt::format("{}: `tile` is not a list of 1 to 3 sizes", at));
    for (const json& t : tile) {
      if (!t.is_number_integer() || t.get<int64_t>() < 1 || t.get<int64_t>() > 4096)
        throw UserError(fmt::format("{}: a tile size is not an integer in [1, 4096]", at));
      k.tile.push_back(t.get<int64_t>());
    }
    k.split_k = int_field(o, "split_k", at);
    if (k.split_k < 1 || k.split_k > 64)
      throw UserError(fmt::format("{}: `split_k` {} is not in [1, 64]", at, k.split_k));
    if (o.contains("cluster")) {
      k.cluster = int_field(o, "cluster", at);
      if (k.cluster != 1 && k.cluster != 2)
        throw UserError(fmt::format("{}: `cluster` {} is not 1 or 2", at, k.cluster));
    }
    k.us = number_field(o, "us", at);
    e.ops[name] = std::move(k);
  }
  e.us = number_field(j, "us", where);
  e.tuned_at = string_field(j, "tuned_at", where);
  return e;
}

// The whole file, checked; an empty map when it does not exist. Throws UserError for a file that
// is not a database of this format, EnvironmentError when it cannot be read.
std::map<std::string, std::pair<Key, Entry>> read_file(const std::string& path) {
  std::map<std::string, std::pair<Key, Entry>> out;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return out;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) throw EnvironmentError(fmt::format("tuning database `{}`: {}", path, ec.message()));
  if (size > kMaxFileBytes)
    throw UserError(
        fmt::format("tuning database `{}`: {} bytes, more than a database's {} MB "
                    "(is it another file?)",
                    path, size, kMaxFileBytes >> 20));
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw EnvironmentError(
        fmt::format("tuning database `{}`: cannot be read: {}", path, std::strerror(errno)));
  std::stringstream ss;
  ss << in.rdbuf();
  const json j = json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded())
    throw UserError(
        fmt::format("tuning database `{}`: not JSON (a corrupt or foreign file; "
                    "delete it or point --tune-db elsewhere)",
                    path));
  const std::string where = fmt::format("tuning database `{}`", path);
  if (!j.is_object() || !j.contains("format") || !j["format"].is_string() ||
      j["format"].get<std::string>() != kFormat)
    throw UserError(
        fmt::format("{}: not an mkc tuning database (no \"format\": \"{}\")", where, kFormat));
  if (int_field(j, "version", where) != kVersion)
    throw UserError(fmt::format("{}: version {}, this mkc reads version {}", where,
                                j["version"].dump(), kVersion));
  const json& entries = field(j, "entries", where);
  if (!entries.is_object()) throw UserError(fmt::format("{}: `entries` is not an object", where));
  for (const auto& [text, e] : entries.items()) {
    const std::string at = fmt::format("{}, entry `{}`", where, text);
    Key k = parse_key(field(e, "key", at), at);
    if (k.text() != text)
      throw UserError(fmt::format("{}: its key says `{}` (edited by hand?)", at, k.text()));
    out.emplace(text, std::make_pair(std::move(k), parse_entry(e, at)));
  }
  return out;
}

// An exclusive lock on PATH.lock for the life of the object (flock: released when the process
// dies, so a killed tuner leaves no stale lock).
class FileLock {
 public:
  explicit FileLock(const std::string& path) {
    const std::string lock = path + ".lock";
    fd_ = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0)
      throw EnvironmentError(fmt::format("tuning database: cannot open the lock `{}`: {}", lock,
                                         std::strerror(errno)));
    while (::flock(fd_, LOCK_EX) != 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      ::close(fd_);
      throw EnvironmentError(
          fmt::format("tuning database: cannot lock `{}`: {}", lock, std::strerror(e)));
    }
  }
  ~FileLock() { ::close(fd_); }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

void write_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    throw EnvironmentError(
        fmt::format("tuning database: cannot write `{}`: {}", tmp, std::strerror(errno)));
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      throw EnvironmentError(
          fmt::format("tuning database: cannot write `{}`: {}", tmp, std::strerror(e)));
    }
    done += static_cast<size_t>(n);
  }
  const bool synced = ::fsync(fd) == 0;
  ::close(fd);
  if (!synced || ::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    throw EnvironmentError(
        fmt::format("tuning database: cannot replace `{}`: {}", path, std::strerror(e)));
  }
}

}  // namespace

std::string Key::text() const {
  std::string d;
  for (const auto& [n, v] : defines) d += fmt::format("{}{}={}", d.empty() ? "" : ",", n, v);
  return fmt::format("{:016x}/{}/{}/R{}/L{}/{}/sms{}/nvrtc{}", schedule_hash, schedule,
                     d.empty() ? "-" : d, ranks, ranks_per_node, arch, sms, nvrtc);
}

uint64_t schedule_hash(const std::string& text) {
  return fnv1a(text);
}

std::string db_path(const std::string& flag, const std::string& cache_dir) {
  if (!flag.empty()) return flag;
  if (const char* e = std::getenv("MKC_TUNE_DB"); e != nullptr && *e != '\0') return e;
  return (std::filesystem::path(cache_dir) / "tune.json").string();
}

Mode mode_from_env() {
  const char* e = std::getenv("MKC_TUNE");
  if (e == nullptr || *e == '\0') return Mode::kCache;
  const std::string v = e;
  if (v == "off") return Mode::kOff;
  if (v == "cache") return Mode::kCache;
  if (v == "on") return Mode::kOn;
  throw UserError(fmt::format("MKC_TUNE={}: expected off, cache or on", v));
}

std::optional<Entry> lookup(const std::string& path, const Key& key,
                            std::vector<std::string>* warnings) {
  try {
    auto all = read_file(path);
    const auto it = all.find(key.text());
    if (it == all.end()) return std::nullopt;
    return it->second.second;
  } catch (const std::exception& e) {
    if (warnings != nullptr)
      warnings->push_back(fmt::format("{}; compiling without tuned knobs", e.what()));
    return std::nullopt;
  }
}

void store(const std::string& path, const Key& key, const Entry& entry) {
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (!dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec)
      throw EnvironmentError(
          fmt::format("tuning database: cannot create `{}`: {}", dir.string(), ec.message()));
  }
  FileLock lock(path);
  auto all = read_file(path);  // under the lock: what other writers added stays
  all[key.text()] = {key, entry};
  json entries = json::object();
  for (const auto& [text, ke] : all) entries[text] = entry_json(ke.first, ke.second);
  const json j = {{"format", kFormat}, {"version", kVersion}, {"entries", entries}};
  write_atomically(path, j.dump(2) + "\n");
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::map<std::string, std::pair<Key, Entry>> read_all(const std::string& path) {
  return read_file(path);
}

}  // namespace mkc::tune
