// Every task kind's device code, one header per stage kind (compiler/plan/plan.h, MKC_TASK_KINDS):
//   movement.cuh        copy, send (every put, shift and collective data phase)
//   reduce.cuh          reduce_tile, reduce_slots
//   gemm_simt.cuh       gemm_tile (SIMT fallback; gemm_sm90/sm80 are fast)
//   split_k.cuh         gemm_tile's split-K parts: the ticket and the fused reduction
//   grouped_gemm.cuh    grouped_gemm_tile: its tile from the counts, SIMT fallback
//   (grouped_gemm_sm90 is fast)
//   attention_simt.cuh  attention_tile (SIMT fallback; attention_sm90/sm80 are fast)
//   moe.cuh             a2a_counts, a2a_send, a2a_finish, combine_send, combine_reduce
// built on views.cuh (addressing), sync.cuh (waits, signals, deadlines, errors), abi.h (the
// host/device ABI) and types.cuh (element types). Each task function takes the kernel arguments,
// the task's views and its arguments (the kind's struct in abi.h).
// Compiled by NVRTC only.
#pragma once

#include "mkc/attention_simt.cuh"
#include "mkc/gemm_simt.cuh"
#include "mkc/grouped_gemm.cuh"
#include "mkc/map.cuh"
#include "mkc/moe.cuh"
#include "mkc/movement.cuh"
#include "mkc/reduce.cuh"
#include "mkc/split_k.cuh"
