#include "runtime/capi.h"

#include <cstring>
#include <map>
#include <sstream>
#include <string>

#include "compiler/sema/check.h"
#include "runtime/api.h"
#include "support/error.h"

struct mkc_kernel {
  mkc::Kernel kernel;
};

namespace {

void put(const std::string& msg, char* out, int len) {
  if (out == nullptr || len <= 0) return;
  const size_t n = std::min(msg.size(), static_cast<size_t>(len - 1));
  std::memcpy(out, msg.data(), n);
  out[n] = '\0';
}

// Runs `fn`, turning mkc's exceptions into return codes and messages.
template <typename F>
int guarded(char* err, int err_len, F&& fn) {
  try {
    fn();
    put("", err, err_len);
    return 0;
  } catch (const mkc::UserError& e) {
    put(e.what(), err, err_len);
    return mkc::kExitUserError;
  } catch (const std::exception& e) {
    put(e.what(), err, err_len);
    return mkc::kExitEnvironment;
  }
}

// "NAME=VALUE,NAME=VALUE": each item read as `mkc -D` reads one (compiler::add_define: the
// language's integer rules, each name once).
std::map<std::string, int64_t> parse_defines(const char* text) {
  mkc::compiler::CheckOptions options;
  if (text == nullptr) return options.defines;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    if (!item.empty()) mkc::compiler::add_define(item, &options);
  }
  return options.defines;
}

}  // namespace

extern "C" {

int mkc_compile_file(const char* path, const char* defines, int ranks, mkc_kernel** out, char* err,
                     int err_len) {
  return guarded(err, err_len, [&] {
    if (path == nullptr || out == nullptr) throw mkc::UserError("mkc_compile_file: null argument");
    mkc::KernelOptions o;
    o.defines = parse_defines(defines);
    o.ranks = ranks;
    o.share_gpus = true;
    o.use_launcher = false;
    *out = new mkc_kernel{mkc::Kernel::from_file(path, o)};
  });
}

int mkc_bind(mkc_kernel* k, const char* name, int rank, void* data, char* err, int err_len) {
  return guarded(err, err_len, [&] {
    if (k == nullptr || name == nullptr) throw mkc::UserError("mkc_bind: null argument");
    const mkc::TensorInfo t = k->kernel.tensor(name);
    k->kernel.bind(name, rank, data, t.dtype, t.shape);
  });
}

int mkc_data(mkc_kernel* k, const char* name, int rank, void** data, char* err, int err_len) {
  return guarded(err, err_len, [&] {
    if (k == nullptr || name == nullptr || data == nullptr)
      throw mkc::UserError("mkc_data: null argument");
    *data = k->kernel.data(name, rank);
  });
}

int mkc_launch_async(mkc_kernel* k, void* stream, char* err, int err_len) {
  return guarded(err, err_len, [&] {
    if (k == nullptr) throw mkc::UserError("mkc_launch_async: null kernel");
    const std::vector<CUstream> streams(k->kernel.local_ranks().size(),
                                        static_cast<CUstream>(stream));
    k->kernel.launch_async(streams);
  });
}

int mkc_synchronize(mkc_kernel* k, char* err, int err_len) {
  return guarded(err, err_len, [&] {
    if (k == nullptr) throw mkc::UserError("mkc_synchronize: null kernel");
    k->kernel.synchronize();
  });
}

int mkc_trace(mkc_kernel* k, const char* path, char* err, int err_len) {
  return guarded(err, err_len, [&] {
    if (k == nullptr || path == nullptr) throw mkc::UserError("mkc_trace: null argument");
    k->kernel.synchronize();
    k->kernel.trace(path);
  });
}

int mkc_paths(mkc_kernel* k, char* out, int out_len) {
  if (k == nullptr) {
    put("mkc_paths: null kernel", out, out_len);
    return mkc::kExitUserError;
  }
  std::string text;
  for (const std::string& p : k->kernel.generated().paths) text += p + "\n";
  put(text, out, out_len);
  return 0;
}

void mkc_free(mkc_kernel* k) {
  delete k;
}

}  // extern "C"
