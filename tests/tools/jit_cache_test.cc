// The JIT's disk cache (jit/jit.h) against what could poison it or throw a compile away: an
// entry copied under another key's name, entries others could have written (writable by others,
// owned by someone else), a shared fallback directory when HOME is unset, a directory that cannot
// be used; and the key against changed templates. Small kernels, compiled by NVRTC here (no GPU).
// (Here rather than in tests/compiler: `mkc compile` is what reaches the cache from outside.)
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "jit/jit.h"
#include "support/error.h"

namespace mkc::jit {
namespace {

namespace fs = std::filesystem;

std::string fresh_dir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(base != nullptr ? base : "/tmp") + "/" + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  ::chmod(dir.c_str(), 0700);
  return dir;
}

// A kernel that is quick to compile, named `name`.
std::string kernel(const std::string& name) {
  return fmt::format("extern \"C\" __global__ void {}(int* p) {{ *p = {}; }}\n", name, name.size());
}

JitOutput compile(const std::string& name, const std::string& dir) {
  JitOptions o;
  o.arch = "sm_80";
  o.cache_dir = dir;
  return jit_compile(kernel(name), name + ".cu", name, o);
}

std::vector<fs::path> entries(const std::string& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".mkcc") out.push_back(e.path());
  return out;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool defines(const std::string& cubin, const std::string& symbol) {
  return cubin.find(std::string(1, '\0') + symbol + std::string(1, '\0')) != std::string::npos;
}

// What ptxas said of the kernel (registers, spills) comes back with a hit: tests hold kernels to
// "no spills" whether they compiled them or found them in the cache.
TEST_CASE("a hit keeps the kernel's registers and spills") {
  const std::string dir = fresh_dir("jit_figures");
  const JitOutput cold = compile("mkc_figures", dir);
  REQUIRE_FALSE(cold.cache_hit);
  REQUIRE(cold.registers > 0);
  REQUIRE(cold.spill_bytes >= 0);
  const JitOutput hit = compile("mkc_figures", dir);
  REQUIRE(hit.cache_hit);
  CHECK(hit.registers == cold.registers);
  CHECK(hit.spill_bytes == cold.spill_bytes);
  CHECK(hit.stack_bytes == cold.stack_bytes);
  CHECK(resources_text(hit).find("B spilled (cache hit)") != std::string::npos);
  JitOutput lost = hit;
  lost.registers = lost.spill_bytes = -1;
  lost.log = "ptxas info    : Compiling entry function 'x'\nsomething else";
  const std::string said = resources_text(lost);
  CHECK(said.find("ptxas's figures not found (cache hit") != std::string::npos);
  CHECK(said.find("Compiling entry function 'x'") != std::string::npos);
  CHECK(said.find("something else") == std::string::npos);
}

TEST_CASE("an entry copied under another key's name is not a hit") {
  const std::string dir = fresh_dir("jit_forged");
  compile("mkc_alpha", dir);
  const fs::path alpha = entries(dir).at(0);
  compile("mkc_beta", dir);
  fs::path beta;
  for (const fs::path& p : entries(dir))
    if (p != alpha) beta = p;
  REQUIRE(!beta.empty());
  // alpha's entry under beta's name, its key rewritten to beta's: what an attacker (or a careless
  // copy) would leave.
  std::string forged = slurp(alpha);
  const std::string alpha_key = alpha.stem().string(), beta_key = beta.stem().string();
  forged.replace(forged.find(alpha_key), alpha_key.size(), beta_key);
  std::ofstream(beta, std::ios::binary | std::ios::trunc) << forged;
  const JitOutput j = compile("mkc_beta", dir);
  CHECK_FALSE(j.cache_hit);
  CHECK(defines(j.cubin, "mkc_beta"));
  CHECK_FALSE(defines(j.cubin, "mkc_alpha"));
  // The forged entry was replaced by the real one.
  CHECK(compile("mkc_beta", dir).cache_hit);
}

TEST_CASE("an entry others can write to is refused, compiled again and replaced") {
  const std::string dir = fresh_dir("jit_mode");
  const JitOutput cold = compile("mkc_gamma", dir);
  const fs::path e = entries(dir).at(0);
  CHECK((fs::status(e).permissions() & (fs::perms::group_all | fs::perms::others_all)) ==
        fs::perms::none);
  ::chmod(e.c_str(), 0666);
  const JitOutput again = compile("mkc_gamma", dir);
  CHECK_FALSE(again.cache_hit);
  REQUIRE(again.warnings.size() == 1);
  CHECK_MESSAGE(again.warnings[0].find("others can write to it") != std::string::npos,
                again.warnings[0]);
  CHECK(again.cubin == cold.cubin);
  const JitOutput hit = compile("mkc_gamma", dir);
  CHECK(hit.cache_hit);
  CHECK(hit.warnings.empty());
}

TEST_CASE("an entry of 64 GB (sparse) is refused before it is read, compiled again") {
  // It was read whole, sized by st_size: std::bad_alloc, where a bad entry must be a warning.
  const std::string dir = fresh_dir("jit_huge");
  const JitOutput cold = compile("mkc_huge", dir);
  const fs::path e = entries(dir).at(0);
  fs::resize_file(e, uintmax_t{64} << 30);
  const JitOutput again = compile("mkc_huge", dir);
  CHECK_FALSE(again.cache_hit);
  REQUIRE(again.warnings.size() == 1);
  CHECK_MESSAGE(
      again.warnings[0].find("68719476736 bytes, more than an entry can") != std::string::npos,
      again.warnings[0]);
  CHECK(again.cubin == cold.cubin);
  CHECK(compile("mkc_huge", dir).cache_hit);
}

TEST_CASE("an entry of another user is refused") {
  if (::geteuid() != 0) return;  // only root can give a file away
  const std::string dir = fresh_dir("jit_owner");
  compile("mkc_delta", dir);
  const fs::path e = entries(dir).at(0);
  REQUIRE(::chown(e.c_str(), 65534, 65534) == 0);
  const JitOutput j = compile("mkc_delta", dir);
  CHECK_FALSE(j.cache_hit);
  REQUIRE(j.warnings.size() == 1);
  CHECK_MESSAGE(j.warnings[0].find("belongs to uid 65534") != std::string::npos, j.warnings[0]);
}

TEST_CASE("a hit reports the figures of the miss") {
  const std::string dir = fresh_dir("jit_figures");
  const JitOutput cold = compile("mkc_eps", dir);
  const JitOutput warm = compile("mkc_eps", dir);
  REQUIRE(warm.cache_hit);
  CHECK(cold.registers > 0);
  CHECK(warm.registers == cold.registers);
  CHECK(warm.smem_bytes == cold.smem_bytes);
  CHECK(warm.spill_bytes == cold.spill_bytes);
}

// Environment variables for one scope, restored after.
class Env {
 public:
  void set(const char* name, const char* value) {
    if (!saved_.count(name)) {
      const char* old = std::getenv(name);
      saved_[name] = old ? std::optional<std::string>(old) : std::nullopt;
    }
    if (value) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~Env() {
    for (const auto& [name, value] : saved_) {
      if (value) {
        ::setenv(name.c_str(), value->c_str(), 1);
      } else {
        ::unsetenv(name.c_str());
      }
    }
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

TEST_CASE("without HOME the cache is per user, 0700, under TMPDIR or /tmp; never a shared one") {
  const std::string tmp = fresh_dir("jit_tmpdir");
  Env env;
  env.set("MKC_CACHE_DIR", nullptr);
  env.set("XDG_CACHE_HOME", nullptr);
  env.set("HOME", nullptr);
  env.set("TMPDIR", tmp.c_str());
  const std::string want = fmt::format("{}/mkc-cache-{}", tmp, ::geteuid());
  CHECK(cache_dir({}) == want);
  struct stat st {};
  REQUIRE(::lstat(want.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  // Without TMPDIR: /tmp, still with the uid.
  env.set("TMPDIR", nullptr);
  const std::string fallback = cache_dir({});
  CHECK(fallback == fmt::format("/tmp/mkc-cache-{}", ::geteuid()));
  CHECK(fallback != "/tmp/mkc-cache");
  // A relative XDG_CACHE_HOME is ignored (the XDG rules).
  env.set("XDG_CACHE_HOME", "relative/dir");
  CHECK(cache_dir({}) == fallback);
}

TEST_CASE("a fallback directory someone else prepared is not used") {
  const std::string tmp = fresh_dir("jit_planted");
  Env env;
  env.set("MKC_CACHE_DIR", nullptr);
  env.set("XDG_CACHE_HOME", nullptr);
  env.set("HOME", nullptr);
  env.set("TMPDIR", tmp.c_str());
  const std::string planted = fmt::format("{}/mkc-cache-{}", tmp, ::geteuid());
  SUBCASE("open to everyone") {
    fs::create_directories(planted);
    ::chmod(planted.c_str(), 0777);
  }
  SUBCASE("a link to another directory") {
    fs::create_directories(tmp + "/elsewhere");
    ::chmod((tmp + "/elsewhere").c_str(), 0700);
    fs::create_directory_symlink(tmp + "/elsewhere", planted);
  }
  CHECK_THROWS_WITH_AS(cache_dir({}), doctest::Contains(planted.c_str()), EnvironmentError);
  // A compile still works, without the cache, and says why.
  JitOptions o;
  o.arch = "sm_80";
  const JitOutput j = jit_compile(kernel("mkc_zeta"), "zeta.cu", "mkc_zeta", o);
  CHECK(defines(j.cubin, "mkc_zeta"));
  REQUIRE(j.warnings.size() == 1);
  CHECK(j.warnings[0].find("is not used") != std::string::npos);
}

TEST_CASE("a cache directory that cannot be created or written: a warning, the kernel delivered") {
  const std::string base = fresh_dir("jit_unusable");
  std::ofstream(base + "/file") << "not a directory";
  JitOptions o;
  o.arch = "sm_80";
  o.cache_dir = base + "/file/cache";
  const JitOutput j = jit_compile(kernel("mkc_eta"), "eta.cu", "mkc_eta", o);
  CHECK(defines(j.cubin, "mkc_eta"));
  REQUIRE(j.warnings.size() == 1);
  CHECK_MESSAGE(j.warnings[0].find(base + "/file/cache") != std::string::npos, j.warnings[0]);
  CHECK_MESSAGE(j.warnings[0].find("ENOTDIR") != std::string::npos, j.warnings[0]);
  if (::geteuid() != 0) {
    // A read-only directory (root writes anyway).
    const std::string ro = fresh_dir("jit_readonly");
    ::chmod(ro.c_str(), 0500);
    o.cache_dir = ro;
    const JitOutput r = jit_compile(kernel("mkc_eta"), "eta.cu", "mkc_eta", o);
    CHECK(defines(r.cubin, "mkc_eta"));
    REQUIRE(r.warnings.size() == 1);
    CHECK(r.warnings[0].find("EACCES") != std::string::npos);
  }
}

TEST_CASE("the key covers every template's name and content, each field apart") {
  const std::vector<std::string> opts = {"-lineinfo"};
  const std::vector<InMemoryHeader> base = {{"mkc/a.cuh", "int a;"}, {"mkc/b.cuh", "int b;"}};
  const std::string k = jit_cache_key("src", "mkc_k", base, opts, 13000, "sm_90a", false);
  auto with = [&](std::vector<InMemoryHeader> h) {
    return jit_cache_key("src", "mkc_k", h, opts, 13000, "sm_90a", false);
  };
  CHECK(with(base) == k);
  CHECK(with({{"mkc/a.cuh", "int a; "}, {"mkc/b.cuh", "int b;"}}) != k);
  CHECK(with({{"mkc/a.cuh", "int a;"}, {"mkc/c.cuh", "int b;"}}) != k);
  CHECK(with({{"mkc/a.cuh", "int a;"}}) != k);
  // Bytes moved from one field to the next do not give the same key.
  CHECK(with({{"mkc/a.cuh", "int a;m"}, {"kc/b.cuh", "int b;"}}) != k);
  CHECK(jit_cache_key("src", "mkc_other", base, opts, 13000, "sm_90a", false) != k);
  CHECK(jit_cache_key("src", "mkc_k", base, opts, 13010, "sm_90a", false) != k);
  CHECK(jit_cache_key("src", "mkc_k", base, opts, 13000, "sm_80", false) != k);
  CHECK(jit_cache_key("src", "mkc_k", base, {}, 13000, "sm_90a", false) != k);
  CHECK(k.size() == 32);
}

}  // namespace
}  // namespace mkc::jit
