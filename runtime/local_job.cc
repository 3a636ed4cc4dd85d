#include "runtime/local_job.h"

#include <fmt/format.h>

#include <cstring>

#include "runtime/tensor_map.h"
#include "support/error.h"

namespace mkc::rt {
namespace {

// The host mirror of mkc::KernelArgs and mkc::ErrorRecord (templates/mkc/device.cuh).
struct KernelArgs {
  void* const* buffers;
  unsigned long long* const* events;
  int rank;
  unsigned long long epoch;
  unsigned long long timeout_ns;
  void* error;
  unsigned long long* trace;
  const void* tensor_maps;
};

struct ErrorRecord {
  unsigned int flag;
  int rank;
  int task;
  int event;
  unsigned long long expected;
  unsigned long long seen;
};

// Makes a context current for a scope.
class CtxScope {
 public:
  CtxScope(const Driver& d, CUcontext c) : d_(d) {
    d_.cuCtxGetCurrent(&prev_);
    MKC_CU(d_, cuCtxSetCurrent, c);
  }
  ~CtxScope() { d_.cuCtxSetCurrent(prev_); }

 private:
  const Driver& d_;
  CUcontext prev_ = nullptr;
};

}  // namespace

uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);                   // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

float from_bf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

struct LocalJob::Rank {
  CUdevice dev{};
  CUcontext ctx{};
  CUmodule mod{};
  CUfunction fn{};
  CUstream stream{};
  std::vector<CUdeviceptr> buffers;
  CUdeviceptr events = 0;
  CUdeviceptr buffer_table = 0;
  CUdeviceptr event_table = 0;
  CUdeviceptr tensor_maps = 0;
  CUdeviceptr trace = 0;
  ErrorRecord* error = nullptr;
  CUdeviceptr error_dev = 0;
};

