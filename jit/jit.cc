// The JIT and its disk cache (jit.h says what the key covers and what an entry must pass to be
// used). POSIX calls rather than iostreams for the cache: an entry is opened without following
// links and checked on the open descriptor (owner, mode, type), and a failed write reports errno.
#include "jit/jit.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <sstream>

#include "jit/cache_entry.h"
#include "jit/nvrtc.h"
#include "support/error.h"
#include "support/hash.h"
#include "templates/embedded.h"

namespace mkc::jit {
namespace {

std::vector<std::string> nvrtc_options() {
  // -lineinfo keeps line tables for profilers; ptxas -v reports registers and spills.
  std::vector<std::string> opts = {"-lineinfo", "--ptxas-options=-v"};
  // NVRTC 12.9 and later keep a cache of their own (keyed by the PTX): a kernel whose PTX was
  // built before skips ptxas, and its log then has none of ptxas's figures, which the no-spill
  // checks read (with the tables as data, every plan of a schedule is the same source). mkc's
  // cache (below) already keeps each kernel with its figures, so NVRTC's is switched off.
  if (nvrtc_version() >= 12090) opts.push_back("--no-cache");
  // $MKC_NVRTC_OPTIONS: more options, space-separated (template experiments: -DNAME=VALUE).
  // They are part of the cache key like every other option.
  if (const char* extra = std::getenv("MKC_NVRTC_OPTIONS")) {
    std::istringstream in(extra);
    for (std::string o; in >> o;) opts.push_back(o);
  }
  return opts;
}

// "Permission denied (EACCES)": the reader sees both what happened and the code to search for.
std::string errno_text(int e) {
  const char* name = strerrorname_np(e);
  return fmt::format("{} ({})", std::strerror(e), name != nullptr ? name : std::to_string(e));
}

// Why `dir` may not hold this user's cache, or "" when it may: it must be a directory of this
// user that nobody else can write to (or they could plant entries). `strict` (the shared /tmp
// fallback) also refuses a symbolic link and any access for others.
std::string refusal(const std::string& dir, bool strict) {
  struct stat st {};
  if ((strict ? ::lstat(dir.c_str(), &st) : ::stat(dir.c_str(), &st)) != 0)
    return errno_text(errno);
  if (S_ISLNK(st.st_mode)) return "it is a symbolic link";
  if (!S_ISDIR(st.st_mode)) return "it is not a directory";
  if (st.st_uid != ::geteuid())
    return fmt::format("it belongs to uid {}, not to this user (uid {})", st.st_uid, ::geteuid());
  const unsigned mode = st.st_mode & 0777;
  if ((mode & (S_IWGRP | S_IWOTH)) != 0)
    return fmt::format("others can write to it (mode {:04o}; chmod go-w it)", mode);
  if (strict && (mode & 077) != 0)
    return fmt::format("others can read it (mode {:04o}; it must be 0700)", mode);
  return "";
}

struct CacheDir {
  std::string path;
  std::string error;  // why it cannot be used; "" when it can
};

// The directory jit.h names, created (the last component 0700) when missing, then checked.
CacheDir locate(const JitOptions& options) {
  CacheDir out;
  bool strict = false;
  const auto absolute = [](const char* v) { return v != nullptr && v[0] == '/'; };
  if (!options.cache_dir.empty()) {
    out.path = options.cache_dir;
  } else if (const char* e = std::getenv("MKC_CACHE_DIR"); e != nullptr && *e != '\0') {
    out.path = e;
  } else if (const char* x = std::getenv("XDG_CACHE_HOME"); absolute(x)) {
    // The XDG rules: a relative XDG_CACHE_HOME is ignored.
    out.path = std::string(x) + "/mkc";
  } else if (const char* h = std::getenv("HOME"); absolute(h)) {
    out.path = std::string(h) + "/.cache/mkc";
  } else {
    const char* t = std::getenv("TMPDIR");
    out.path = fmt::format("{}/mkc-cache-{}", absolute(t) ? t : "/tmp", ::geteuid());
    strict = true;
  }
  while (out.path.size() > 1 && out.path.back() == '/') out.path.pop_back();
  struct stat st {};
  if (::lstat(out.path.c_str(), &st) != 0) {
    std::error_code ec;
    const std::filesystem::path parent = std::filesystem::path(out.path).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
    if (::mkdir(out.path.c_str(), 0700) != 0 && errno != EEXIST) {
      out.error = fmt::format("cannot create it: {}", errno_text(errno));
      return out;
    }
  }
  out.error = refusal(out.path, strict);
  return out;
}

// The most bytes an entry may hold (cubin, PTX and log of one kernel are far below): the entry is
// read whole, so a larger file (a sparse one of any size under an entry's name) is refused
// before anything is allocated.
constexpr int64_t kMaxEntryBytes = int64_t{1} << 30;

// Reads an entry that may be trusted: a regular file of this user that nobody else can write.
// Returns false when there is none; `problem` is set when there was one but it was refused or
// could not be read.
bool read_entry(const std::string& path, std::string* data, std::string* problem) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno != ENOENT)
      *problem = errno == ELOOP ? "it is a symbolic link" : fmt::format("{}", errno_text(errno));
    return false;
  }
  struct stat st {};
  bool ok = ::fstat(fd, &st) == 0;
  if (!ok) {
    *problem = errno_text(errno);
  } else if (!S_ISREG(st.st_mode)) {
    *problem = "it is not a regular file";
    ok = false;
  } else if (st.st_uid != ::geteuid()) {
    *problem =
        fmt::format("it belongs to uid {}, not to this user (uid {})", st.st_uid, ::geteuid());
    ok = false;
  } else if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    *problem = fmt::format("others can write to it (mode {:04o})", st.st_mode & 0777);
    ok = false;
  } else if (st.st_size > kMaxEntryBytes) {
    *problem = fmt::format("it holds {} bytes, more than an entry can ({} at most)",
                           static_cast<int64_t>(st.st_size), kMaxEntryBytes);
    ok = false;
  }
  if (ok) {
    data->resize(static_cast<size_t>(st.st_size));
    size_t got = 0;
    while (got < data->size()) {
      const ssize_t k = ::read(fd, data->data() + got, data->size() - got);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) break;
      got += static_cast<size_t>(k);
    }
    // Shorter than its size said: truncated under us; parse_entry refuses it.
    data->resize(got);
  }
  ::close(fd);
  return ok;
}

