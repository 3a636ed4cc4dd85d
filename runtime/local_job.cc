#include "runtime/local_job.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "runtime/tensor_map.h"
#include "support/error.h"
#include "support/parallel.h"
#include "templates/mkc/abi.h"

namespace mkc::rt {
namespace {

using abi::ErrorRecord;
using abi::KernelArgs;

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

namespace {

// The element types upload and download convert from and to double.
bool convertible(compiler::DType t) {
  switch (t) {
    case compiler::DType::kBf16:
    case compiler::DType::kF16:
    case compiler::DType::kF32:
    case compiler::DType::kF64:
    case compiler::DType::kI32:
    case compiler::DType::kI64:
      return true;
    default:
      return false;
  }
}

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
  bool local = false;
  CUdevice dev{};
  CUcontext ctx{};
  CUmodule mod{};
  CUfunction fn{};
  CUstream stream{};
  CUdeviceptr heap = 0;            // buffers, then event counters; a remote rank's as mapped here
  std::vector<CUdeviceptr> bound;  // per buffer: the caller's memory (bind), or 0: the heap's
  bool ipc_mapped = false;
  CUdeviceptr buffer_table = 0;
  CUdeviceptr event_table = 0;
  CUdeviceptr tensor_maps = 0;
  CUdeviceptr trace = 0;
  ErrorRecord* error = nullptr;
  CUdeviceptr error_dev = 0;
};

namespace {

// What one process tells the others about its rank: the heap's IPC handle and the GPU it is on.
struct HeapCard {
  CUipcMemHandle handle;
  char pci_bus_id[32];
  uint64_t heap_bytes;
};

}  // namespace

LocalJob::LocalJob(const plan::Plan& plan, const std::string& cubin,
                   const codegen::Generated& kernel, LocalJobOptions options)
    : plan_(plan),
      kernel_(kernel.kernel_name),
      ctas_(kernel.ctas),
      threads_(kernel.threads),
      smem_(kernel.dynamic_smem),
      opts_(std::move(options)) {
  // A failure half way releases what was taken (the destructor does not run for a constructor
  // that throws): contexts, modules, memory, IPC mappings.
  try {
    init(cubin, kernel);
  } catch (...) {
    release(false);
    throw;
  }
}

void LocalJob::init(const std::string& cubin, const codegen::Generated& kernel) {
  const int ctas = ctas_, threads = threads_;
  const Driver& d = Driver::get();
  const int n = static_cast<int>(plan_.ranks);
  const int gpus = device_count();
  if (gpus == 0) throw EnvironmentError("no GPU: the CUDA driver sees no device");
  Rendezvous* group = opts_.group;
  if (group) {
    const World& w = group->world();
    if (w.size != n) {
      throw UserError(
          fmt::format("the plan is for {} ranks but the job has {} processes ({}); "
                      "compile with --ranks {}",
                      n, w.size, w.source, w.size));
    }
    if (!w.single_node()) {
      throw UserError(fmt::format(
          "the job spans nodes ({} ranks, {} per node): mkc reaches other nodes through its RDMA "
          "proxy, which is not built yet; run one node's ranks only",
          w.size, w.local_size));
    }
    if (w.local_size > gpus && !opts_.share_gpus) {
      throw UserError(fmt::format(
          "{} processes on a node with {} GPU(s): rank {} would share a GPU; start at most {} "
          "processes, or allow sharing (--share-gpus; for tests, ranks on one GPU take turns)",
          w.local_size, gpus, w.rank, gpus));
    }
    local_ = {w.rank};
  } else {
    if (n > gpus && !opts_.share_gpus) {
      throw UserError(fmt::format(
          "the plan is for {} ranks but this machine has {} GPU(s); compile with --ranks {}, or "
          "allow ranks to share GPUs (--share-gpus; for tests, not for speed)",
          n, gpus, gpus));
    }
    for (int r = 0; r < n; ++r) local_.push_back(r);
  }
  // Before Hopper the GEMM tile is the mma.sync one, with its own (smaller) staging.
  if (device_info(0).cc_major < 9) smem_ = kernel.portable_smem;
  // The symmetric heap: every buffer at the same offset on every rank, then the event counters.
  // 512-byte alignment covers 16-byte vector accesses and TMA's global address rule.
  auto align = [](size_t x) { return (x + 511) & ~size_t{511}; };
  for (const plan::Buffer& b : plan_.buffers) {
    offsets_.push_back(heap_bytes_);
    heap_bytes_ =
        align(heap_bytes_ + static_cast<size_t>(b.elements()) * compiler::dtype_bytes(b.dtype));
  }
  events_offset_ = heap_bytes_;
  heap_bytes_ = align(heap_bytes_ + std::max<size_t>(1, plan_.events.size()) * 8);

  for (int r = 0; r < n; ++r) ranks_.push_back(std::make_unique<Rank>());
  // The device of each local rank, and how many of this process's ranks share it.
  std::vector<int> sharing(gpus, 0);
  for (int r : local_) {
    const int slot = group ? group->world().local_rank : r;
    ranks_[r]->dev = slot % gpus;
    ++sharing[slot % gpus];
  }
  for (int r : local_) {
    Rank& rk = *ranks_[r];
    rk.local = true;
    MKC_CU(d, cuDeviceGet, &rk.dev, static_cast<int>(rk.dev));
    MKC_CU(d, cuDevicePrimaryCtxRetain, &rk.ctx, rk.dev);
    CtxScope scope(d, rk.ctx);
    MKC_CU(d, cuModuleLoadData, &rk.mod, cubin.data());
    MKC_CU(d, cuModuleGetFunction, &rk.fn, rk.mod, kernel_.c_str());
    if (smem_ > 0)
      MKC_CU(d, cuFuncSetAttribute, rk.fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem_);
    // Every CTA must be resident at once: a persistent kernel's CTAs wait on each other, and
    // ranks of this process on one GPU wait on each other too.
    int per_sm = 0, sms = 0;
    MKC_CU(d, cuOccupancyMaxActiveBlocksPerMultiprocessor, &per_sm, rk.fn, threads, smem_);
    MKC_CU(d, cuDeviceGetAttribute, &sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, rk.dev);
    const int k = sharing[static_cast<int>(rk.dev)];
    if (static_cast<int64_t>(per_sm) * sms < static_cast<int64_t>(ctas) * k) {
      throw UserError(fmt::format(
          "the kernel's {} CTAs cannot all be resident on GPU {}{} ({} per SM x {} SMs); compile "
          "with --sms {}",
          ctas, static_cast<int>(rk.dev),
          k > 1 ? fmt::format(" {} times over (it runs {} ranks)", k, k) : std::string(), per_sm,
          sms, sms / k));
    }
    MKC_CU(d, cuStreamCreate, &rk.stream, CU_STREAM_NON_BLOCKING);
    MKC_CU(d, cuMemAlloc, &rk.heap, heap_bytes_);
    MKC_CU(d, cuMemsetD8, rk.heap + events_offset_, 0, heap_bytes_ - events_offset_);
    void* host = nullptr;
    MKC_CU(d, cuMemHostAlloc, &host, sizeof(ErrorRecord),
           CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE);
    rk.error = static_cast<ErrorRecord*>(host);
    std::memset(rk.error, 0, sizeof(ErrorRecord));
    MKC_CU(d, cuMemHostGetDevicePointer, &rk.error_dev, host, 0);
    MKC_CU(d, cuCtxSynchronize);  // counters are zero before any peer can see them
  }
  // Peer access between this process's ranks on different GPUs (NVLink on mkc's machines).
  for (int a : local_) {
    CtxScope scope(d, ranks_[a]->ctx);
    for (int b : local_) {
      if (ranks_[a]->dev == ranks_[b]->dev) continue;
      int can = 0;
      MKC_CU(d, cuDeviceCanAccessPeer, &can, ranks_[a]->dev, ranks_[b]->dev);
      if (!can)
        throw EnvironmentError(
            fmt::format("GPU {} cannot access GPU {} (no P2P); mkc needs NVLink or PCIe peer "
                        "access between the GPUs of a node",
                        static_cast<int>(ranks_[a]->dev), static_cast<int>(ranks_[b]->dev)));
      const CUresult res = d.cuCtxEnablePeerAccess(ranks_[b]->ctx, 0);
      if (res != CUDA_SUCCESS && res != CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED)
        throw_cu_error(d, res, "cuCtxEnablePeerAccess", __FILE__, __LINE__);
    }
  }
  if (group) swap_heaps();
  for (auto& rk : ranks_) rk->bound.assign(plan_.buffers.size(), 0);
  map_specs_ = kernel.tensor_maps;
  write_tables();
}

CUdeviceptr LocalJob::address(int rank, int buffer) const {
  const Rank& rk = *ranks_.at(rank);
  const CUdeviceptr b = rk.bound.at(buffer);
  return b ? b : rk.heap + offsets_.at(buffer);
}

// The kernel's address tables and TMA descriptors, as seen from each local rank (one address
// space per process), written to every local rank's device copy.
void LocalJob::write_tables() {
  const Driver& d = Driver::get();
  std::vector<CUdeviceptr> buffers, events;
  for (int r = 0; r < ranks(); ++r) {
    for (size_t b = 0; b < offsets_.size(); ++b) buffers.push_back(address(r, static_cast<int>(b)));
    events.push_back(ranks_[r]->heap + events_offset_);
  }
  std::vector<CUtensorMap> maps;
  CtxScope maps_scope(d, ranks_[local_.at(0)]->ctx);
  for (const codegen::TensorMapSpec& m : map_specs_) {
    maps.push_back(
        encode_tensor_map(d, address(m.rank, m.buffer), m, plan_.buffers.at(m.buffer).name));
  }
  for (int r : local_) {
    Rank& rk = *ranks_[r];
    CtxScope scope(d, rk.ctx);
    if (!maps.empty()) {
      if (!rk.tensor_maps)
        MKC_CU(d, cuMemAlloc, &rk.tensor_maps, maps.size() * sizeof(CUtensorMap));
      MKC_CU(d, cuMemcpyHtoD, rk.tensor_maps, maps.data(), maps.size() * sizeof(CUtensorMap));
    }
    if (!rk.buffer_table)
      MKC_CU(d, cuMemAlloc, &rk.buffer_table, buffers.size() * sizeof(CUdeviceptr));
    MKC_CU(d, cuMemcpyHtoD, rk.buffer_table, buffers.data(), buffers.size() * sizeof(CUdeviceptr));
    if (!rk.event_table)
      MKC_CU(d, cuMemAlloc, &rk.event_table, events.size() * sizeof(CUdeviceptr));
    MKC_CU(d, cuMemcpyHtoD, rk.event_table, events.data(), events.size() * sizeof(CUdeviceptr));
  }
}

void LocalJob::bind(int rank, int buffer, CUdeviceptr address) {
  const Driver& d = Driver::get();
  Rank& rk = local(rank, "bind");
  const plan::Buffer& b = plan_.buffers.at(buffer);
  const size_t bytes = static_cast<size_t>(b.elements()) * compiler::dtype_bytes(b.dtype);
  const std::string what = fmt::format("bind(`{}`, rank {})", b.name, rank);
  if (address != 0) {
    if (b.symmetric && opts_.group) {
      throw UserError(fmt::format(
          "{}: `{}` is symmetric (peers read or write it), and with one process per rank the "
          "peers reach only the job's symmetric heap; fill the heap's copy in place (its address: "
          "Kernel::data) instead",
          what, b.name));
    }
    if (address % 16 != 0) {
      throw UserError(fmt::format(
          "{}: address {:#x} is not 16-byte aligned (the kernel moves 16-byte vectors, TMA needs "
          "it); bind the start of an allocation or an offset that is a multiple of 16 bytes",
          what, address));
    }
    CtxScope scope(d, rk.ctx);
    CUdeviceptr base = 0;
    size_t size = 0;
    int ordinal = -1;
    if (d.cuMemGetAddressRange(&base, &size, address) != CUDA_SUCCESS ||
        d.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, address) !=
            CUDA_SUCCESS) {
      throw UserError(fmt::format(
          "{}: {:#x} is not device memory the CUDA driver knows (a host pointer, or freed?); "
          "pass device memory (cudaMalloc, cuMemAlloc, torch.Tensor.data_ptr())",
          what, address));
    }
    if (ordinal != static_cast<int>(rk.dev)) {
      throw UserError(fmt::format("{}: {:#x} is memory of GPU {}, rank {} runs on GPU {}", what,
                                  address, ordinal, rank, static_cast<int>(rk.dev)));
    }
    if (base + size < address + bytes) {
      throw UserError(
          fmt::format("{}: the allocation holds {} bytes from {:#x}, the tensor needs {} ({}[{}])",
                      what, base + size - address, address, bytes, compiler::dtype_name(b.dtype),
                      fmt::join(b.shape, ", ")));
    }
  }
  synchronize();  // nothing in flight reads the tables while they change
  for (int r : local_) {
    CtxScope scope(d, ranks_[r]->ctx);
    MKC_CU(d, cuStreamSynchronize, ranks_[r]->stream);
  }
  const CUdeviceptr before = rk.bound[buffer];
  rk.bound[buffer] = address;
  try {
    write_tables();
  } catch (...) {
    rk.bound[buffer] = before;  // a descriptor the driver refused: keep the old binding
    write_tables();
    throw;
  }
}

// One process per rank: every process publishes its heap (an IPC handle) and its GPU's PCI bus
// id; each maps every other rank's heap, after checking that its GPU can reach that one.
void LocalJob::swap_heaps() {
  const Driver& d = Driver::get();
  Rendezvous& group = *opts_.group;
  const int me = local_.at(0);
  Rank& mine = *ranks_[me];
  CtxScope scope(d, mine.ctx);
  HeapCard card{};
  MKC_CU(d, cuIpcGetMemHandle, &card.handle, mine.heap);
  MKC_CU(d, cuDeviceGetPCIBusId, card.pci_bus_id, sizeof(card.pci_bus_id), mine.dev);
  card.heap_bytes = heap_bytes_;
  const std::vector<std::string> cards =
      group.all_gather(std::string(reinterpret_cast<const char*>(&card), sizeof(card)));
  for (int r = 0; r < ranks(); ++r) {
    if (r == me) continue;
    HeapCard peer{};
    if (cards[r].size() != sizeof(peer)) {
      throw EnvironmentError(fmt::format(
          "rank {} sent a {}-byte heap card, rank {} expects {}: are both the same mkc build?", r,
          cards[r].size(), me, sizeof(peer)));
    }
    std::memcpy(&peer, cards[r].data(), sizeof(peer));
    peer.pci_bus_id[sizeof(peer.pci_bus_id) - 1] = 0;
    if (peer.heap_bytes != heap_bytes_) {
      throw UserError(fmt::format(
          "rank {}'s symmetric heap is {} bytes, rank {}'s is {}: every rank must compile the "
          "same schedule with the same -D values",
          r, peer.heap_bytes, me, heap_bytes_));
    }
    CUdevice peer_dev{};
    MKC_CU(d, cuDeviceGetByPCIBusId, &peer_dev, peer.pci_bus_id);
    if (peer_dev != mine.dev) {
      int can = 0;
      MKC_CU(d, cuDeviceCanAccessPeer, &can, mine.dev, peer_dev);
      if (!can) {
        throw EnvironmentError(fmt::format(
            "rank {}'s GPU ({}) cannot access rank {}'s GPU ({}) (no P2P); mkc needs NVLink or "
            "PCIe peer access between the GPUs of a node",
            me, static_cast<int>(mine.dev), r, peer.pci_bus_id));
      }
    }
    MKC_CU(d, cuIpcOpenMemHandle, &ranks_[r]->heap, peer.handle,
           CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    ranks_[r]->ipc_mapped = true;
  }
}

LocalJob::~LocalJob() {
  release(true);
}

// Destructors never throw: failures here are ignored (the process is usually ending). Safe on a
// job half built: every handle is checked before it is released.
void LocalJob::release(bool barrier) {
  const Driver& d = Driver::get();
  if (ranks_.empty()) return;            // nothing taken yet
  for (const auto& [r, s] : pending_) {  // the caller's streams, launched on but not waited for
    d.cuCtxSetCurrent(ranks_[r]->ctx);
    d.cuStreamSynchronize(s);
  }
  pending_.clear();
  for (int r : local_) {
    if (!ranks_[r]->ctx) continue;
    d.cuCtxSetCurrent(ranks_[r]->ctx);
    if (ranks_[r]->stream) d.cuStreamSynchronize(ranks_[r]->stream);
  }
  // No rank frees its heap while a peer's kernel may still write into it.
  if (barrier && opts_.group) {
    try {
      opts_.group->barrier();
    } catch (const std::exception&) {
    }
  }
  // Peers' heaps were mapped in this process's (one) local rank's context.
  if (opts_.group && !local_.empty() && ranks_[local_[0]]->ctx) {
    d.cuCtxSetCurrent(ranks_[local_[0]]->ctx);
    for (auto& rk : ranks_) {
      if (rk->ipc_mapped) d.cuIpcCloseMemHandle(rk->heap);
      rk->ipc_mapped = false;
    }
  }
  for (int r : local_) {
    Rank& rk = *ranks_[r];
    if (!rk.ctx) continue;
    d.cuCtxSetCurrent(rk.ctx);
    if (rk.heap) d.cuMemFree(rk.heap);
    if (rk.buffer_table) d.cuMemFree(rk.buffer_table);
    if (rk.event_table) d.cuMemFree(rk.event_table);
    if (rk.tensor_maps) d.cuMemFree(rk.tensor_maps);
    if (rk.trace) d.cuMemFree(rk.trace);
    if (rk.error) d.cuMemFreeHost(rk.error);
    if (rk.stream) d.cuStreamDestroy(rk.stream);
    if (rk.mod) d.cuModuleUnload(rk.mod);
    d.cuDevicePrimaryCtxRelease(rk.dev);
    rk = Rank{};
  }
  d.cuCtxSetCurrent(nullptr);
}

bool LocalJob::is_local(int rank) const {
  return rank >= 0 && rank < ranks() && ranks_[rank]->local;
}

LocalJob::Rank& LocalJob::local(int rank, const char* what) const {
  if (!is_local(rank)) {
    throw UserError(fmt::format(
        "{}: rank {} {}", what, rank,
        rank < 0 || rank >= ranks()
            ? fmt::format("is not in [0, {})", ranks())
            : fmt::format("runs in another process (this one runs rank {})", local_.at(0))));
  }
  return *ranks_[rank];
}

void LocalJob::set_trace(bool on) {
  const Driver& d = Driver::get();
  synchronize();
  for (int r : local_) {
    Rank& rk = *ranks_[r];
    CtxScope scope(d, rk.ctx);
    if (on && !rk.trace) {
      MKC_CU(d, cuMemAlloc, &rk.trace, std::max<size_t>(1, plan_.tasks.size()) * 16);
    } else if (!on && rk.trace) {
      d.cuMemFree(rk.trace);
      rk.trace = 0;
    }
  }
}

std::vector<uint64_t> LocalJob::trace(int rank) {
  const Driver& d = Driver::get();
  Rank& rk = local(rank, "trace");
  synchronize();
  std::vector<uint64_t> out(plan_.tasks.size() * 2, 0);
  if (!rk.trace || out.empty()) return out;
  CtxScope scope(d, rk.ctx);
  MKC_CU(d, cuStreamSynchronize, rk.stream);
  MKC_CU(d, cuMemcpyDtoH, out.data(), rk.trace, out.size() * 8);
  return out;
}

CUcontext LocalJob::context(int rank) const {
  return local(rank, "context").ctx;
}
CUstream LocalJob::stream(int rank) const {
  return local(rank, "stream").stream;
}
CUdeviceptr LocalJob::buffer_address(int rank, int buffer) const {
  local(rank, "buffer_address");
  return address(rank, buffer);
}

void LocalJob::upload(int rank, int buffer, const std::vector<double>& values) {
  const Driver& d = Driver::get();
  const plan::Buffer& b = plan_.buffers[buffer];
  const int eb = compiler::dtype_bytes(b.dtype);
  if (!convertible(b.dtype))
    throw UserError(
        fmt::format("uploading {} data is not supported yet", compiler::dtype_name(b.dtype)));
  std::vector<unsigned char> bytes(values.size() * eb);
  parallel_for(static_cast<int64_t>(values.size()), [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
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
          break;  // not convertible: refused above
      }
    }
  });
  Rank& rk = local(rank, "upload");
  synchronize();
  CtxScope scope(d, rk.ctx);
  MKC_CU(d, cuMemcpyHtoD, address(rank, buffer), bytes.data(), bytes.size());
}

