// NVRTC works without a GPU: these compile real kernels for sm_90a and sm_80 and check what comes
// back, and check that a broken program yields NVRTC's log rather than a crash.
#include "jit/nvrtc.h"

#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>

namespace mkc::jit {
namespace {

constexpr const char* kKernel = R"(
#include <cuda/atomic>
#include "mkc_test_header.cuh"
extern "C" __global__ void bump(int* counter, float* out, const float* in, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = mkc_scale(in[i]);
  cuda::atomic_ref<int, cuda::thread_scope_device> c(*counter);
  c.fetch_add(1, cuda::memory_order_release);
}
)";

const std::vector<InMemoryHeader> kHeaders = {
    {"mkc_test_header.cuh", "__device__ inline float mkc_scale(float x) { return 2.0f * x; }\n"}};

// ELF header fields of a cubin: magic and e_machine (EM_CUDA = 190).
void check_cuda_elf(const std::string& cubin) {
  REQUIRE(cubin.size() > 64);
  CHECK(std::memcmp(cubin.data(),
                    "\x7f"
                    "ELF",
                    4) == 0);
  uint16_t machine = 0;
  std::memcpy(&machine, cubin.data() + 18, sizeof(machine));
  CHECK(machine == 190);
}

TEST_CASE("nvrtc compiles a libcu++ kernel with an in-memory header for sm_90a") {
  NvrtcOptions opts;
  opts.arch = "sm_90a";
  opts.want_ptx = true;
  const NvrtcOutput out = nvrtc_compile(kKernel, "bump.cu", opts, kHeaders);
  check_cuda_elf(out.cubin);
  CHECK(out.ptx.find(".target sm_90a") != std::string::npos);
  CHECK(out.ptx.find(".entry bump") != std::string::npos);
  CHECK(out.seconds > 0);
}

TEST_CASE("nvrtc compiles the same kernel for sm_80") {
  NvrtcOptions opts;
  opts.arch = "sm_80";
  opts.want_ptx = true;
  const NvrtcOutput out = nvrtc_compile(kKernel, "bump.cu", opts, kHeaders);
  check_cuda_elf(out.cubin);
  CHECK(out.ptx.find(".target sm_80") != std::string::npos);
}

TEST_CASE("a program that does not compile gives NVRTC's log with the line") {
  NvrtcOptions opts;
  try {
    nvrtc_compile("extern \"C\" __global__ void k() { undeclared_thing(); }\n", "broken.cu", opts);
    FAIL("compiling a broken program did not throw");
  } catch (const NvrtcCompileError& e) {
    CHECK(e.log().find("broken.cu(1)") != std::string::npos);
    CHECK(e.log().find("undeclared_thing") != std::string::npos);
    CHECK(std::string(e.what()).find("sm_90a") != std::string::npos);
  }
}

TEST_CASE("the NVRTC version is the toolkit's") {
  CHECK(nvrtc_version() >= 12000);
  CHECK_FALSE(default_include_dirs().empty());
}

}  // namespace
}  // namespace mkc::jit
