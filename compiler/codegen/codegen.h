// Code generation: a scheduled plan becomes the CUDA C++ source of one persistent kernel.
//
// The source includes mkc's device templates (templates/mkc/*.cuh, handed to NVRTC from memory),
// the schedule's device functions under `#line` directives (so NVRTC's errors point into the .mks
// file), one short named function per task class (a task kind with its element types and device
// function), the plan's tables (per rank: each CTA's task list, each task's views, arguments,
// waits and signals; constant arrays in the source, or data the runtime copies in), and the kernel:
// each CTA walks its list, waiting, running and signalling. Deterministic: the same plan gives
// byte-identical source, so the JIT cache hits.
#pragma once

#include <string>
#include <vector>

#include "compiler/plan/plan.h"
#include "dsl/source.h"

namespace mkc::codegen {

struct CodegenOptions {
  // The schedule's file (for #line and the source hash) and the -D values it was compiled with.
  std::shared_ptr<const dsl::SourceFile> file;
  std::string defines;  // "M=128 N=256", for the banner
  // GEMM tiles whose operands allow it (bf16/f16, rows 16-byte aligned) use the TMA + wgmma
  // template (templates/mkc/gemm_sm90.cuh; on targets without wgmma it falls back to the portable
  // tile). false: every GEMM uses the portable tile.
  bool tensor_core_gemm = true;
  // The NVRTC target (support/arch.h), for the tiles Generated::paths names; not in the source.
  std::string arch = "sm_90a";
  // Where the plan's tables live (docs/COMPILER.md, "The plan's tables"). kSource: constant arrays
  // in the source, compiled by NVRTC with the code (NVRTC's time and memory then grow with tasks x
  // ranks). kData: the source declares them, sized; Generated::tables holds their bytes, which the
  // runtime copies into the loaded module before the first launch, so the code compiles (and
  // caches) the same whatever the plan's size. The pipeline takes it from MKC_TABLES.
  enum class Tables { kSource, kData };
  Tables tables = Tables::kSource;
  // The kernel of one rank (issue 35): its tasks only, numbered from 0 in the plan's order
  // (Generated::task_ids), its CTA lists and its tensor maps; the plan needs that rank's tasks
  // (a plan of its neighbourhood will do: plan::LowerOptions::ranks). Launched with
  // KernelArgs::rank = this rank, by a process running that rank alone. Tables as data are
  // declared a power of two long, so ranks whose tables differ by a few entries share one source
  // (and one cubin). -1: every rank's tables, the rank picked at launch.
  int64_t rank = -1;
};

// One table of a kernel built with CodegenOptions::Tables::kData: a `__device__` array of the
// module (C linkage, `symbol`) and the bytes it must hold before the kernel runs.
struct TableImage {
  std::string symbol;
  std::string bytes;
};

// A TMA descriptor the kernel needs: a 2-D row-major view (rows x cols elements, row stride
// cols) of a buffer of some rank, starting `offset` elements in, loaded in boxes of
// box_rows x box_cols with 128-byte swizzle. The runtime encodes one CUtensorMap per entry, in
// this order, and passes the array as KernelArgs::tensor_maps.
struct TensorMapSpec {
  int rank = 0;
  int buffer = 0;
  int64_t offset = 0;
  compiler::DType dtype = compiler::DType::kBf16;
  int64_t rows = 0, cols = 0;
  int dims = 2;  // 2: [rows][cols]; 3: [depth][rows][cols] (boxes of one slice), the TMA
                 // instruction the device code issues (a 3-D load needs a 3-D map, even
                 // of one slice)
  int64_t depth = 1;
  int box_rows = 0, box_cols = 0;
  bool operator<(const TensorMapSpec& o) const;
};

struct Generated {
  std::string source;
  std::string kernel_name;   // mkc_<schedule>
  uint64_t source_hash = 0;  // of the .mks text, defines and world size
  int threads = 256;         // block size the kernel is built for
  int ctas = 0;              // grid size
  int dynamic_smem = 0;      // bytes of dynamic shared memory per CTA (Hopper, sm_90a)
  // An upper bound of the kernel's static shared memory (kinds::Source::static_smem_bound):
  // dynamic_smem fits beside it.
  int static_smem_bound = 0;
  int portable_smem = 0;  // the same on GPUs before Hopper (the mma.sync tile's stages)
  // CTAs per cluster on Hopper (1, or 2 for paired GEMM tiles: the grid is launched in clusters
  // of 2 with cuLaunchKernelEx; before Hopper the kernel runs the portable tiles, unclustered).
  int cluster = 1;
  std::vector<TensorMapSpec> tensor_maps;
  // Per task class, the device code it runs ("gemm_tile: sm_90a wgmma + TMA 128x256 ..."), for the
  // compile summary.
  std::vector<std::string> paths;
  // With CodegenOptions::Tables::kData: the tables to copy into the module, in the source's
  // order; empty when they are in the source.
  std::vector<TableImage> tables;
  // The rank it was generated for (CodegenOptions::rank), or -1 for every rank; with a rank,
  // task_ids[i] is the plan's index of the kernel's task i (the device's error record and trace
  // number tasks the kernel's way). Empty for every rank: the kernel numbers tasks as the plan.
  int64_t rank = -1;
  std::vector<int> task_ids;
  // How many tasks the kernel holds.
  size_t task_count(const plan::Plan& p) const {
    return task_ids.empty() ? p.tasks.size() : task_ids.size();
  }
};

Generated generate(const plan::Plan& plan, const CodegenOptions& options);

}  // namespace mkc::codegen
