// rt::LocalJob's symmetric heap: one allocation per rank holding every buffer at the same
// offset, then the event counters; peers reach it through peer access (ranks of this process on
// other GPUs) or through CUDA IPC (one process per rank: handles swapped over the rendezvous).
// Also the kernel's address tables (every rank's buffers and counters as this process sees them)
// and bind(), which points a table entry at the caller's memory.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "runtime/local_job.h"
#include "runtime/local_job_internal.h"
#include "runtime/tensor_map.h"
#include "support/error.h"

namespace mkc::rt {
namespace {

// What one process tells the others about its rank: the heap's IPC handle and the GPU it is on.
struct HeapCard {
  CUipcMemHandle handle;
  char pci_bus_id[32];
  uint64_t heap_bytes;
};

}  // namespace

HeapLayout heap_layout(const plan::Plan& plan, int counters_per_rank) {
  auto align = [](size_t x) { return (x + 511) & ~size_t{511}; };
  HeapLayout h;
  for (const plan::Buffer& b : plan.buffers) {
    h.offsets.push_back(h.bytes);
    h.bytes = align(h.bytes + static_cast<size_t>(b.elements()) * compiler::dtype_bytes(b.dtype));
  }
  // Each rank's counters, numbered by slot (plan::Event): the array is as long as the most any
  // rank has, so the heaps stay symmetric.
  const size_t counters = static_cast<size_t>(counters_per_rank);
  h.events_offset = h.bytes;
  h.proxy_head_offset = h.events_offset + counters * 8;
  h.proxy_tail_offset = h.proxy_head_offset + 64;
  h.launch_offset = h.proxy_tail_offset + 64;
  h.proxy_events_offset = h.launch_offset + 64;
  h.bytes = align(h.proxy_events_offset + counters * 8);
  return h;
}

// The rank's heap with its counters zeroed, and the host-mapped record the device reports a
// failed wait in. Called with the rank's context current.
void LocalJob::allocate_heap(Rank& rk) {
  const Driver& d = Driver::get();
  MKC_CU(d, cuMemAlloc, &rk.heap, heap_bytes_);
  MKC_CU(d, cuMemsetD8, rk.heap + events_offset_, 0, heap_bytes_ - events_offset_);
  // Buffers of counters that only grow (split-K's tickets) start at zero like the events.
  for (size_t b = 0; b < plan_.buffers.size(); ++b) {
    const plan::Buffer& buf = plan_.buffers[b];
    if (buf.zeroed)
      MKC_CU(d, cuMemsetD8, rk.heap + offsets_[b], 0,
             static_cast<size_t>(buf.elements()) * compiler::dtype_bytes(buf.dtype));
  }
  void* host = nullptr;
  MKC_CU(d, cuMemHostAlloc, &host, sizeof(abi::ErrorRecord),
         CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE);
  rk.error = static_cast<abi::ErrorRecord*>(host);
  std::memset(rk.error, 0, sizeof(abi::ErrorRecord));
  MKC_CU(d, cuMemHostGetDevicePointer, &rk.error_dev, host, 0);
  MKC_CU(d, cuCtxSynchronize);  // counters are zero before any peer can see them
}

// Peer access between this process's ranks on different GPUs (NVLink on mkc's machines).
void LocalJob::enable_peer_access() {
  const Driver& d = Driver::get();
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
    // Ranks of other nodes are reached through the proxies, never mapped.
    if (r == me || plan_.crosses_node(me, r)) continue;
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

CUdeviceptr LocalJob::address(int rank, int buffer) const {
  const Rank& rk = *ranks_.at(rank);
  const CUdeviceptr b = rk.bound.at(buffer);
  return b ? b : rk.heap + offsets_.at(buffer);
}

// The kernel's address tables and TMA descriptors, as seen from each local rank (one address
// space per process), written to every local rank's device copy. A rank of another node than the
// local one has no address: its buffer entries are the buffers' heap offsets (what a proxy
// request names, abi.h KernelArgs::buffers), its counters none.
// A kernel generated with its plan's tables as data (codegen::CodegenOptions::Tables::kData)
// declares them; their bytes go into this rank's module before anything launches (write_tables
// synchronizes the context after). A table whose size differs from the module's array is a kernel
// built from another plan: refused, never copied short or past its end.
void LocalJob::load_plan_tables(const Rank& rk, const codegen::Generated& kernel) const {
  const Driver& d = Driver::get();
  for (const codegen::TableImage& t : kernel.tables) {
    CUdeviceptr at = 0;
    size_t bytes = 0;
    MKC_CU(d, cuModuleGetGlobal, &at, &bytes, rk.mod, t.symbol.c_str());
    if (bytes != t.bytes.size()) {
      throw InternalError(fmt::format(
          "kernel `{}`: its table `{}` holds {} bytes, the plan's {}: the cubin was not built from "
          "this plan's source",
          kernel_, t.symbol, bytes, t.bytes.size()));
    }
    MKC_CU(d, cuMemcpyHtoD, at, t.bytes.data(), bytes);
  }
}

void LocalJob::write_tables() {
  const Driver& d = Driver::get();
  const auto tables_of = [&](int me, std::vector<CUdeviceptr>* buffers,
                             std::vector<CUdeviceptr>* events) {
    for (int r = 0; r < ranks(); ++r) {
      const bool remote = plan_.crosses_node(me, r);
      for (size_t b = 0; b < offsets_.size(); ++b)
        buffers->push_back(remote ? offsets_[b] : address(r, static_cast<int>(b)));
      events->push_back(remote ? 0 : ranks_[r]->heap + events_offset_);
    }
  };
  std::vector<CUtensorMap> maps;
  CtxScope maps_scope(d, ranks_[local_.at(0)]->ctx);
  for (const codegen::TensorMapSpec& m : map_specs_) {
    maps.push_back(
        encode_tensor_map(d, address(m.rank, m.buffer), m, plan_.buffers.at(m.buffer).name));
  }
  for (int r : local_) {
    Rank& rk = *ranks_[r];
    std::vector<CUdeviceptr> buffers, events;
    tables_of(r, &buffers, &events);
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
    // Pageable copies may still be in flight when they return, and the kernel's non-blocking
    // stream does not wait for them.
    MKC_CU(d, cuCtxSynchronize);
  }
}

void LocalJob::bind(int rank, int buffer, CUdeviceptr address) {
  const Driver& d = Driver::get();
  Rank& rk = local(rank, "bind");
  const plan::Buffer& b = plan_.buffers.at(buffer);
  const size_t bytes = static_cast<size_t>(b.elements()) * compiler::dtype_bytes(b.dtype);
  const std::string what = fmt::format("bind(`{}`, rank {})", b.name, rank);
  if (address != 0 && proxied_) {
    // The proxies read and write ranks' heaps only.
    for (const plan::Task& t : plan_.tasks) {
      if (!plan_.writes_other_node(t)) continue;
      for (const plan::View& v : t.views) {
        if (v.buffer == buffer) {
          throw UserError(fmt::format(
              "{}: `{}` crosses nodes (task `{}` sends it through the proxy, which reaches only "
              "the job's symmetric heap); fill the heap's copy in place (its address: "
              "Kernel::data) instead",
              what, b.name, t.label));
        }
      }
    }
  }
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
  // What is bound already (a framework passing the same tensors at every launch): the tables
  // stay as they are, so no wait for the launches in flight.
  if (rk.bound[buffer] == address) return;
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

}  // namespace mkc::rt
