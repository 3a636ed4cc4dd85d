#include "compiler/jit.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "compiler/codegen.h"
#include "compiler/nvrtc.h"
#include "support/error.h"
#include "templates/embedded.h"

namespace mkc::jit {
namespace {

constexpr const char* kMagic = "MKCC1";

std::vector<std::string> nvrtc_options() {
  // -lineinfo keeps line tables for profilers; ptxas -v reports registers and spills.
  std::vector<std::string> opts = {"-lineinfo", "--ptxas-options=-v"};
  // $MKC_NVRTC_OPTIONS: more options, space-separated (template experiments: -DNAME=VALUE).
  // They are part of the cache key like every other option.
  if (const char* extra = std::getenv("MKC_NVRTC_OPTIONS")) {
    std::istringstream in(extra);
    for (std::string o; in >> o;) opts.push_back(o);
  }
  return opts;
}

std::string read_all(const std::string& path, bool* ok) {
  std::ifstream in(path, std::ios::binary);
  *ok = static_cast<bool>(in);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Entry: "MKCC1 <key>\n<cubin bytes> <ptx bytes> <log bytes> <checksum>\n" then the three payloads.
bool parse_entry(const std::string& data, const std::string& key, JitOutput* out) {
  std::istringstream in(data);
  std::string magic, k;
  size_t nc = 0, np = 0, nl = 0;
  uint64_t sum = 0;
  if (!(in >> magic >> k >> nc >> np >> nl >> std::hex >> sum) || magic != kMagic || k != key)
    return false;
  in.get();
  const size_t header = static_cast<size_t>(in.tellg());
  if (data.size() != header + nc + np + nl) return false;
  const std::string payload = data.substr(header);
  if (codegen::fnv1a(payload) != sum) return false;
  out->cubin = payload.substr(0, nc);
  out->ptx = payload.substr(nc, np);
  out->log = payload.substr(nc + np, nl);
  return true;
}

// The integer just before `what` in `text` ("32 bytes spill stores" -> 32), or -1.
int number_before(const std::string& text, const std::string& what) {
  const size_t at = text.find(what);
  if (at == std::string::npos || at == 0) return -1;
  size_t end = at;
  while (end > 0 && text[end - 1] == ' ') --end;
  size_t begin = end;
  while (begin > 0 && std::isdigit(static_cast<unsigned char>(text[begin - 1]))) --begin;
  return begin < end ? std::stoi(text.substr(begin, end - begin)) : -1;
}

void report_resources(const std::string& log, const std::string& kernel, JitOutput* out) {
  // ptxas -v: "Function properties for k" / "  N bytes stack frame, N bytes spill stores, N bytes
  // spill loads" / "ptxas info : Used N registers, used N barriers, N bytes smem, ...".
  const size_t at = log.find("Function properties for " + kernel);
  if (at == std::string::npos) return;
  // The kernel's block ends where the next function's properties begin.
  const size_t next = log.find("Function properties for ", at + 1);
  const std::string block =
      log.substr(at, next == std::string::npos ? std::string::npos : next - at);
  out->stack_bytes = number_before(block, "bytes stack frame");
  const int stores = number_before(block, "bytes spill stores");
  const int loads = number_before(block, "bytes spill loads");
  if (stores >= 0 && loads >= 0) out->spill_bytes = stores + loads;
  const size_t used = block.find("Used ");
  if (used != std::string::npos) out->registers = std::atoi(block.c_str() + used + 5);
  out->smem_bytes = number_before(block, "bytes smem");
}

}  // namespace

std::string cache_dir(const JitOptions& options) {
  std::string dir = options.cache_dir;
  if (dir.empty()) {
    if (const char* e = std::getenv("MKC_CACHE_DIR"); e != nullptr && *e != '\0') {
      dir = e;
    } else if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x != '\0') {
      dir = std::string(x) + "/mkc";
    } else if (const char* h = std::getenv("HOME"); h != nullptr && *h != '\0') {
      dir = std::string(h) + "/.cache/mkc";
    } else {
      dir = "/tmp/mkc-cache";
    }
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    throw EnvironmentError(fmt::format(
        "cannot create the JIT cache directory `{}`: {}; set MKC_CACHE_DIR", dir, ec.message()));
  return dir;
}

JitOutput jit_compile(const std::string& source, const std::string& program_name,
                      const std::string& kernel_name, const JitOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::string> opts = nvrtc_options();
  std::string opt_text;
  for (const std::string& o : opts) opt_text += o + " ";
  const std::vector<InMemoryHeader> headers = embedded_templates();
  std::string header_text;
  for (const InMemoryHeader& h : headers) header_text += h.name + "\n" + h.source;
  const std::string key =
      fmt::format("{:016x}{:016x}", codegen::fnv1a(source + "\n" + header_text),
                  codegen::fnv1a(fmt::format("{}|{}|{}|{}", opt_text, nvrtc_version(), options.arch,
                                             options.want_ptx)));
  JitOutput out;
  std::string path;
  if (options.use_cache) {
    path = cache_dir(options) + "/" + key + ".mkcc";
    bool ok = false;
    const std::string data = read_all(path, &ok);
    if (ok) {
      if (parse_entry(data, key, &out)) {
        out.cache_hit = true;
        report_resources(out.log, kernel_name, &out);
        out.seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        return out;
      }
      // Corrupt or truncated (a crash mid-write elsewhere, a full disk): drop it and rebuild.
      std::error_code ec;
      std::filesystem::remove(path, ec);
    }
  }
  NvrtcOptions nopts;
  nopts.arch = options.arch;
  nopts.want_ptx = options.want_ptx;
  nopts.extra = opts;
  NvrtcOutput built = nvrtc_compile(source, program_name, nopts, headers);
  out.cubin = std::move(built.cubin);
  out.ptx = std::move(built.ptx);
  out.log = std::move(built.log);
  report_resources(out.log, kernel_name, &out);
  if (options.use_cache) {
    const std::string payload = out.cubin + out.ptx + out.log;
    const std::string header = fmt::format("{} {}\n{} {} {} {:x}\n", kMagic, key, out.cubin.size(),
                                           out.ptx.size(), out.log.size(), codegen::fnv1a(payload));
    std::mt19937_64 rng(std::random_device{}());
    const std::string tmp = fmt::format("{}.tmp.{}.{:x}", path, getpid(), rng());
    {
      std::ofstream f(tmp, std::ios::binary);
      f << header << payload;
      f.flush();
      if (!f) {
        std::error_code ec;
        std::filesystem::remove(tmp, ec);
        throw EnvironmentError(fmt::format(
            "cannot write the JIT cache entry `{}` (disk full?); set MKC_CACHE_DIR elsewhere",
            tmp));
      }
    }
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (ec) {
      std::filesystem::remove(tmp, ec);
    }
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

}  // namespace mkc::jit