LocalJob::LocalJob(const plan::Plan& plan, const std::string& cubin,
                   const codegen::Generated& kernel, LocalJobOptions options)
    : plan_(plan),
      kernel_(kernel.kernel_name),
      ctas_(kernel.ctas),
      threads_(kernel.threads),
      smem_(kernel.dynamic_smem),
      opts_(std::move(options)) {
  const int ctas = ctas_, threads = threads_;
  const Driver& d = Driver::get();
  const int n = static_cast<int>(plan.ranks);
  if (n > device_count()) {
    throw UserError(fmt::format(
        "the plan is for {} ranks but this machine has {} GPU(s); compile with --ranks {}", n,
        device_count(), device_count()));
  }
  // Before Hopper the GEMM tile is the mma.sync one, with its own (smaller) staging.
  if (device_info(0).cc_major < 9) smem_ = kernel.portable_smem;
  for (int r = 0; r < n; ++r) {
    auto rk = std::make_unique<Rank>();
    MKC_CU(d, cuDeviceGet, &rk->dev, r);
    MKC_CU(d, cuDevicePrimaryCtxRetain, &rk->ctx, rk->dev);
    CtxScope scope(d, rk->ctx);
    MKC_CU(d, cuModuleLoadData, &rk->mod, cubin.data());
    MKC_CU(d, cuModuleGetFunction, &rk->fn, rk->mod, kernel_.c_str());
    if (smem_ > 0)
      MKC_CU(d, cuFuncSetAttribute, rk->fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem_);
    // Every CTA must be resident at once: a persistent kernel's CTAs wait on each other.
    int per_sm = 0, sms = 0;
    MKC_CU(d, cuOccupancyMaxActiveBlocksPerMultiprocessor, &per_sm, rk->fn, threads, smem_);
    MKC_CU(d, cuDeviceGetAttribute, &sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, rk->dev);
    if (static_cast<int64_t>(per_sm) * sms < ctas) {
      throw UserError(
          fmt::format("the kernel's {} CTAs cannot all be resident on GPU {} ({} per SM x {} SMs); "
                      "compile with --sms {}",
                      ctas, r, per_sm, sms, static_cast<int64_t>(per_sm) * sms));
    }
    MKC_CU(d, cuStreamCreate, &rk->stream, CU_STREAM_NON_BLOCKING);
    for (const plan::Buffer& b : plan.buffers) {
      CUdeviceptr p = 0;
      MKC_CU(
          d, cuMemAlloc, &p,
          std::max<size_t>(1, static_cast<size_t>(b.elements()) * compiler::dtype_bytes(b.dtype)));
      rk->buffers.push_back(p);
    }
    MKC_CU(d, cuMemAlloc, &rk->events, std::max<size_t>(1, plan.events.size()) * 8);
    MKC_CU(d, cuMemsetD8, rk->events, 0, std::max<size_t>(1, plan.events.size()) * 8);
    void* host = nullptr;
    MKC_CU(d, cuMemHostAlloc, &host, sizeof(ErrorRecord),
           CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE);
    rk->error = static_cast<ErrorRecord*>(host);
    std::memset(rk->error, 0, sizeof(ErrorRecord));
    MKC_CU(d, cuMemHostGetDevicePointer, &rk->error_dev, host, 0);
    ranks_.push_back(std::move(rk));
  }
  // Peer access between every pair (NVLink on the machines mkc targets).
  for (int a = 0; a < n; ++a) {
    CtxScope scope(d, ranks_[a]->ctx);
    for (int b = 0; b < n; ++b) {
      if (a == b) continue;
      int can = 0;
      MKC_CU(d, cuDeviceCanAccessPeer, &can, ranks_[a]->dev, ranks_[b]->dev);
      if (!can)
        throw EnvironmentError(
            fmt::format("GPU {} cannot access GPU {} (no P2P); mkc needs NVLink or PCIe peer "
                        "access between the GPUs of a node",
                        a, b));
      const CUresult res = d.cuCtxEnablePeerAccess(ranks_[b]->ctx, 0);
      if (res != CUDA_SUCCESS && res != CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED)
        throw_cu_error(d, res, "cuCtxEnablePeerAccess", __FILE__, __LINE__);
    }
  }
  // Address tables: with one address space, every rank's pointers are valid on every GPU.
  std::vector<CUdeviceptr> buffers, events;
  for (const auto& rk : ranks_) {
    buffers.insert(buffers.end(), rk->buffers.begin(), rk->buffers.end());
    events.push_back(rk->events);
  }
  // TMA descriptors: the same array on every GPU (one address space), in the generator's order.
  std::vector<CUtensorMap> maps;
  if (!kernel.tensor_maps.empty()) {
    CtxScope scope(d, ranks_[0]->ctx);
    for (const codegen::TensorMapSpec& m : kernel.tensor_maps) {
      maps.push_back(encode_tensor_map(d, ranks_.at(m.rank)->buffers.at(m.buffer), m,
                                       plan.buffers.at(m.buffer).name));
    }
  }
  for (const auto& rk : ranks_) {
    CtxScope scope(d, rk->ctx);
    if (!maps.empty()) {
      MKC_CU(d, cuMemAlloc, &rk->tensor_maps, maps.size() * sizeof(CUtensorMap));
      MKC_CU(d, cuMemcpyHtoD, rk->tensor_maps, maps.data(), maps.size() * sizeof(CUtensorMap));
    }
    MKC_CU(d, cuMemAlloc, &rk->buffer_table, buffers.size() * sizeof(CUdeviceptr));
    MKC_CU(d, cuMemcpyHtoD, rk->buffer_table, buffers.data(), buffers.size() * sizeof(CUdeviceptr));
    MKC_CU(d, cuMemAlloc, &rk->event_table, events.size() * sizeof(CUdeviceptr));
    MKC_CU(d, cuMemcpyHtoD, rk->event_table, events.data(), events.size() * sizeof(CUdeviceptr));
  }
}

LocalJob::~LocalJob() {
  const Driver& d = Driver::get();
  for (auto& rk : ranks_) {
    // Destructors never throw: failures here are ignored (the process is usually ending).
    d.cuCtxSetCurrent(rk->ctx);
    d.cuStreamSynchronize(rk->stream);
    for (CUdeviceptr p : rk->buffers) d.cuMemFree(p);
    d.cuMemFree(rk->events);
    d.cuMemFree(rk->buffer_table);
    d.cuMemFree(rk->event_table);
    if (rk->tensor_maps) d.cuMemFree(rk->tensor_maps);
    if (rk->trace) d.cuMemFree(rk->trace);
    d.cuMemFreeHost(rk->error);
    d.cuStreamDestroy(rk->stream);
    d.cuModuleUnload(rk->mod);
    d.cuDevicePrimaryCtxRelease(rk->dev);
  }
}

void LocalJob::set_trace(bool on) {
  const Driver& d = Driver::get();
  for (auto& rk : ranks_) {
    CtxScope scope(d, rk->ctx);
    if (on && !rk->trace) {
      MKC_CU(d, cuMemAlloc, &rk->trace, std::max<size_t>(1, plan_.tasks.size()) * 16);
    } else if (!on && rk->trace) {
      d.cuMemFree(rk->trace);
      rk->trace = 0;
    }
  }
}

