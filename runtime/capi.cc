#include "runtime/capi.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "compiler/pipeline.h"
#include "compiler/sema/check.h"
#include "dsl/diagnostics.h"
#include "dsl/source.h"
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

const char* kind_name(mkc::dsl::TensorKind k) {
  switch (k) {
    case mkc::dsl::TensorKind::kInput:
      return "input";
    case mkc::dsl::TensorKind::kOutput:
      return "output";
    case mkc::dsl::TensorKind::kScratch:
      return "scratch";
  }
  return "?";
}

// The compile's result as mkc_inspect describes it.
nlohmann::json inspect(const char* name, const char* text, const char* defines, int ranks,
                       int ranks_per_node) {
  if (name == nullptr || text == nullptr) throw mkc::UserError("mkc_inspect: null argument");
  if (ranks < 1) throw mkc::UserError(fmt::format("mkc_inspect: {} ranks; give at least 1", ranks));
  mkc::compiler::CheckOptions co;
  co.ranks = {ranks};
  co.ranks_per_node = ranks_per_node;
  co.defines = parse_defines(defines);
  const auto file = std::make_shared<mkc::dsl::SourceFile>(name, text);
  const auto c = mkc::compiler::compile_file(
      file, co, "", /*generate=*/ranks_per_node == 0 || ranks_per_node >= ranks);
  nlohmann::json j;
  j["ok"] = c->ok();
  if (!c->ok()) {
    j["diagnostics"] = nlohmann::json::array();
    for (const auto& d : c->diagnostics.all()) j["diagnostics"].push_back(mkc::dsl::to_json(d));
    j["rendered"] = mkc::dsl::render_text(c->diagnostics.all(), false);
    return j;
  }
  if (c->checked.size() != 1) {
    throw mkc::UserError(
        fmt::format("{} holds {} schedules; a kernel takes one", name, c->checked.size()));
  }
  const auto& s = c->checked[0];
  j["schedule"] = s.name;
  j["ranks"] = ranks;
  j["ranks_per_node"] = ranks_per_node;
  j["summary"] = mkc::plan::summary(c->plans[0]);
  j["kernel_name"] = c->kernels.empty() ? "" : c->kernels[0].kernel_name;
  j["paths"] = c->kernels.empty() ? std::vector<std::string>{} : c->kernels[0].paths;
  j["tensors"] = nlohmann::json::array();
  for (const auto& t : s.tensors) {
    j["tensors"].push_back({{"name", t.name},
                            {"dtype", mkc::compiler::dtype_name(t.dtype)},
                            {"shape", t.shape},
                            {"kind", kind_name(t.kind)},
                            {"symmetric", t.placement == mkc::dsl::Placement::kSymmetric}});
  }
  return j;
}

char* copy_out(const std::string& text) {
  char* out = static_cast<char*>(std::malloc(text.size() + 1));
  if (out != nullptr) std::memcpy(out, text.c_str(), text.size() + 1);
  return out;
}

}  // namespace

extern "C" {

int mkc_abi_version(void) {
  return MKC_ABI_VERSION;
}

int mkc_inspect(const char* name, const char* text, const char* defines, int ranks,
                int ranks_per_node, char** json) {
  if (json == nullptr) return mkc::kExitUserError;
  std::string msg;
  int rc = mkc::kExitOk;
  try {
    *json = copy_out(inspect(name, text, defines, ranks, ranks_per_node).dump());
    return *json == nullptr ? mkc::kExitEnvironment : mkc::kExitOk;
  } catch (const mkc::UserError& e) {
    msg = e.what();
    rc = mkc::kExitUserError;
  } catch (const std::exception& e) {
    msg = e.what();
    rc = mkc::kExitEnvironment;
  }
  *json = copy_out(nlohmann::json{{"ok", false}, {"error", msg}}.dump());
  return rc;
}

void mkc_free_string(char* s) {
  std::free(s);
}

int mkc_compile_string(const char* name, const char* text, const char* defines, int ranks,
                       int ranks_per_node, mkc_kernel** out, char* err, int err_len) {
  return guarded(err, err_len, [&] {
    if (name == nullptr || text == nullptr || out == nullptr)
      throw mkc::UserError("mkc_compile_string: null argument");
    mkc::KernelOptions o;
    o.defines = parse_defines(defines);
    o.ranks = ranks;
    o.ranks_per_node = ranks_per_node;
    o.share_gpus = true;
    o.use_launcher = false;
    *out = new mkc_kernel{mkc::Kernel::from_string(name, text, o)};
  });
}

int mkc_compile_string_group(const char* name, const char* text, const char* defines, int rank,
                             int size, int local_rank, int local_size, int ranks_per_node,
                             mkc_gather_fn gather, void* ctx, mkc_kernel** out, char* err,
                             int err_len) {
  return guarded(err, err_len, [&] {
    if (name == nullptr || text == nullptr || out == nullptr || gather == nullptr)
      throw mkc::UserError("mkc_compile_string_group: null argument");
    if (size < 1 || rank < 0 || rank >= size || local_size < 1 || local_rank < 0 ||
        local_rank >= local_size || local_size > size) {
      throw mkc::UserError(fmt::format(
          "mkc_compile_string_group: rank {} of {}, local rank {} of {} is not a place in a job",
          rank, size, local_rank, local_size));
    }
    mkc::rt::World w;
    w.rank = rank;
    w.size = size;
    w.local_rank = local_rank;
    w.local_size = local_size;
    w.source = "the caller's process group";
    mkc::KernelOptions o;
    o.defines = parse_defines(defines);
    o.ranks_per_node = ranks_per_node;
    o.share_gpus = true;
    o.world = w;
    o.all_gather = [gather, ctx](const void* mine, size_t bytes, void* all) {
      if (const int rc = gather(ctx, mine, bytes, all); rc != 0) {
        throw mkc::EnvironmentError(fmt::format(
            "the caller's all-gather failed (it returned {}) with {} bytes a rank", rc, bytes));
      }
    };
    *out = new mkc_kernel{mkc::Kernel::from_string(name, text, o)};
  });
}

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

int mkc_tune(mkc_kernel* k, int candidates, double budget_s, int iters, double* us, char* progress,
             int progress_len, char* err, int err_len) {
  std::ostringstream lines;
  const int rc = guarded(err, err_len, [&] {
    if (k == nullptr || us == nullptr) throw mkc::UserError("mkc_tune: null argument");
    if (candidates < 1 || iters < 1 || !(budget_s > 0)) {
      throw mkc::UserError(fmt::format(
          "mkc_tune: candidates {} and iters {} must be at least 1, budget_s {} above 0",
          candidates, iters, budget_s));
    }
    mkc::TuneOptions o;
    o.candidates = candidates;
    o.budget_s = budget_s;
    o.iters = iters;
    *us = k->kernel.tune(o, &lines);
  });
  if (progress != nullptr) put(lines.str(), progress, progress_len);
  return rc;
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