// Writes all of `data` to `fd`; 0 or the errno of the failure.
int write_all(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t k = ::write(fd, data.data() + done, data.size() - done);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return k < 0 ? errno : EIO;
    done += static_cast<size_t>(k);
  }
  return 0;
}

// Stores an entry: a 0600 temporary file renamed over `path`. "" or what went wrong.
std::string write_entry(const std::string& dir, const std::string& path, const std::string& data) {
  std::mt19937_64 rng(std::random_device{}());
  const std::string tmp = fmt::format("{}.tmp.{}.{:x}", path, ::getpid(), rng());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return fmt::format("cannot create a file in `{}`: {}", dir, errno_text(errno));
  int err = write_all(fd, data);
  // Some file systems report a full disk only when the file is closed.
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err == 0 && ::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
  if (err != 0) {
    ::unlink(tmp.c_str());
    return fmt::format("cannot write `{}`: {}", path, errno_text(err));
  }
  return "";
}

// The integer just before `what` in `text` ("32 bytes spill stores" -> 32), or -1.
int number_before(const std::string& text, const std::string& what) {
  const size_t at = text.find(what);
  if (at == std::string::npos || at == 0) return -1;
  size_t end = at;
  while (end > 0 && text[end - 1] == ' ') --end;
  size_t begin = end;
  while (begin > 0 && std::isdigit(static_cast<unsigned char>(text[begin - 1]))) --begin;
  int v = -1;
  const auto [ptr, ec] = std::from_chars(text.data() + begin, text.data() + end, v);
  return begin < end && ec == std::errc() && ptr == text.data() + end ? v : -1;
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
  out->registers = number_before(block, "registers");
  out->smem_bytes = number_before(block, "bytes smem");
}

// One field of the key: its name, its length, its bytes. Lengths keep fields from running
// together ("ab" + "c" and "a" + "bc" hash differently).
void key_field(std::string* k, std::string_view name, std::string_view value) {
  *k += fmt::format("{}:{}:", name, value.size());
  k->append(value.data(), value.size());
  *k += '\n';
}

}  // namespace

