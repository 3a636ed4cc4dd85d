// The tuning database (tune/db.h): entries round-trip by key, a corrupt or foreign file is a
// warning for readers and an error for writers (and is left as it was), and concurrent writers
// lose nothing.
#include "tune/db.h"

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "support/error.h"

namespace {

using mkc::tune::Entry;
using mkc::tune::Key;

std::string temp_path(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = fmt::format("{}/db_test.{}", tmp != nullptr ? tmp : "/tmp", ::getpid());
  std::filesystem::create_directories(dir);
  return dir + "/" + name;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Key key(int64_t m, int64_t ranks = 2) {
  Key k;
  k.schedule_hash = 0x1234abcdull;
  k.schedule = "gemm";
  k.defines = {{"M", m}, {"N", 4096}};
  k.ranks = ranks;
  k.arch = "sm_90a";
  k.sms = 132;
  k.nvrtc = 13000;
  return k;
}

Entry entry(int64_t bm, int64_t split, double us) {
  Entry e;
  e.ops["mm"] = mkc::tune::OpKnobs{{bm, 128, 64}, split, us};
  e.us = us;
  e.tuned_at = "2026-12-05T03:00:00Z";
  return e;
}

TEST_CASE("tuning database: entries round-trip by their whole key") {
  const std::string path = temp_path("roundtrip/tune.json");  // the directory is created
  std::vector<std::string> warnings;
  CHECK_FALSE(mkc::tune::lookup(path, key(16), &warnings).has_value());  // no file: empty
  CHECK(warnings.empty());
  mkc::tune::store(path, key(16), entry(64, 4, 12.5));
  mkc::tune::store(path, key(4096), entry(128, 1, 300.0));
  mkc::tune::store(path, key(16), entry(128, 2, 11.0));  // replaces
  const auto e = mkc::tune::lookup(path, key(16), &warnings);
  REQUIRE(e.has_value());
  CHECK(warnings.empty());
  CHECK(e->ops.at("mm").tile == std::vector<int64_t>{128, 128, 64});
  CHECK(e->ops.at("mm").split_k == 2);
  CHECK(e->us == doctest::Approx(11.0));
  CHECK(e->tuned_at == "2026-12-05T03:00:00Z");
  // Any field of the key makes another entry.
  CHECK_FALSE(mkc::tune::lookup(path, key(16, 4), &warnings).has_value());
  Key other_arch = key(16);
  other_arch.arch = "sm_80";
  CHECK_FALSE(mkc::tune::lookup(path, other_arch, &warnings).has_value());
  Key other_nvrtc = key(16);
  other_nvrtc.nvrtc = 12080;
  CHECK_FALSE(mkc::tune::lookup(path, other_nvrtc, &warnings).has_value());
  CHECK(mkc::tune::read_all(path).size() == 2);
  // Readable: the format's name and the key's fields are in the text.
  const std::string text = slurp(path);
  CHECK(text.find("\"format\": \"mkc-tune-db\"") != std::string::npos);
  CHECK(text.find("\"schedule\": \"gemm\"") != std::string::npos);
}

// 2-CTA clusters: stored as "cluster": 2 where asked for, absent (read as 1) otherwise, and a
// value other than 1 or 2 is a warning naming it.
TEST_CASE("tuning database: an op's clusters round-trip; a bad cluster count warns") {
  const std::string path = temp_path("clusters/tune.json");
  Entry paired = entry(128, 1, 250.0);
  paired.ops["mm"].cluster = 2;
  mkc::tune::store(path, key(3000), paired);
  mkc::tune::store(path, key(16), entry(64, 2, 12.0));
  std::vector<std::string> warnings;
  const auto e = mkc::tune::lookup(path, key(3000), &warnings);
  REQUIRE(e.has_value());
  CHECK(e->ops.at("mm").cluster == 2);
  CHECK(mkc::tune::lookup(path, key(16), &warnings)->ops.at("mm").cluster == 1);
  std::string text = slurp(path);
  CHECK(text.find("\"cluster\"") != std::string::npos);
  const std::string two = "\"cluster\": 2";
  const size_t at = text.find(two);
  REQUIRE(at != std::string::npos);
  text.replace(at, two.size(), "\"cluster\": 3");
  std::ofstream(path, std::ios::trunc) << text;
  CHECK_FALSE(mkc::tune::lookup(path, key(3000), &warnings).has_value());
  REQUIRE(warnings.size() == 1);
  CHECK_MESSAGE(warnings[0].find("`cluster` 3 is not 1 or 2") != std::string::npos, warnings[0]);
}

TEST_CASE("tuning database: a corrupt or foreign file warns readers, refuses writers, stays") {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"not JSON", "{\"format\": \"mkc-tune-db\", \"entr"},
      {"not an mkc tuning database", "{\"name\": \"package.json\"}"},
      {"not an mkc tuning database", "[1, 2, 3]"},
      {"version 2", "{\"format\": \"mkc-tune-db\", \"version\": 2, \"entries\": {}}"},
      {"is not an integer",
       "{\"format\": \"mkc-tune-db\", \"version\": 1, \"entries\": {\"x\": {\"key\": "
       "{\"schedule_hash\": \"00\", \"schedule\": \"g\", \"defines\": {}, \"ranks\": \"two\"}}}}"},
      {"edited by hand",
       "{\"format\": \"mkc-tune-db\", \"version\": 1, \"entries\": {\"x\": {\"key\": "
       "{\"schedule_hash\": \"00\", \"schedule\": \"g\", \"defines\": {}, \"ranks\": 1, "
       "\"ranks_per_node\": 0, \"arch\": \"sm_90a\", \"sms\": 132, \"nvrtc\": 1}, \"ops\": {}, "
       "\"us\": 1, \"tuned_at\": \"\"}}}"},
  };
  int i = 0;
  for (const auto& [why, text] : bad) {
    CAPTURE(text);
    const std::string path = temp_path(fmt::format("bad{}.json", i++));
    std::ofstream(path) << text;
    std::vector<std::string> warnings;
    CHECK_FALSE(mkc::tune::lookup(path, key(16), &warnings).has_value());
    REQUIRE(warnings.size() == 1);
    CHECK_MESSAGE(warnings[0].find(why) != std::string::npos, warnings[0]);
    CHECK(warnings[0].find(path) != std::string::npos);
    CHECK_THROWS_AS(mkc::tune::store(path, key(16), entry(64, 1, 1.0)), mkc::UserError);
    CHECK(slurp(path) == text);  // left as it was
  }
}