std::vector<double> LocalJob::download(int rank, int buffer) {
  const Driver& d = Driver::get();
  const plan::Buffer& b = plan_.buffers[buffer];
  const int eb = compiler::dtype_bytes(b.dtype);
  if (!convertible(b.dtype))
    throw UserError(
        fmt::format("downloading {} data is not supported yet", compiler::dtype_name(b.dtype)));
  std::vector<unsigned char> bytes(static_cast<size_t>(b.elements()) * eb);
  {
    Rank& rk = local(rank, "download");
    synchronize();
    CtxScope scope(d, rk.ctx);
    MKC_CU(d, cuMemcpyDtoH, bytes.data(), address(rank, buffer), bytes.size());
  }
  std::vector<double> out(b.elements());
  parallel_for(static_cast<int64_t>(out.size()), [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
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
          break;  // not convertible: refused above
      }
    }
  });
  return out;
}

void LocalJob::poison(int rank, int buffer) {
  const Driver& d = Driver::get();
  const plan::Buffer& b = plan_.buffers[buffer];
  Rank& rk = local(rank, "poison");
  synchronize();
  CtxScope scope(d, rk.ctx);
  MKC_CU(d, cuMemsetD8, address(rank, buffer), 0xFF,
         static_cast<size_t>(b.elements()) * compiler::dtype_bytes(b.dtype));
}

