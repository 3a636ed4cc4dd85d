// Tuning on this process's GPUs: the measurement behind `mkc tune`, `mkc run` under MKC_TUNE=on
// and Kernel::tune() (docs/TUNING.md). One home for all three: the search and the database are
// tune/'s; what a measurement is (the schedule recompiled with a trial's knobs, JIT-compiled,
// run on random inputs, timed over back-to-back launches) is here.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>

#include "compiler/pipeline.h"
#include "compiler/sema/check.h"
#include "dsl/source.h"
#include "tune/apply.h"

namespace mkc::rt {

struct TuneRunOptions {
  compiler::CheckOptions check;  // the world and SMs the kernels are built for
  std::string defines_text;      // as compile_file takes it (the summary's)
  std::string arch;              // the GPU's, as the JIT compiles for it
  bool share_gpus = false;       // more ranks than GPUs in this process
  int iters = 20;                // launches timed per measurement
  tune::SearchOptions search;
};

// What a tuning found: the winner and the database key it belongs under.
struct Tuned {
  tune::Key key;
  tune::Entry entry;
};

// Tunes schedule `index` of `file` (every rank in this process): the search of tune/apply.h over
// its GEMMs without tile(...), each candidate measured here. Returns the winner with its key, or
// nothing when the schedule has no GEMM to tune. Progress lines go to `progress`. Throws
// UserError when the schedule does not compile, EnvironmentError for the GPU.
std::optional<Tuned> tune_schedule(std::shared_ptr<const dsl::SourceFile> file, size_t index,
                                   const TuneRunOptions& options, std::ostream& progress);

}  // namespace mkc::rt