TEST_CASE("tuning database: eight concurrent writers lose no entry") {
  const std::string path = temp_path("concurrent.json");
  constexpr int kWriters = 8, kEach = 6;
  std::vector<pid_t> pids;
  for (int w = 0; w < kWriters; ++w) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      int rc = 0;
      try {
        for (int j = 0; j < kEach; ++j)
          mkc::tune::store(path, key(1000 * w + j), entry(64, 1, w + j));
      } catch (...) {
        rc = 1;
      }
      std::_Exit(rc);
    }
    pids.push_back(pid);
  }
  for (const pid_t pid : pids) {
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  const auto all = mkc::tune::read_all(path);
  CHECK(all.size() == static_cast<size_t>(kWriters * kEach));
  std::vector<std::string> warnings;
  const auto e = mkc::tune::lookup(path, key(1000 * 7 + 5), &warnings);
  REQUIRE(e.has_value());
  CHECK(e->us == doctest::Approx(12.0));
  // No temporary file is left beside it.
  for (const auto& f :
       std::filesystem::directory_iterator(std::filesystem::path(path).parent_path()))
    CHECK_MESSAGE(f.path().string().find(".tmp.") == std::string::npos, f.path().string());
}

TEST_CASE("tuning database: the path, MKC_TUNE and the time stamp") {
  ::unsetenv("MKC_TUNE_DB");
  CHECK(mkc::tune::db_path("mine.json", "/cache") == "mine.json");
  CHECK(mkc::tune::db_path("", "/cache") == "/cache/tune.json");
  ::setenv("MKC_TUNE_DB", "/env/tune.json", 1);
  CHECK(mkc::tune::db_path("", "/cache") == "/env/tune.json");
  CHECK(mkc::tune::db_path("mine.json", "/cache") == "mine.json");
  ::unsetenv("MKC_TUNE_DB");
  ::unsetenv("MKC_TUNE");
  CHECK(mkc::tune::mode_from_env() == mkc::tune::Mode::kCache);
  ::setenv("MKC_TUNE", "off", 1);
  CHECK(mkc::tune::mode_from_env() == mkc::tune::Mode::kOff);
  ::setenv("MKC_TUNE", "on", 1);
  CHECK(mkc::tune::mode_from_env() == mkc::tune::Mode::kOn);
  ::setenv("MKC_TUNE", "yes", 1);
  CHECK_THROWS_WITH_AS(mkc::tune::mode_from_env(), "MKC_TUNE=yes: expected off, cache or on",
                       mkc::UserError);
  ::unsetenv("MKC_TUNE");
  const std::string now = mkc::tune::utc_now();
  CHECK(now.size() == 20);
  CHECK(now[4] == '-');
  CHECK(now[10] == 'T');
  CHECK(now.back() == 'Z');
  CHECK(mkc::tune::schedule_hash("a") != mkc::tune::schedule_hash("b"));
  CHECK(key(16).text() == "000000001234abcd/gemm/M=16,N=4096/R2/L0/sm_90a/sms132/nvrtc13000");
}

}  // namespace
