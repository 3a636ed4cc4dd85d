/* mkc's C API: the JIT API (runtime/api.h, mkc::Kernel) behind plain C functions, for callers
 * that are not C++ — Python through ctypes (bench/attention_bench.py drives mkc next to PyTorch
 * this way, on the same tensors and stream). Built as libmkc.so (//:libmkc.so).
 *
 * Every function returns 0 on success; otherwise a non-zero code (1: the caller's mistake, 2:
 * the environment or mkc) and the message in the caller's `err` buffer (truncated to err_len,
 * always terminated). Handles are opaque; mkc_free releases one. Not thread-safe per handle.
 *
 *   mkc_kernel* k;
 *   mkc_compile_file("attn.mks", "B=1,S=4096", 1, &k, err, sizeof err);
 *   mkc_bind(k, "Q", 0, q_ptr, err, sizeof err);   // dtype and shape are the schedule's
 *   mkc_launch_async(k, stream, err, sizeof err);   // a cudaStream_t / CUstream of rank 0's GPU
 *   mkc_synchronize(k, err, sizeof err);
 */
#ifndef MKC_RUNTIME_CAPI_H_
#define MKC_RUNTIME_CAPI_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mkc_kernel mkc_kernel;

/* The version of this API: 2 added mkc_inspect, mkc_compile_string and mkc_free_string; 3
 * mkc_compile_string_group; 4 mkc_tune. A caller built for another version should refuse the
 * library (python/mkc does). */
#define MKC_ABI_VERSION 4
int mkc_abi_version(void);

/* Checks, plans and generates the schedule `text` (`name` is the file name its diagnostics use)
 * for `ranks` ranks, `ranks_per_node` per node (0: one node), with `defines` as in
 * mkc_compile_file; needs no GPU and no NVRTC. *json gets a malloc'ed JSON text (release it with
 * mkc_free_string) on every return:
 *   {"ok": true, "schedule", "ranks", "ranks_per_node", "kernel_name", "summary", "paths": [...],
 *    "tensors": [{"name", "dtype", "shape", "kind": "input|output|scratch", "symmetric"}]}
 *   {"ok": false, "diagnostics": [{"severity", "kind", "message", "file", "line", "column",
 *    "hint", "notes"}], "rendered": the text `mkc check` prints}       (returns 0 too)
 *   {"ok": false, "error": message}  when the call itself failed (returns 1 or 2) */
int mkc_inspect(const char* name, const char* text, const char* defines, int ranks,
                int ranks_per_node, char** json);
void mkc_free_string(char* s);

/* mkc_compile_file for a schedule's text (`name` as in mkc_inspect) and a number of ranks per
 * node (0: $MKC_RANKS_PER_NODE, else one node). */
int mkc_compile_string(const char* name, const char* text, const char* defines, int ranks,
                       int ranks_per_node, mkc_kernel** out, char* err, int err_len);

/* A caller's all-gather of fixed-size blocks: `bytes` bytes from this process at `mine`, every
 * process's block in rank order into `all` (size x bytes): MPI_Allgather, or a torch.distributed
 * group's all_gather_into_tensor. Called collectively, in the same order in every process.
 * Returns 0, or non-zero when it failed (the call that needed it then fails, saying so). */
typedef int (*mkc_gather_fn)(void* ctx, const void* mine, size_t bytes, void* all);

/* mkc_compile_string for process `rank` of a job of `size` processes, one rank each
 * (`local_rank` of `local_size` on this host; its GPU is local_rank modulo the GPUs, shared when
 * there are fewer), which find each other through the caller's `gather` (with `ctx`): no
 * launcher variables, port or server. Every process makes the same calls in the same order
 * (compile, launches, traces). ranks_per_node as in mkc_compile_string. */
int mkc_compile_string_group(const char* name, const char* text, const char* defines, int rank,
                             int size, int local_rank, int local_size, int ranks_per_node,
                             mkc_gather_fn gather, void* ctx, mkc_kernel** out, char* err,
                             int err_len);

/* Compiles the schedule in `path` with `defines` ("NAME=VALUE,NAME=VALUE", may be empty or null;
 * each item as `mkc -D` takes it) for `ranks` ranks in this process (0: one per GPU; ranks may
 * share GPUs). */
int mkc_compile_file(const char* path, const char* defines, int ranks, mkc_kernel** out, char* err,
                     int err_len);
/* Rank `rank`'s tensor `name` at the caller's device memory `data` from the next launch on. */
int mkc_bind(mkc_kernel* k, const char* name, int rank, void* data, char* err, int err_len);
/* The device address rank `rank`'s tensor `name` has (for symmetric tensors, the job's heap). */
int mkc_data(mkc_kernel* k, const char* name, int rank, void** data, char* err, int err_len);
/* Enqueues one launch of every local rank on `stream` (rank 0's GPU; with several local ranks
 * on one GPU the same stream serves all of them). */
int mkc_launch_async(mkc_kernel* k, void* stream, char* err, int err_len);
int mkc_synchronize(mkc_kernel* k, char* err, int err_len);
/* One traced launch (waits for it): every task's start and end per CTA, written to `path` as
 * Chrome/Perfetto trace JSON, as `mkc run --trace` writes it. */
int mkc_trace(mkc_kernel* k, const char* path, char* err, int err_len);
/* Kernel::tune (docs/TUNING.md): measures the cost model's best `candidates` for each GEMM
 * without tile(...), and the other tiles of each head-dim-64 attention without one (at most
 * `budget_s` seconds, `iters` launches timed each) on this process's GPUs, stores the fastest in
 * the tuning database and rebuilds the kernel with it; bindings and tensor contents do not survive.
 * *us gets the winner's µs per launch (0: nothing to tune); `progress` (may be null) a line per
 * measurement, truncated to progress_len. Every rank must be in this process (a group's kernel is
 * refused: each process would measure). */
int mkc_tune(mkc_kernel* k, int candidates, double budget_s, int iters, double* us, char* progress,
             int progress_len, char* err, int err_len);
/* One line per task class of the kernel: the device code it runs (tensor cores or SIMT). */
int mkc_paths(mkc_kernel* k, char* out, int out_len);
void mkc_free(mkc_kernel* k);

#ifdef __cplusplus
}
#endif

#endif /* MKC_RUNTIME_CAPI_H_ */