std::vector<uint64_t> LocalJob::trace(int rank) {
  const Driver& d = Driver::get();
  Rank& rk = *ranks_.at(rank);
  std::vector<uint64_t> out(plan_.tasks.size() * 2, 0);
  if (!rk.trace || out.empty()) return out;
  CtxScope scope(d, rk.ctx);
  MKC_CU(d, cuStreamSynchronize, rk.stream);
  MKC_CU(d, cuMemcpyDtoH, out.data(), rk.trace, out.size() * 8);
  return out;
}

CUcontext LocalJob::context(int rank) const {
  return ranks_.at(rank)->ctx;
}
CUstream LocalJob::stream(int rank) const {
  return ranks_.at(rank)->stream;
}
CUdeviceptr LocalJob::buffer_address(int rank, int buffer) const {
  return ranks_.at(rank)->buffers.at(buffer);
}

void LocalJob::upload(int rank, int buffer, const std::vector<double>& values) {
  const Driver& d = Driver::get();
  const plan::Buffer& b = plan_.buffers[buffer];
  const int eb = compiler::dtype_bytes(b.dtype);
  std::vector<unsigned char> bytes(values.size() * eb);
  for (size_t i = 0; i < values.size(); ++i) {
    unsigned char* p = bytes.data() + i * eb;
    switch (b.dtype) {
      case compiler::DType::kBf16: {
        const uint16_t h = to_bf16(static_cast<float>(values[i]));
        std::memcpy(p, &h, 2);
        break;
      }
      case compiler::DType::kF16: {
        const _Float16 h = static_cast<_Float16>(values[i]);
        std::memcpy(p, &h, 2);
        break;
      }
      case compiler::DType::kF32: {
        const float f = static_cast<float>(values[i]);
        std::memcpy(p, &f, 4);
        break;
      }
      case compiler::DType::kF64:
        std::memcpy(p, &values[i], 8);
        break;
      case compiler::DType::kI32: {
        const int32_t v = static_cast<int32_t>(values[i]);
        std::memcpy(p, &v, 4);
        break;
      }
      case compiler::DType::kI64: {
        const int64_t v = static_cast<int64_t>(values[i]);
        std::memcpy(p, &v, 8);
        break;
      }
      default:
        throw UserError(
            fmt::format("uploading {} data is not supported yet", compiler::dtype_name(b.dtype)));
    }
  }
  CtxScope scope(d, ranks_[rank]->ctx);
  MKC_CU(d, cuMemcpyHtoD, ranks_[rank]->buffers[buffer], bytes.data(), bytes.size());
}

std::vector<double> LocalJob::download(int rank, int buffer) {
  const Driver& d = Driver::get();
  const plan::Buffer& b = plan_.buffers[buffer];
  const int eb = compiler::dtype_bytes(b.dtype);
  std::vector<unsigned char> bytes(static_cast<size_t>(b.elements()) * eb);
  {
    CtxScope scope(d, ranks_[rank]->ctx);
    MKC_CU(d, cuMemcpyDtoH, bytes.data(), ranks_[rank]->buffers[buffer], bytes.size());
  }
  std::vector<double> out(b.elements());
  for (size_t i = 0; i < out.size(); ++i) {
    const unsigned char* p = bytes.data() + i * eb;
    switch (b.dtype) {
      case compiler::DType::kBf16: {
        uint16_t h;
        std::memcpy(&h, p, 2);
        out[i] = from_bf16(h);
        break;
      }
      case compiler::DType::kF16: {
        _Float16 h;
        std::memcpy(&h, p, 2);
        out[i] = static_cast<double>(h);
        break;
      }
      case compiler::DType::kF32: {
        float f;
        std::memcpy(&f, p, 4);
        out[i] = f;
        break;
      }
      case compiler::DType::kF64:
        std::memcpy(&out[i], p, 8);
        break;
      case compiler::DType::kI32: {
        int32_t v;
        std::memcpy(&v, p, 4);
        out[i] = v;
        break;
      }
      case compiler::DType::kI64: {
        int64_t v;
        std::memcpy(&v, p, 8);
        out[i] = static_cast<double>(v);
        break;
      }
      default:
        throw UserError(
            fmt::format("downloading {} data is not supported yet", compiler::dtype_name(b.dtype)));
    }
  }
  return out;
}

