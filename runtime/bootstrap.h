// Bootstrap: how one process of a job learns its place in it, and how the processes first talk.
//
// detect_world() reads the launcher's environment — mkc's own MKC_* variables (set by hand or by a
// program), torchrun's (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT;
// `mkrun` sets the same), Open MPI's (OMPI_COMM_WORLD_*) or Slurm's (SLURM_PROCID, SLURM_NTASKS,
// SLURM_LOCALID, ...) — in that order of precedence; with none of them the process is a job of one.
//
// Rendezvous is a TCP star around rank 0 (MASTER_ADDR:MASTER_PORT) that the runtime uses to swap
// small blobs (memory handles, queue-pair numbers) before any GPU traffic: all_gather() and
// barrier(). Every step has a deadline; a rank that never comes, or goes away, is named in the
// error instead of a hang. A program that already has a process group (MPI, torch.distributed)
// gives its all-gather instead (BlockGatherFn), and no port or server is involved.
//
// Who may join: rank 0 listens on MASTER_ADDR's address only (loopback, 127.0.0.1, when the job
// names none: a one-host job), not on every interface. A rank introduces itself with the job's
// token, MKC_JOB_TOKEN (mkrun generates one per job and gives it to its ranks; with another
// launcher, export the same random value to every rank); rank 0 drops a connection whose token
// differs, and gives each connection a few seconds to introduce itself, so a stray or silent one
// neither joins nor stalls the job. Without a token, what protects the job is that address, the
// job's port, and the world size and rank a connection must state: any process that can reach
// MASTER_ADDR:MASTER_PORT first could take a rank's place (docs/API.md).
#pragma once

#include <netinet/in.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace mkc::rt {

struct World {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string source = "single process";  // which launcher's variables were used
  std::string token;                      // MKC_JOB_TOKEN: what a rank shows rank 0 to join
  bool single_node() const { return local_size == size; }
};

// getenv, or a map in tests.
using EnvFn = std::function<const char*(const char*)>;

// Throws UserError naming the variables when they are incomplete or inconsistent (a rank outside
// the world, a local rank outside the node, a bad number, multi-node without MASTER_ADDR).
World detect_world(const EnvFn& env);
World detect_world();  // from the process environment

// Where a job's ranks run, from the launcher's world, the rank count asked for and the GPUs.
struct Placement {
  int ranks = 1;    // the world size
  int per_gpu = 1;  // ranks of this process on one GPU (above 1 only when sharing)
};

// The ranks per node a job's plan is compiled for: `requested` when above 0, else
// $MKC_RANKS_PER_NODE (nodes emulated on one host too), else the launcher's ranks per host when
// the job spans hosts; 0: the whole job is one node. A bad variable is a UserError.
int64_t ranks_per_node(const World& world, int64_t requested, const EnvFn& env);

// The rank this process plans and builds its kernel for (compiler::CheckOptions::plan_rank): under
// a launcher (one process per rank) its own, so its compile does not grow with the world (issue
// 35); -1, the whole world, when it runs every rank, or with MKC_PLAN=world (MKC_PLAN=rank, the
// default, or unset: one rank). Another MKC_PLAN value is a UserError.
int64_t planned_rank(const World& world, const EnvFn& env);

// The world size asked for (`requested`; 0: the default, one rank per GPU) against the
// launcher's: under a launcher a different count is a UserError naming both. Needs no GPU.
int job_size(const World& world, int requested);
// Then the placement on `gpus` GPUs: more ranks than GPUs in one process is a UserError unless
// `share_gpus` (rank r on GPU r % gpus; each of a GPU's ranks gets its share of the SMs).
Placement place_ranks(const World& world, int requested, int gpus, bool share_gpus);

// A caller's collective all-gather of fixed-size blocks: `bytes` bytes from this rank at `mine`,
// every rank's block in rank order into `all` (world size x `bytes`). MPI_Allgather, a
// torch.distributed process group's all_gather_into_tensor, or a store do it; called collectively,
// in the same order on every rank. Throws (any exception) when it cannot.
using BlockGatherFn = std::function<void(const void* mine, size_t bytes, void* all)>;

class Rendezvous {
 public:
  // Rank 0 listens on master_addr:master_port (that address only) and waits for the other ranks,
  // each showing world.token; the others connect there, retrying until rank 0 listens and takes
  // them. Throws EnvironmentError after `timeout` naming the ranks that never came (rank 0, with
  // the connections it refused) or the address that never answered.
  Rendezvous(const World& world, std::chrono::milliseconds timeout);
  // Through the caller's own all-gather instead of mkc's TCP star (no address, port or token):
  // a blob goes as its size, then as blocks of the largest size. What the caller's gather returns
  // is checked (this rank's block where it belongs, sizes in range): an EnvironmentError names
  // the rank and the fault otherwise.
  Rendezvous(const World& world, BlockGatherFn gather);
  ~Rendezvous();
  Rendezvous(const Rendezvous&) = delete;
  Rendezvous& operator=(const Rendezvous&) = delete;

  // Every rank's blob, in rank order, on every rank. Blobs may differ in size (up to 64 MiB).
  std::vector<std::string> all_gather(const std::string& mine);
  void barrier() { all_gather(std::string()); }

  const World& world() const { return world_; }

 private:
  using Deadline = std::chrono::steady_clock::time_point;
  void accept_ranks(const sockaddr_in& addr, Deadline deadline);
  void connect_to_rank0(const sockaddr_in& addr, Deadline deadline, const std::string& where);
  void close_all();
  std::vector<std::string> gather_blobs(const std::string& mine);

  World world_;
  std::chrono::milliseconds timeout_;
  int listen_fd_ = -1;
  BlockGatherFn gather_;    // the caller's, when given
  std::vector<int> peers_;  // rank 0: the socket of rank r at [r]; others: [0] = rank 0
};

}  // namespace mkc::rt