void LocalJob::enqueue(int r, CUstream stream) {
  const Driver& d = Driver::get();
  Rank& rk = *ranks_[r];
  CtxScope scope(d, rk.ctx);
  KernelArgs args{};
  args.buffers = reinterpret_cast<void* const*>(rk.buffer_table);
  args.events = reinterpret_cast<abi::u64* const*>(rk.event_table);
  args.rank = r;
  args.epoch = epoch_;
  args.timeout_ns = opts_.timeout_ns;
  args.error = reinterpret_cast<ErrorRecord*>(rk.error_dev);
  args.trace = reinterpret_cast<abi::u64*>(rk.trace);
  args.tensor_maps = reinterpret_cast<const abi::TensorMap*>(rk.tensor_maps);
  if (rk.trace) MKC_CU(d, cuMemsetD8Async, rk.trace, 0, plan_.tasks.size() * 16, stream);
  void* params[] = {&args};
  MKC_CU(d, cuLaunchKernel, rk.fn, static_cast<unsigned>(ctas_), 1, 1,
         static_cast<unsigned>(threads_), 1, 1, static_cast<unsigned>(smem_), stream, params,
         nullptr);
}

void LocalJob::finish(const std::vector<int>& which) {
  const Driver& d = Driver::get();
  for (int r : which) {
    CtxScope scope(d, ranks_[r]->ctx);
    MKC_CU(d, cuStreamSynchronize, ranks_[r]->stream);
  }
  raise_errors(which);
}

