#include "runtime/api.h"

#include <fmt/format.h>

#include <cstdlib>
#include <iostream>
#include <optional>
#include <sstream>

#include "compiler/pipeline.h"
#include "dsl/diagnostics.h"
#include "dsl/source.h"
#include "runtime/trace.h"
#include "runtime/tune_run.h"
#include "runtime/verify.h"
#include "support/error.h"
#include "tune/apply.h"

namespace mkc {

int64_t TensorInfo::elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

struct Kernel::Impl {
  // What built it, for tune(): the source, the options, the compile's world and SMs.
  std::string name, text;
  KernelOptions options;
  compiler::CheckOptions check;
  std::string defines_text, arch, db;
  bool multi_process = false;
  std::unique_ptr<rt::Rendezvous> group;  // one process per rank
  std::unique_ptr<compiler::Compilation> c;
  jit::JitOutput bin;
  std::unique_ptr<rt::LocalJob> job;
};

Kernel::Kernel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Kernel::Kernel(Kernel&&) noexcept = default;
Kernel& Kernel::operator=(Kernel&&) noexcept = default;
Kernel::~Kernel() = default;

namespace {

// Tunes the (one) schedule of `file`, compiled with `check` for `arch`, and stores the winner
// in the database at `db`; the winner's µs per launch, or 0 when nothing is tunable.
double tune_into_db(const std::shared_ptr<const dsl::SourceFile>& file,
                    const compiler::CheckOptions& check, const std::string& defines_text,
                    const std::string& arch, bool share_gpus, const std::string& db,
                    const TuneOptions& options, std::ostream* progress) {
  rt::TuneRunOptions to;
  to.check = check;
  to.defines_text = defines_text;
  to.arch = arch;
  to.share_gpus = share_gpus;
  to.iters = options.iters;
  to.search.candidates = options.candidates;
  to.search.budget_s = options.budget_s;
  std::ostringstream quiet;
  std::optional<rt::Tuned> t =
      rt::tune_schedule(file, 0, to, progress != nullptr ? *progress : quiet);
  if (!t) return 0;
  t->entry.tuned_at = tune::utc_now();
  tune::store(db, t->key, t->entry);
  return t->entry.us;
}

}  // namespace

Kernel Kernel::from_file(const std::string& path, const KernelOptions& options) {
  const auto file = dsl::SourceFile::read(path);
  return from_string(file->path(), file->text(), options);
}

Kernel Kernel::from_string(const std::string& name, const std::string& text,
                           const KernelOptions& options) {
  if (options.all_gather && !options.world) {
    throw UserError(
        "KernelOptions::all_gather needs KernelOptions::world: this process's rank and the job's "
        "size, as the caller's process group knows them");
  }
  const int gpus = rt::device_count();
  if (gpus == 0) throw EnvironmentError("no GPU: the CUDA driver sees no device");
  const rt::World world = options.world          ? *options.world
                          : options.use_launcher ? rt::detect_world()
                                                 : rt::World{};
  const rt::Placement place = rt::place_ranks(world, options.ranks, gpus, options.share_gpus);
  const int ranks = place.ranks, per_gpu = place.per_gpu;
  const rt::DeviceInfo dev = rt::device_info(0);
  compiler::CheckOptions co;
  co.ranks = {ranks};
  co.ranks_per_node = rt::ranks_per_node(world, options.ranks_per_node,
                                         [](const char* n) { return std::getenv(n); });
  co.defines = options.defines;
  co.sms = dev.sm_count / per_gpu;
  co.arch = dev.arch();
  std::string defines_text;
  for (const auto& [k, v] : options.defines)
    defines_text += fmt::format("{}{}={}", defines_text.empty() ? "" : " ", k, v);
  auto impl = std::make_unique<Impl>();
  const auto file = std::make_shared<dsl::SourceFile>(name, text);
  const std::string db = tune::default_db_path(options.tune_db);
  impl->name = name;
  impl->text = text;
  impl->options = options;
  impl->check = co;
  impl->defines_text = defines_text;
  impl->arch = dev.arch();
  impl->db = db;
  impl->multi_process = world.size > 1;
  // MKC_TUNE=on: a kernel the database has no entry for is tuned first, in one process only (the
  // processes of a job would each measure, and race to store), as `mkc run` does.
  if (!impl->multi_process && !db.empty() && tune::mode_from_env() == tune::Mode::kOn) {
    const auto checked = compiler::compile_file(file, co, defines_text, false);
    if (checked->ok() && checked->checked.size() == 1 &&
        !tune::lookup(db, tune::tune_key(*file, checked->checked[0], co, dev.arch()), nullptr)) {
      tune_into_db(file, co, defines_text, dev.arch(), options.share_gpus, db, TuneOptions{},
                   &std::cerr);
    }
  }
  // One process per rank: this one plans its rank's neighbourhood and builds that rank's kernel
  // (issue 35; MKC_PLAN=world: every rank's).
  co.plan_rank = rt::planned_rank(world, [](const char* n) { return std::getenv(n); });
  impl->c = compiler::compile_file(
      file, co, defines_text, true,
      db.empty() ? nullptr : tune::tuned_from_db(db, file, co, dev.arch(), std::cerr));
  if (!impl->c->ok()) throw UserError(dsl::render_text(impl->c->diagnostics.all(), false));
  if (impl->c->kernels.size() != 1) {
    throw UserError(fmt::format("{} holds {} schedules; the API takes one per Kernel", name,
                                impl->c->kernels.size()));
  }
  jit::JitOptions jo;
  jo.arch = dev.arch();
  const codegen::Generated& g = impl->c->kernels[0];
  impl->bin = jit::jit_compile(g.source, impl->c->plans[0].schedule + ".cu", g.kernel_name, jo);
  if (world.size > 1 && options.all_gather) {
    impl->group = std::make_unique<rt::Rendezvous>(world, options.all_gather);
  } else if (world.size > 1) {
    impl->group =
        std::make_unique<rt::Rendezvous>(world, std::chrono::seconds(options.bootstrap_timeout_s));
  }
  rt::LocalJobOptions lo;
  lo.file = impl->c->file;
  lo.timeout_ns = options.timeout_ms * 1'000'000ull;
  lo.share_gpus = options.share_gpus;
  lo.group = impl->group.get();
  impl->job = std::make_unique<rt::LocalJob>(impl->c->plans[0], impl->bin.cubin, g, lo);
  return Kernel(std::move(impl));
}

int Kernel::ranks() const {
  return impl_->job->ranks();
}

std::vector<int> Kernel::local_ranks() const {
  return impl_->job->local_ranks();
}

std::vector<TensorInfo> Kernel::tensors() const {
  std::vector<TensorInfo> out;
  for (const compiler::Tensor& t : impl_->c->checked[0].tensors) {
    out.push_back(TensorInfo{t.name, t.dtype, t.shape, t.kind == dsl::TensorKind::kInput});
  }
  return out;
}

int Kernel::index_of(const std::string& name) const {
  const auto& ts = impl_->c->checked[0].tensors;
  std::string names;
  for (size_t i = 0; i < ts.size(); ++i) {
    if (ts[i].name == name) return static_cast<int>(i);
    names += fmt::format("{}{}", i ? ", " : "", ts[i].name);
  }
  throw UserError(fmt::format("schedule `{}` has no tensor `{}` (it has {})",
                              impl_->c->checked[0].name, name, names));
}

TensorInfo Kernel::tensor(const std::string& name) const {
  return tensors()[index_of(name)];
}

void Kernel::set(const std::string& name, int rank, const std::vector<double>& values) {
  const TensorInfo t = tensor(name);
  if (rank < 0 || rank >= ranks())
    throw UserError(fmt::format("set(`{}`): rank {} is not in [0, {})", name, rank, ranks()));
  if (static_cast<int64_t>(values.size()) != t.elements()) {
    throw UserError(fmt::format("set(`{}`): {} values for a {}[{}] tensor ({} elements)", name,
                                values.size(), compiler::dtype_name(t.dtype),
                                fmt::join(t.shape, ", "), t.elements()));
  }
  impl_->job->upload(rank, index_of(name), values);
}

std::vector<double> Kernel::get(const std::string& name, int rank) {
  if (rank < 0 || rank >= ranks())
    throw UserError(fmt::format("get(`{}`): rank {} is not in [0, {})", name, rank, ranks()));
  return impl_->job->download(rank, index_of(name));
}

void Kernel::set_random_inputs(uint64_t seed) {
  rt::upload_random_inputs(*impl_->job, impl_->c->plans[0], seed);
}

void Kernel::bind(const std::string& name, int rank, void* data, compiler::DType dtype,
                  const std::vector<int64_t>& shape) {
  const TensorInfo t = tensor(name);
  if (rank < 0 || rank >= ranks())
    throw UserError(fmt::format("bind(`{}`): rank {} is not in [0, {})", name, rank, ranks()));
  if (dtype != t.dtype || shape != t.shape) {
    throw UserError(
        fmt::format("bind(`{}`, rank {}): the memory given holds {}[{}], the schedule's "
                    "`{}` is {}[{}]",
                    name, rank, compiler::dtype_name(dtype), fmt::join(shape, ", "), name,
                    compiler::dtype_name(t.dtype), fmt::join(t.shape, ", ")));
  }
  if (data == nullptr) {
    throw UserError(
        fmt::format("bind(`{}`, rank {}): a null pointer; unbind() returns a tensor "
                    "to the job's heap",
                    name, rank));
  }
  impl_->job->bind(rank, index_of(name), reinterpret_cast<CUdeviceptr>(data));
}

void Kernel::unbind(const std::string& name, int rank) {
  impl_->job->bind(rank, index_of(name), 0);
}

void* Kernel::data(const std::string& name, int rank) const {
  return reinterpret_cast<void*>(impl_->job->buffer_address(rank, index_of(name)));
}

void Kernel::launch() {
  impl_->job->launch();
}

void Kernel::launch_async(const std::vector<CUstream>& streams) {
  impl_->job->launch_async(streams);
}

void Kernel::synchronize() {
  impl_->job->synchronize();
}

double Kernel::time(int iters) {
  return impl_->job->time_launches(iters);
}

double Kernel::tune(const TuneOptions& options, std::ostream* progress) {
  if (impl_->multi_process) {
    throw UserError(
        "Kernel::tune: this kernel's ranks run in several processes, which would each measure "
        "and race to store; tune it in one process (`mkc tune`, or a Kernel with every rank here) "
        "and ship the database");
  }
  if (impl_->db.empty()) {
    throw UserError(
        "Kernel::tune: no tuning database path (the JIT cache's directory cannot be used): set "
        "KernelOptions::tune_db or MKC_TUNE_DB");
  }
  const auto file = std::make_shared<dsl::SourceFile>(impl_->name, impl_->text);
  // The measurements need the GPU's memory: this kernel's job goes first.
  impl_->job.reset();
  double us = 0;
  try {
    us = tune_into_db(file, impl_->check, impl_->defines_text, impl_->arch,
                      impl_->options.share_gpus, impl_->db, options, progress);
  } catch (...) {
    *this = from_string(impl_->name, impl_->text, impl_->options);  // usable as it was
    throw;
  }
  // Rebuilt from what built it; the database's new entry now applies.
  *this = from_string(impl_->name, impl_->text, impl_->options);
  return us;
}

int Kernel::trace(const std::string& path) {
  return rt::traced_launch(*impl_->job, impl_->c->plans[0], path);
}

const plan::Plan& Kernel::plan() const {
  return impl_->c->plans[0];
}
const codegen::Generated& Kernel::generated() const {
  return impl_->c->kernels[0];
}
const jit::JitOutput& Kernel::binary() const {
  return impl_->bin;
}
rt::LocalJob& Kernel::job() {
  return *impl_->job;
}

}  // namespace mkc