std::string jit_cache_key(const std::string& source, const std::string& kernel_name,
                          const std::vector<InMemoryHeader>& headers,
                          const std::vector<std::string>& nvrtc_options, int nvrtc_version,
                          const std::string& arch, bool want_ptx) {
  std::string k;
  key_field(&k, "format", kEntryMagic);
  key_field(&k, "source", source);
  key_field(&k, "kernel", kernel_name);
  key_field(&k, "headers", std::to_string(headers.size()));
  for (const InMemoryHeader& h : headers) {
    key_field(&k, "header", h.name);
    key_field(&k, "content", h.source);
  }
  for (const std::string& o : nvrtc_options) key_field(&k, "option", o);
  key_field(&k, "nvrtc", std::to_string(nvrtc_version));
  key_field(&k, "arch", arch);
  key_field(&k, "ptx", want_ptx ? "1" : "0");
  // Two 64-bit hashes with different seeds: a 128-bit name.
  return fmt::format("{:016x}{:016x}", mkc::fnv1a(k), mkc::fnv1a(k, 0x9e3779b97f4a7c15ull));
}

std::string resources_text(const JitOutput& out) {
  const char* origin = out.cache_hit ? "cache hit" : "compiled";
  if (out.registers >= 0 && out.spill_bytes >= 0) {
    return fmt::format("{} registers, {} B spilled ({})", out.registers, out.spill_bytes, origin);
  }
  std::string lines;
  int kept = 0;
  std::istringstream in(out.log);
  for (std::string line; std::getline(in, line) && kept < 12;) {
    if (line.find("ptxas") == std::string::npos) continue;
    lines += "\n  " + line;
    ++kept;
  }
  return fmt::format("ptxas's figures not found ({}, a log of {} bytes){}", origin, out.log.size(),
                     lines.empty() ? std::string(": no ptxas line") : lines);
}

std::string cache_dir(const JitOptions& options) {
  const CacheDir d = locate(options);
  if (!d.error.empty()) {
    throw EnvironmentError(fmt::format(
        "the JIT cache directory `{}` cannot be used: {}; set MKC_CACHE_DIR to a directory of "
        "your own",
        d.path, d.error));
  }
  return d.path;
}

JitOutput jit_compile(const std::string& source, const std::string& program_name,
                      const std::string& kernel_name, const JitOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  const std::vector<std::string> opts = nvrtc_options();
  const std::vector<InMemoryHeader> headers = embedded_templates();
  const std::string key = jit_cache_key(source, kernel_name, headers, opts, nvrtc_version(),
                                        options.arch, options.want_ptx);
  JitOutput out;
  std::string dir, path;
  if (options.use_cache) {
    const CacheDir d = locate(options);
    if (d.error.empty()) {
      dir = d.path;
      path = dir + "/" + key + ".mkcc";
    } else {
      out.warnings.push_back(fmt::format(
          "the JIT cache directory `{}` is not used: {}; the kernel is compiled without the "
          "cache (set MKC_CACHE_DIR to a directory of your own)",
          d.path, d.error));
    }
  }
  if (!path.empty()) {
    std::string data, problem;
    if (read_entry(path, &data, &problem)) {
      if (decode_entry(data, key, kernel_name, &out)) {
        out.cache_hit = true;
        // Entries keep the figures; a log from an older ptxas may still have them.
        if (out.registers < 0) report_resources(out.log, kernel_name, &out);
        out.seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        return out;
      }
      // Corrupt, truncated (a crash mid-write elsewhere, a full disk) or not this kernel's: drop
      // it and rebuild.
      ::unlink(path.c_str());
    } else if (!problem.empty()) {
      out.warnings.push_back(fmt::format(
          "ignored the JIT cache entry `{}`: {}; compiling the kernel again", path, problem));
      ::unlink(path.c_str());
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
  if (!path.empty()) {
    const std::string entry = encode_entry(key, kernel_name, out);
    const std::string failed = write_entry(dir, path, entry);
    if (!failed.empty()) {
      out.warnings.push_back(fmt::format(
          "the JIT cache in `{}` could not store the kernel: {}; it was compiled and is used, "
          "but the next run compiles it again",
          dir, failed));
    }
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

}  // namespace mkc::jit