void LocalJob::raise_errors(const std::vector<int>& which) {
  for (int r : which) {
    const ErrorRecord e = *ranks_[r]->error;
    if (e.flag == 0) continue;
    std::memset(ranks_[r]->error, 0, sizeof(ErrorRecord));
    std::string where;  // the .mks line, where known
    std::string task = fmt::format("task {}", e.task), event = fmt::format("event {}", e.event);
    auto op_line = [&](int op) -> std::string {
      if (op < 0 || !opts_.file || !plan_.source->ops[op].decl) return "";
      const dsl::LineCol lc = opts_.file->line_col(plan_.source->ops[op].decl->span.begin);
      return fmt::format("{}:{}:{}", opts_.file->path(), lc.line, lc.col);
    };
    if (e.task >= 0 && e.task < static_cast<int>(plan_.tasks.size())) {
      const plan::Task& t = plan_.tasks[e.task];
      task = t.label;
      where = op_line(t.op);
      // A task of no operation (the launch's end) is named by the edge it waited for: the
      // operation of the event's producer.
      for (size_t p = 0; where.empty() && p < plan_.tasks.size(); ++p) {
        for (const plan::Signal& s : plan_.tasks[p].signals) {
          if (s.event != e.event) continue;
          const std::string at = op_line(plan_.tasks[p].op);
          if (!at.empty()) where = fmt::format("the edge of {} at {}", plan_.tasks[p].label, at);
          break;
        }
      }
    }
    if (e.event >= 0 && e.event < static_cast<int>(plan_.events.size()))
      event = plan_.events[e.event].name;
    if (e.flag == abi::kPipelineTimeout) {
      throw LaunchError(fmt::format(
          "launch {} failed on rank {}: task {} (from {}) waited {:.1f} s inside the task for its "
          "shared-memory pipeline (mbarrier of stage {}, phase {}): a TMA copy or a warpgroup of "
          "the tile never arrived; this is a bug in mkc's device code or a fault of the GPU, "
          "please report it with the schedule",
          epoch_, e.rank, task, where.empty() ? std::string("?") : where, opts_.timeout_ns / 1e9,
          e.event, e.expected));
    }
    throw LaunchError(fmt::format(
        "launch {} timed out on rank {}: task {} (from {}) waited {:.1f} s for event {} to reach "
        "{}, seen {}; "
        "a peer did not launch, or failed",
        epoch_, e.rank, task, where.empty() ? std::string("?") : where, opts_.timeout_ns / 1e9,
        event, e.expected, e.seen));
  }
}

