// For the kinds' own files: the declaration each defines (registry.cc collects them) and the
// helpers several of them share.
#pragma once

#include <algorithm>
#include <vector>

#include "compiler/kinds/kind.h"

namespace mkc::kinds {

// Defined by the kind's file, one specialisation per TaskKind (a missing one fails the link).
template <TaskKind K>
const Kind& kind();
#define MKC_KIND_DECLARE(e, name, is_comm) \
  template <>                              \
  const Kind& kind<TaskKind::e>();
MKC_TASK_KINDS(MKC_KIND_DECLARE)
#undef MKC_KIND_DECLARE

inline bool is_16bit(compiler::DType t) {
  return t == compiler::DType::kBf16 || t == compiler::DType::kF16;
}

// A view TMA can load: rows of a multiple of 16 bytes of a 16-bit type, a 16-byte aligned start.
inline bool tma_rows_ok(const View& v) {
  return (v.shape.back() * 2) % 16 == 0 && (v.offset * 2) % 16 == 0;
}

// The dynamic shared memory of the wgmma GEMM pipeline for bm x bn tiles (three warpgroups,
// templates/mkc/gemm_sm90.cuh, Shape or SwapShape, bm 8 to 128): as many stages of (A bm x 128
// bytes + B bn x 128 bytes) as fit in 192 KB, at most 8, + 256 B of header + alignment slack.
// `store_tma`: C staged for TMA stores (Shape's kStore): two 8 KB boxes per consumer warpgroup
// (one where its part of the tile is one box wide) after the ring (128 x 256: 226 KB in all).
inline int gemm_ring_bytes(int bm, int bn, bool store_tma = false) {
  const int stage = (bm + bn) * 128;
  const int boxes = (bm == 128 ? bn : bn / 2) / 64;
  const int staging = store_tma ? 2 * std::min(2, boxes) * 8192 : 0;
  return std::min(8, 196608 / stage) * stage + staging + 2048;
}

// Touches of a row range [r0, r1) of every view: the inputs read, the last view written (copy and
// map_tile).
std::vector<Touch> rows_of_every_view(const Task& t, int64_t r0, int64_t r1);

}  // namespace mkc::kinds
