// One rank of a GPU test job (tests/runtime/multiprocess_test.cc runs it under mkrun): compiles a
// schedule through the JIT API, which binds it to this process's rank of the launcher's job (the
// symmetric heap swapped through CUDA IPC), then
//   --check N      checks every tensor of this rank against the reference on fresh random data,
//                  then launches N times back to back and checks again, then 20 launches on a
//                  stream of its own (launch_async) and checks again; a symmetric tensor bound to
//                  the process's own memory must be refused (peers reach only the heap);
//   --skip-rank R  rank R constructs the kernel but never launches; the others must time out
//                  with an error naming the edge; then every rank builds a fresh kernel and checks
//                  one launch (the GPU is usable afterwards);
//   --async        with --skip-rank: the others launch with launch_async and see the timeout
//                  from synchronize().
// Prints one line per outcome ("rank R: ..."), exits 0 when this rank saw what it should.
#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "runtime/api.h"
#include "runtime/cuda_driver.h"
#include "runtime/verify.h"
#include "support/error.h"

namespace {

bool check_once(mkc::Kernel& k, int seed, const char* when) {
  bool ok = true;
  for (const mkc::rt::TensorCheck& t : mkc::rt::checked_launch(k.job(), k.plan(), {}, seed)) {
    if (!t.ok()) {
      fmt::print("rank {}: {} {} FAILED: rel. L2 error {:.2e}, {} unwritten\n", t.rank, when,
                 t.tensor, t.rel_error, t.unwritten);
      ok = false;
    }
  }
  return ok;
}

// 20 launches on a stream of this process's own, then a check.
bool check_async(mkc::Kernel& k, int me) {
  const mkc::rt::Driver& d = mkc::rt::Driver::get();
  MKC_CU(d, cuCtxSetCurrent, k.job().context(me));
  CUstream s{};
  MKC_CU(d, cuStreamCreate, &s, CU_STREAM_NON_BLOCKING);
  for (int i = 0; i < 20; ++i) k.launch_async({s});
  k.synchronize();
  MKC_CU(d, cuStreamDestroy, s);
  return check_once(k, 14, "after 20 launches on its own stream");
}

// A symmetric tensor in this process's own memory: refused, naming why.
bool symmetric_bind_refused(mkc::Kernel& k, int me) {
  for (const mkc::TensorInfo& t : k.tensors()) {
    bool symmetric = false;
    for (const auto& b : k.plan().buffers) symmetric |= b.name == t.name && b.symmetric;
    if (!symmetric) continue;
    const mkc::rt::Driver& d = mkc::rt::Driver::get();
    MKC_CU(d, cuCtxSetCurrent, k.job().context(me));
    CUdeviceptr p = 0;
    MKC_CU(d, cuMemAlloc, &p, t.elements() * mkc::compiler::dtype_bytes(t.dtype) + 256);
    bool refused = false;
    try {
      k.bind(t.name, me, reinterpret_cast<void*>(p), t.dtype, t.shape);
    } catch (const mkc::UserError& e) {
      refused = std::strstr(e.what(), "is symmetric") != nullptr;
      fmt::print("rank {}: symmetric bind of {} refused: {}\n", me, t.name, e.what());
    }
    d.cuMemFree(p);
    return refused;
  }
  return true;  // no symmetric tensor
}

}  // namespace

int main(int argc, char** argv) {
  std::string file;
  int iters = 0, skip_rank = -1;
  bool async = false;
  mkc::KernelOptions ko;
  ko.share_gpus = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool more = i + 1 < argc;
    if (a == "--check" && more) {
      iters = std::atoi(argv[++i]);
    } else if (a == "--skip-rank" && more) {
      skip_rank = std::atoi(argv[++i]);
    } else if (a == "--async") {
      async = true;
    } else if (a == "-D" && more) {
      const std::string d = argv[++i];
      const size_t eq = d.find('=');
      ko.defines[d.substr(0, eq)] = std::atoll(d.c_str() + eq + 1);
    } else {
      file = a;
    }
  }
  try {
    if (skip_rank < 0) {
      mkc::Kernel k = mkc::Kernel::from_file(file, ko);
      const int me = k.local_ranks().at(0);
      bool ok = check_once(k, 11, "first launch");
      const double us = k.time(iters);
      ok = check_once(k, 12, fmt::format("after {} launches", iters).c_str()) && ok;
      ok = check_async(k, me) && ok;
      ok = symmetric_bind_refused(k, me) && ok;
      fmt::print("rank {} of {}: {} ({} launches, {:.1f} us per launch)\n", me, k.ranks(),
                 ok ? "checks passed" : "checks FAILED", k.job().launches(), us);
      return ok ? 0 : 1;
    }
    int me = -1;
    ko.timeout_ms = 300;
    {
      mkc::Kernel k = mkc::Kernel::from_file(file, ko);
      me = k.local_ranks().at(0);
      if (me == skip_rank) {
        fmt::print("rank {}: skipping the launch\n", me);
      } else {
        try {
          if (async) {
            k.launch_async({nullptr});
            k.synchronize();
          } else {
            k.launch();
          }
          fmt::print("rank {}: FAILED: the launch finished without rank {}\n", me, skip_rank);
          return 1;
        } catch (const mkc::rt::LaunchError& e) {
          fmt::print("rank {}: timed out as it should: {}\n", me, e.what());
        }
      }
    }  // every rank leaves together (the job's destructor is a barrier)
    mkc::Kernel fresh = mkc::Kernel::from_file(file, ko);
    const bool ok = check_once(fresh, 13, "fresh kernel after the fault");
    fmt::print("rank {}: {}\n", me, ok ? "fresh kernel checks passed" : "fresh kernel FAILED");
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    fmt::print("rank ?: error: {}\n", e.what());
    return 2;
  }
}