void LocalJob::launch(const std::vector<int>& which) {
  const std::vector<int> ranks = which.empty() ? local_ : which;
  for (int r : ranks) local(r, "launch");
  synchronize();
  ++epoch_;
  for (int r : ranks) enqueue(r, ranks_[r]->stream);
  finish(ranks);
}

void LocalJob::launch_async(const std::vector<CUstream>& streams) {
  const Driver& d = Driver::get();
  if (streams.size() != local_.size()) {
    throw UserError(
        fmt::format("launch_async: {} stream(s) for {} local rank(s); give one per rank",
                    streams.size(), local_.size()));
  }
  // A wait that timed out in an earlier launch: report it now (its kernel is ending).
  for (int r : local_) {
    if (__atomic_load_n(&ranks_[r]->error->flag, __ATOMIC_ACQUIRE) != 0) synchronize();
  }
  for (size_t i = 0; i < local_.size(); ++i) {
    const CUstream s = streams[i];
    if (s == nullptr || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD) continue;
    CUcontext ctx{};
    MKC_CU(d, cuStreamGetCtx, s, &ctx);
    if (ctx != ranks_[local_[i]]->ctx) {
      throw UserError(fmt::format(
          "launch_async: stream {} (for rank {}) belongs to another context than the rank's "
          "(GPU {}'s primary context, the CUDA runtime's); create it on that GPU",
          i, local_[i], static_cast<int>(ranks_[local_[i]]->dev)));
    }
  }
  ++epoch_;
  for (size_t i = 0; i < local_.size(); ++i) {
    enqueue(local_[i], streams[i]);
    pending_.emplace_back(local_[i], streams[i]);
  }
}