void LocalJob::poison(int rank, int buffer) {
  const Driver& d = Driver::get();
  const plan::Buffer& b = plan_.buffers[buffer];
  CtxScope scope(d, ranks_[rank]->ctx);
  MKC_CU(d, cuMemsetD8, ranks_[rank]->buffers[buffer], 0xFF,
         static_cast<size_t>(b.elements()) * compiler::dtype_bytes(b.dtype));
}

void LocalJob::enqueue(int r) {
  const Driver& d = Driver::get();
  Rank& rk = *ranks_[r];
  CtxScope scope(d, rk.ctx);
  KernelArgs args{reinterpret_cast<void* const*>(rk.buffer_table),
                  reinterpret_cast<unsigned long long* const*>(rk.event_table),
                  r,
                  epoch_,
                  opts_.timeout_ns,
                  reinterpret_cast<void*>(rk.error_dev),
                  reinterpret_cast<unsigned long long*>(rk.trace),
                  reinterpret_cast<const void*>(rk.tensor_maps)};
  if (rk.trace) MKC_CU(d, cuMemsetD8Async, rk.trace, 0, plan_.tasks.size() * 16, rk.stream);
  void* params[] = {&args};
  MKC_CU(d, cuLaunchKernel, rk.fn, static_cast<unsigned>(ctas_), 1, 1,
         static_cast<unsigned>(threads_), 1, 1, static_cast<unsigned>(smem_), rk.stream, params,
         nullptr);
}

void LocalJob::finish(const std::vector<int>& which) {
  const Driver& d = Driver::get();
  for (int r : which) {
    CtxScope scope(d, ranks_[r]->ctx);
    MKC_CU(d, cuStreamSynchronize, ranks_[r]->stream);
  }
  for (int r : which) {
    const ErrorRecord e = *ranks_[r]->error;
    if (e.flag == 0) continue;
    std::memset(ranks_[r]->error, 0, sizeof(ErrorRecord));
    std::string where = "?";
    std::string task = fmt::format("task {}", e.task), event = fmt::format("event {}", e.event);
    if (e.task >= 0 && e.task < static_cast<int>(plan_.tasks.size())) {
      const plan::Task& t = plan_.tasks[e.task];
      task = t.label;
      if (t.op >= 0 && opts_.file && plan_.source->ops[t.op].decl) {
        const dsl::LineCol lc = opts_.file->line_col(plan_.source->ops[t.op].decl->span.begin);
        where = fmt::format("{}:{}:{}", opts_.file->path(), lc.line, lc.col);
      }
    }
    if (e.event >= 0 && e.event < static_cast<int>(plan_.events.size()))
      event = plan_.events[e.event].name;
    throw LaunchError(fmt::format(
        "launch {} timed out on rank {}: task {} (from {}) waited {:.1f} s for event {} to reach "
        "{}, seen {}; "
        "a peer did not launch, or failed",
        epoch_, e.rank, task, where, opts_.timeout_ns / 1e9, event, e.expected, e.seen));
  }
}

void LocalJob::launch(const std::vector<int>& which) {
  std::vector<int> ranks = which;
  if (ranks.empty()) {
    for (int r = 0; r < this->ranks(); ++r) ranks.push_back(r);
  }
  ++epoch_;
  for (int r : ranks) enqueue(r);
  finish(ranks);
}

double LocalJob::time_launches(int iters) {
  const Driver& d = Driver::get();
  std::vector<int> all;
  for (int r = 0; r < ranks(); ++r) all.push_back(r);
  CUevent start{}, stop{};
  {
    CtxScope scope(d, ranks_[0]->ctx);
    MKC_CU(d, cuEventCreate, &start, CU_EVENT_DEFAULT);
    MKC_CU(d, cuEventCreate, &stop, CU_EVENT_DEFAULT);
    MKC_CU(d, cuEventRecord, start, ranks_[0]->stream);
  }
  for (int i = 0; i < iters; ++i) {
    ++epoch_;
    for (int r : all) enqueue(r);
  }
  float ms = 0;
  {
    CtxScope scope(d, ranks_[0]->ctx);
    MKC_CU(d, cuEventRecord, stop, ranks_[0]->stream);
  }
  finish(all);
  {
    CtxScope scope(d, ranks_[0]->ctx);
    MKC_CU(d, cuEventElapsedTime, &ms, start, stop);
    d.cuEventDestroy(start);
    d.cuEventDestroy(stop);
  }
  return ms * 1000.0 / iters;
}

}  // namespace mkc::rt
