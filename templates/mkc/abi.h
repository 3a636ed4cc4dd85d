// The host/device ABI of a generated kernel, defined once: the kernel's argument block, the error
// record, the task tables (views, waits, signals, task records) and every task kind's integer
// arguments. Host code (compiler/passes/lower.cc builds the arguments, compiler/oracle/interpret.cc
// and compiler/codegen/codegen.cc read them, runtime/ fills the argument block and reads the error
// record) and device code (templates/mkc/*.cuh, compiled by NVRTC) include this one header, so a
// field added, moved or retyped here changes both sides at once; the static_asserts at the end pin
// the layout the generated tables and the runtime rely on.
//
// Plain C++ only: no standard headers (NVRTC compiles it without the host library), no pointers
// whose width differs between host and device, 64-bit integers for everything a task reads.
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define MKC_ABI_FN __host__ __device__ __forceinline__
#else
#define MKC_ABI_FN inline
#endif

namespace mkc {
namespace abi {

typedef unsigned long long u64;
typedef long long i64;

// The most dimensions a view or a box has (buffers have at most this many).
constexpr int kMaxDims = 6;

// A contiguous sub-tensor of a buffer on some rank: the buffer at a flat element offset, viewed
// with `shape` (the first `ndim` entries; the rest are 1).
struct View {
  int rank;
  int buffer;
  i64 offset;
  int ndim;
  i64 shape[kMaxDims];
};

// A task waits until the counter `event` (on its own rank) reaches (epoch - lag) * count, where
// epoch is the launch's number (from 1) as the kernel reads it from KernelArgs::launches. Counters
// are numbered per rank (plan::Event::slot): `event` indexes the rank's own counter array, whose
// length is the most counters any rank has (KernelArgs::events). With
// `proxy` set the event is also raised from other nodes: the count is the sum of the counter and
// this rank's proxy counter of the same index (KernelArgs::proxy_events, in device memory).
struct Wait {
  int event;
  int count;
  int lag;
  int proxy;
};

// How a signal reaches its counter (compiler/plan/plan.h, HandOff).
enum SignalScope : int {
  kScopeGpu = 0,     // a counter on this GPU: release add at .gpu
  kScopeSystem = 1,  // a peer GPU's counter over NVLink: release add at .sys
  kScopeProxy = 2,   // a rank of another node: a request to this rank's proxy (bytes 0), which
                     // raises that rank's proxy counter `event`
};

struct Signal {
  int event;  // the counter's slot in `rank`'s array
  int rank;
  int scope;
};

// What gave up, in ErrorRecord::kind.
enum ErrorKind : unsigned {
  kNoError = 0,
  kWaitTimeout = 1,      // an event wait passed its deadline: a peer did not launch or failed
  kPipelineTimeout = 2,  // a shared-memory pipeline wait (mbarrier) inside a task passed it
  kProxyTimeout = 3,     // the proxy took no ring entry before it: full ring, or a stopped proxy
                         // (event: -1; expected: the entry waited for; seen: the ring's tail)
};

// Written once per launch, by the first CTA that gives up (host-mapped memory); the host turns it
// into an exception naming the task, the event and the .mks line.
struct ErrorRecord {
  unsigned flag;  // an ErrorKind; 0: no error
  int rank;
  int task;
  int event;  // the event waited for, or for kPipelineTimeout the mbarrier's stage
  u64 expected;
  u64 seen;
};

// A host-built CUtensorMap (runtime/tensor_map.h): 128 opaque bytes, 64-byte aligned.
struct alignas(64) TensorMap {
  u64 raw[16];
};

// ---- the host proxy: edges to other nodes ------------------------------------------------------
// Each rank has one ring of requests in host-mapped memory. A comm CTA that feeds an edge to a rank
// on another node claims entry n (atomic add on KernelArgs::proxy_head, in device memory), waits
// until n - tail < kProxySlots (the proxy's credits: a full ring makes it wait, with the task's
// deadline, never overwrite), writes the request, then publishes it by storing seq = n + 1 with a
// release at system scope. The rank's proxy thread (runtime/net/proxy.h) takes entries in order: it
// moves `bytes` from the sending rank's symmetric heap to the destination rank's, through the
// transport (TCP or RDMA), and once they are visible in the destination GPU's memory, adds 1 to the
// destination rank's proxy counter `event`; then it advances `tail`.
// The kernel polls only device memory: the proxy counters and a copy of `tail` live in the rank's
// heap (KernelArgs::proxy_events, proxy_tail), and the proxy writes them with stream memory
// operations ordered after its copies. Polling host-mapped words from many CTAs at once made
// every PCIe read wait behind the others, the proxy's own copies too (docs/NET.md).
constexpr int kProxySlots = 1024;

struct ProxyRequest {
  u64 seq;         // n + 1 once entry n is complete (the proxy reads it first, acquire)
  i64 src_offset;  // bytes into the sending rank's symmetric heap
  i64 dst_offset;  // bytes into the destination rank's symmetric heap
  i64 bytes;       // 0: a signal only
  int dst_rank;
  int event;  // the destination rank's proxy counter to add 1 to after the bytes (-1: none)
  u64 reserved[3];
};

struct ProxyRing {
  u64 head;  // unused by the kernel (its claims count in KernelArgs::proxy_head)
  u64 pad0[7];
  u64 tail;  // entries the proxy has taken (the host's copy; the device reads
             // KernelArgs::proxy_tail)
  u64 pad1[7];
  ProxyRequest entries[kProxySlots];
};

// The kernel's one parameter.
struct KernelArgs {
  void* const* buffers;          // [ranks * buffers]: this process's address of each rank's buffer
  u64* const* events;            // [ranks]: each rank's counter array, mapped here
  int rank;                      // the rank this launch runs
  u64 epoch;                     // the host's launch count (for its messages; the kernel
                                 // counts its own launches in `launches`)
  u64 timeout_ns;                // a task's deadline: its waits and pipeline waits, together
  ErrorRecord* error;            // host-mapped
  u64* trace;                    // optional: [tasks * 2] start/end %globaltimer, or null
  const TensorMap* tensor_maps;  // the plan's TMA descriptors (device memory), or null
  ProxyRing* proxy;              // this rank's ring to its proxy (host-mapped), or null
  u64* proxy_events;             // this rank's proxy counters (device memory), or null
  u64* proxy_head;               // the ring's claim counter (device memory: claims are device
                                 // atomics, not PCIe ones), or null
  u64* proxy_tail;               // the ring's tail as the proxy last wrote it (device memory)
  const char* heap;              // this rank's symmetric heap: proxy offsets are relative to it
  // This rank's launch record (device memory, zero at load): [0] the launches completed, [1] the
  // CTAs of the running launch that have left. Each CTA reads [0] + 1 as the launch's number when
  // it starts, and the last CTA to leave stores it: the number lives on the GPU, not in these
  // arguments, so a launch captured in a CUDA graph counts on every replay.
  u64* launches;
};
// In `buffers`, a rank of another node has no address here: its entries hold the buffers' heap
// offsets (the heaps are symmetric), which is what a proxy request's dst_offset is.

// One task of the generated table kTasks: its class (the task_class_<n> it runs, -1: no body)
// and where its views, arguments, waits and signals start in the other tables.
struct TaskRecord {
  int cls;
  int view0, nviews;
  int arg0, nargs;
  int wait0, nwaits;
  int sig0, nsigs;
};

// ---- task arguments, one struct per task kind (compiler/plan/plan.h, MKC_TASK_KINDS) ---------
// Every field is a 64-bit integer, so a task's arguments are a flat array of them (Task::args on
// the host, kArgs + arg0 on the device). Kinds whose arguments have a variable length (boxes of
// any rank) start with a fixed part and continue with encoded ranges (see Range below).

// No device function (an epilogue or map function index).
constexpr i64 kNoFn = -1;
// No tensor map (codegen fills map indices only for tiles it gives the TMA path).
constexpr i64 kNoMap = -1;

// gemm_tile: views {A, B, C[, bias][, partials, tickets]}. C[m0:m1, n0:n1] = fn(A[m0:m1, k0:k1] x
// B[k0:k1, n0:n1] (+ bias)). k0 is a multiple of 64. A split-K part (parts > 1: K cut into
// `parts` ranges, this task's is [k0, k1)) stores its f32 sums in its slice `part` of partials
// [parts, M, N], then takes a ticket from tickets (i64, zero at load, counts that only grow): the
// part that completes the tile's count of the launch sums every part's slice and writes C with
// bias and fn (templates/mkc/split_k.cuh). tickets holds two counters per tile, one
// per half of it (the two consumer warpgroups of the TMA tile), at 2 * tile and 2 * tile + 1.
struct GemmTileArgs {
  i64 m0, m1, n0, n1;
  i64 k_step;    // the K step of the tile (tile(.., .., k))
  i64 fn;        // epilogue device function, or kNoFn
  i64 has_bias;  // 1: views[3] is the bias [N]
  i64 map_a;     // TMA descriptors of A and B (indices into KernelArgs::tensor_maps), or kNoMap
  i64 map_b;
  i64 k0, k1;  // the part of K this task sums over: [k0, k1)
  i64 parts;   // split-K parts of the tile (1: not split)
  i64 part;    // this task's part, in [0, parts)
  i64 tile;    // the tile's index into tickets (its counters at 2 * tile and 2 * tile + 1)
  // 1: half of a 2-CTA cluster pair (templates/mkc/gemm_sm90.cuh, gemm_pair): rows m0.. of the
  // pair's two row blocks, the other half on the partner CTA at the same place in its list, the
  // two sharing B's columns n0..n1 by TMA multicast; 0: a tile of its own.
  i64 cluster;
  // TMA descriptor of C (64 x 64 boxes) when the tile stores C through shared memory and TMA
  // (gemm_sm90.cuh's store_tile_tma; assigned by code generation like map_a), or kNoMap.
  i64 map_c;
};

// grouped_gemm_tile: views {X, W, Y, counts}. Rows of X are grouped by group in order; counts
// (summed over its leading dims) says how many rows each group has, known only at run time. Each
// group's rows are cut into tiles of `bm` rows and the columns into blocks of `bn`; the work items
// (tile, column block) are numbered in group order, within a group by column block, then by tile.
// The operation's `workers` tasks share the items: task `worker` computes items worker,
// worker + workers, ... below the run-time total: Y[rows, cols] = fn(X[rows, :] x W[group, :,
// cols]). Counts are clamped to [0, capacity of X and Y].
struct GroupedGemmTileArgs {
  i64 worker, workers;
  i64 bm, bn;
  i64 fn;
  i64 map_x;  // TMA descriptors of X (2-D, bm x 64 boxes) and W (3-D, 64 x 64), or kNoMap
  i64 map_w;
};

// map_tile: views {X1, ..., Xn, Y}: Y = fn(X1, ..., Xn) on rows [r0, r1) of the leading dim.
struct MapTileArgs {
  i64 r0, r1;
  i64 fn;
};

// copy: views {X, Y}: Y = X on rows [r0, r1) of the leading dim.
struct CopyArgs {
  i64 r0, r1;
};

// reduce ops, as ReduceTileArgs::op and ReduceSlotsArgs::op.
enum ReduceOp : i64 { kSum = 0, kMax = 1, kMin = 2 };

// reduce_tile: views {X, Y}: elements [y0, y1) of Y (flat) = op over `axis` of X.
struct ReduceTileArgs {
  i64 y0, y1;
  i64 axis;
  i64 op;
};

// attention_tile: views {Q, K, V, O[, acc, max, sum]}, Q, K, V, O as [L, S, D] (leading dims
// flattened to L). Queries [q0, q1) of slice l against every key; with accumulate, the online
// softmax state (f32 compiler scratch) carries over the instances of one declaration: `first`
// sets it up, `last` writes O. Causal: key j is visible to query i when j <= i + causal_offset
// (q_start - k_start of the schedule: where the slices sit in the whole sequence, per rank).
struct AttentionTileArgs {
  i64 l;
  i64 q0, q1;
  i64 causal;
  i64 causal_offset;
  i64 accumulate;
  i64 first;
  i64 last;
  i64 scale_bits;  // the softmax scale, a double's bits
  i64 map_q;       // TMA descriptors of the Q, K and V views ([L, S, D], 3-D), or kNoMap
  i64 map_k;
  i64 map_v;
  // Keys per block asked for (`tile(q, 192)`), 0 for the compiler's choice: the tensor-core tile
  // at head dim 64 walks blocks of 192 keys when this is 192, else of 128 (its template argument
  // says which; compiler/kinds/attention_tile.cc); the SIMT tile ignores it.
  i64 key_block;
  // Queries per tile of the op (its tasks' q1 - q0 but for the last, ragged one): at head dim 64
  // the tensor-core tile runs 192 of them in three consumer warpgroups (512 threads a CTA) when
  // this is 192, else 128 in two (384 threads).
  i64 query_block;
  // Packed sequences (`attention(..., seqlens = L)`): the index of the view holding L, i32 [n + 1]
  // cumulative lengths (non-decreasing within [0, S]), or 0 for one sequence per slice. Key j is
  // then visible to query i only where both lie in one sequence [L[d], L[d + 1]) (and, causal,
  // j <= i); rows outside [L[0], L[n]) are padding: each slice holds n packed sequences, as
  // FlashAttention's varlen calls take them.
  i64 seqlens;
};

// The tensor-core attention tile's ring, one home for the kind's launch (compiler/kinds/
// attention_tile.cc) and the template (attention_sm90.cuh, AttnShape): K and V stages at head dim
// d with key blocks of kb keys and query tiles of bq (128, or 192 at head dim 64), the dynamic
// shared memory (a 2048-byte header, two Q slots of bq queries, the stages of K then V) and the
// threads (a producer warpgroup and one consumer warpgroup per 64 queries).
constexpr MKC_ABI_FN int attention_stages(int d, int kb) {
  return d == 128 ? 2 : kb == 128 ? 4 : 3;
}
constexpr MKC_ABI_FN int attention_smem_bytes(int d, int kb, int bq) {
  return 2048 + 2 * bq * d * 2 + attention_stages(d, kb) * 2 * kb * d * 2;
}
constexpr MKC_ABI_FN int attention_threads(int bq) {
  return 128 + 2 * bq;
}
// The mma.sync attention tile (attention_sm80.cuh: GPUs without wgmma) at head dim d: keys per
// block, and its dynamic shared memory at `threads` threads (two stages of K and V, then 16 rows
// of Q per warp, rows padded by 8 elements): at most 87,168 bytes, under the 99 KB of sm_86/89.
constexpr MKC_ABI_FN int attention_portable_keys(int d) {
  return d > 64 ? 32 : 64;
}
constexpr MKC_ABI_FN int attention_portable_smem_bytes(int d, int threads) {
  return (4 * attention_portable_keys(d) + 16 * (threads / 32)) * (d + 8) * 2 + 128;
}
static_assert(attention_portable_smem_bytes(128, attention_threads(128)) == 87168 &&
                  attention_portable_smem_bytes(64, attention_threads(192)) <= 87168,
              "the mma.sync attention tile fits an sm_86/89 CTA (99 KB)");

// signal: no views.
struct SignalArgs {
  i64 peer;
};

// a2a_counts on rank s: views {route_s, xcounts_d for every rank d}: counts s's rows per expert
// and writes that row into every rank's xcounts[s].
struct A2aCountsArgs {
  i64 experts;
  i64 k;  // experts per token (route's second dim)
};

// a2a_send on rank s: views {X_s, route_s, xcounts_s, Y_d..., origin_d...}: rows [r0, r1) of X go
// to their experts' ranks, at the place the expert-major, then source-rank, then source-row order
// gives them.
struct A2aSendArgs {
  i64 r0, r1;
  i64 experts;
  i64 k;
};

// a2a_finish on rank d: views {xcounts_d, counts_d}: counts[s, e] = xcounts[s, d * E / R + e].
struct ExpertsArgs {
  i64 experts;
};

// combine_send on rank d: views {Y_d, origin_d, xcounts_d, back_s...}: part `part` of `parts` of
// the received rows (known at run time: [total * part / parts, total * (part + 1) / parts)) goes
// back to back_s[t, k] of its origin.
struct CombineSendArgs {
  i64 experts;
  i64 part, parts;
};

// combine_reduce on rank s: views {back_s, W_s (or back_s), Out_s}: Out[t] = sum_k W[t, k] *
// back[t, k] for rows [r0, r1).
struct CombineReduceArgs {
  i64 r0, r1;
  i64 has_weights;
};

// ---- ranges: boxes of any rank inside the argument array --------------------------------------
// A range is encoded as {n, lo[n], hi[n]}: the box [lo, hi) over n dimensions.
//
// send: views {src, dst}; args {range[, dst range]}: copies the box of src (view coordinates) to
// the box of the same extents at dst range's lo (default: the same lo) of dst, on any rank.
// reduce_slots: views {own, slots [R, ...], out}; args {ReduceSlotsHead, x range, slot range}:
// out[box] = op(own[x box], slots[s][slot box] for every s != self); out's box is the x box when
// out_in_x_coords (all-reduce), else the slot box (reduce-scatter).
struct ReduceSlotsHead {
  i64 op;
  i64 self;
  i64 out_in_x_coords;
};

// A range read back from the argument array.
struct Range {
  int n;
  const i64* lo;
  const i64* hi;
};

// The range at args[*pos]; advances *pos past it.
MKC_ABI_FN Range read_range(const i64* args, int* pos) {
  Range r;
  r.n = static_cast<int>(args[*pos]);
  r.lo = args + *pos + 1;
  r.hi = args + *pos + 1 + r.n;
  *pos += 1 + 2 * r.n;
  return r;
}

// Arguments of every fixed-layout kind are whole 64-bit words: the tables are arrays of them.
static_assert(sizeof(GemmTileArgs) == 16 * 8, "gemm_tile has 16 arguments");
static_assert(sizeof(GroupedGemmTileArgs) == 7 * 8, "grouped_gemm_tile has 7 arguments");
static_assert(sizeof(MapTileArgs) == 3 * 8, "map_tile has 3 arguments");
static_assert(sizeof(CopyArgs) == 2 * 8, "copy has 2 arguments");
static_assert(sizeof(ReduceTileArgs) == 4 * 8, "reduce_tile has 4 arguments");
static_assert(sizeof(AttentionTileArgs) == 15 * 8, "attention_tile has 15 arguments");
static_assert(sizeof(SignalArgs) == 8, "signal has 1 argument");
static_assert(sizeof(A2aCountsArgs) == 2 * 8, "a2a_counts has 2 arguments");
static_assert(sizeof(A2aSendArgs) == 4 * 8, "a2a_send has 4 arguments");
static_assert(sizeof(ExpertsArgs) == 8, "a2a_finish has 1 argument");
static_assert(sizeof(CombineSendArgs) == 3 * 8, "combine_send has 3 arguments");
static_assert(sizeof(CombineReduceArgs) == 3 * 8, "combine_reduce has 3 arguments");
static_assert(sizeof(ReduceSlotsHead) == 3 * 8, "reduce_slots starts with 3 arguments");
// The generated tables are brace-initialised in this field order.
static_assert(sizeof(View) == 8 + 8 + 8 + 8 * kMaxDims, "View: rank, buffer, offset, ndim, shape");
static_assert(sizeof(Wait) == 16 && sizeof(Signal) == 12, "Wait is four ints, Signal three");
static_assert(sizeof(TaskRecord) == 9 * 4, "a task record is nine ints");
static_assert(sizeof(ErrorRecord) == 4 * 4 + 2 * 8, "the error record the host reads");
static_assert(sizeof(TensorMap) == 128, "a CUtensorMap is 128 bytes");
static_assert(sizeof(void*) == 8, "the kernel argument block assumes 64-bit pointers");
static_assert(sizeof(KernelArgs) == 14 * 8, "the kernel argument block is fourteen 8-byte words");
static_assert(sizeof(ProxyRequest) == 64, "a proxy request is one 64-byte line");
static_assert(sizeof(ProxyRing) == 128 + 64 * kProxySlots, "head and tail on lines of their own");

}  // namespace abi
}  // namespace mkc