void LocalJob::synchronize() {
  if (pending_.empty()) return;
  const Driver& d = Driver::get();
  const auto pending = std::move(pending_);
  pending_.clear();
  std::vector<int> which;
  for (const auto& [r, s] : pending) {
    CtxScope scope(d, ranks_[r]->ctx);
    MKC_CU(d, cuStreamSynchronize, s);
    if (std::find(which.begin(), which.end(), r) == which.end()) which.push_back(r);
  }
  raise_errors(which);
}

double LocalJob::time_launches(int iters) {
  const Driver& d = Driver::get();
  synchronize();
  const std::vector<int>& all = local_;
  Rank& first = *ranks_[all.at(0)];
  CUevent start{}, stop{};
  {
    CtxScope scope(d, first.ctx);
    MKC_CU(d, cuEventCreate, &start, CU_EVENT_DEFAULT);
    MKC_CU(d, cuEventCreate, &stop, CU_EVENT_DEFAULT);
    MKC_CU(d, cuEventRecord, start, first.stream);
  }
  for (int i = 0; i < iters; ++i) {
    ++epoch_;
    for (int r : all) enqueue(r, ranks_[r]->stream);
  }
  float ms = 0;
  {
    CtxScope scope(d, first.ctx);
    MKC_CU(d, cuEventRecord, stop, first.stream);
  }
  finish(all);
  {
    CtxScope scope(d, first.ctx);
    MKC_CU(d, cuEventElapsedTime, &ms, start, stop);
    d.cuEventDestroy(start);
    d.cuEventDestroy(stop);
  }
  return ms * 1000.0 / iters;
}

}  // namespace mkc::rt
