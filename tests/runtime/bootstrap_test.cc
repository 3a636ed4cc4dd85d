// Bootstrap: the launchers' variables read into a World (torchrun, Open MPI, Slurm, mkc's own;
// bad and partial settings named), the TCP rendezvous among threads (all_gather in rank order,
// repeated; a rank that never comes or never answers is named within the deadline), and mkrun
// (a 4-process job that rendezvous; a failing rank stops the job with its exit code; a hung rank
// is killed). No GPU needed.
#include "runtime/bootstrap.h"

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <thread>

#include "support/error.h"
#include "tests/support/run.h"

namespace mkc::rt {
namespace {

World from(std::map<std::string, std::string> vars) {
  return detect_world([vars = std::move(vars)](const char* name) -> const char* {
    const auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

TEST_CASE("detect_world: each launcher's variables") {
  World w = from({});
  CHECK(w.size == 1);
  CHECK(w.rank == 0);
  CHECK(w.source == "single process");

  w = from({{"RANK", "3"},
            {"WORLD_SIZE", "8"},
            {"LOCAL_RANK", "3"},
            {"LOCAL_WORLD_SIZE", "4"},
            {"MASTER_ADDR", "node0"},
            {"MASTER_PORT", "1234"}});
  CHECK(w.rank == 3);
  CHECK(w.size == 8);
  CHECK(w.local_rank == 3);
  CHECK(w.local_size == 4);
  CHECK(!w.single_node());
  CHECK(w.master_addr == "node0");
  CHECK(w.master_port == 1234);
  CHECK(w.source == "torchrun/mkrun");

  w = from({{"OMPI_COMM_WORLD_RANK", "5"},
            {"OMPI_COMM_WORLD_SIZE", "8"},
            {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
            {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
            {"MASTER_ADDR", "10.0.0.1"}});
  CHECK(w.rank == 5);
  CHECK(w.local_rank == 1);
  CHECK(w.source == "Open MPI");
  CHECK(w.master_port == 29500);

  w = from({{"SLURM_PROCID", "6"},
            {"SLURM_NTASKS", "16"},
            {"SLURM_LOCALID", "6"},
            {"SLURM_NTASKS_PER_NODE", "8(x2)"},
            {"MASTER_ADDR", "n1"}});
  CHECK(w.rank == 6);
  CHECK(w.local_size == 8);
  CHECK(w.source == "Slurm");

  // mkc's own variables win over a launcher's.
  w = from({{"MKC_RANK", "1"}, {"MKC_WORLD_SIZE", "2"}, {"RANK", "0"}, {"WORLD_SIZE", "4"}});
  CHECK(w.rank == 1);
  CHECK(w.size == 2);
  CHECK(w.local_rank == 1);
  CHECK(w.single_node());
}

TEST_CASE("detect_world: partial or inconsistent settings are named") {
  CHECK_THROWS_WITH_AS(from({{"RANK", "0"}}), doctest::Contains("WORLD_SIZE is not"), UserError);
  CHECK_THROWS_WITH_AS(from({{"RANK", "4"}, {"WORLD_SIZE", "4"}}),
                       doctest::Contains("RANK=4 is not a number in [0, 3]"), UserError);
  CHECK_THROWS_WITH_AS(from({{"RANK", "x"}, {"WORLD_SIZE", "4"}}), doctest::Contains("RANK=x"),
                       UserError);
  CHECK_THROWS_WITH_AS(from({{"RANK", "0"}, {"WORLD_SIZE", "6"}, {"LOCAL_WORLD_SIZE", "4"}}),
                       doctest::Contains("not a multiple"), UserError);
  CHECK_THROWS_WITH_AS(from({{"RANK", "0"}, {"WORLD_SIZE", "8"}, {"LOCAL_WORLD_SIZE", "4"}}),
                       doctest::Contains("set MASTER_ADDR"), UserError);
  CHECK_THROWS_WITH_AS(from({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}}),
                       doctest::Contains("MASTER_PORT=70000"), UserError);
}

TEST_CASE("place_ranks: the launcher's size, the count asked for, GPUs and sharing") {
  const World alone;  // no launcher
  // One process: one rank per GPU by default; more ranks than GPUs only when sharing.
  CHECK(place_ranks(alone, 0, 2, false).ranks == 2);
  CHECK(place_ranks(alone, 0, 2, false).per_gpu == 1);
  CHECK(place_ranks(alone, 1, 2, false).ranks == 1);
  const Placement shared = place_ranks(alone, 8, 2, true);
  CHECK(shared.ranks == 8);
  CHECK(shared.per_gpu == 4);
  CHECK(place_ranks(alone, 3, 2, true).per_gpu == 2);  // rank r on GPU r % 2: GPU 0 holds two
  CHECK_THROWS_WITH_AS(place_ranks(alone, 4, 2, false),
                       doctest::Contains("4 ranks asked for, this machine has 2 GPU(s)"),
                       UserError);
  CHECK_THROWS_AS(place_ranks(alone, -1, 2, false), UserError);
  // Under a launcher: its size, one rank per process (sharing GPUs is the job's business).
  const World w = from({{"RANK", "1"}, {"WORLD_SIZE", "4"}});
  CHECK(job_size(w, 0) == 4);
  CHECK(job_size(w, 4) == 4);
  const Placement under = place_ranks(w, 0, 1, false);
  CHECK(under.ranks == 4);
  CHECK(under.per_gpu == 1);
  CHECK_THROWS_WITH_AS(
      job_size(w, 2),
      doctest::Contains("2 ranks asked for (--ranks), but this process is rank 1 of a job of 4"),
      UserError);
}

TEST_CASE("rendezvous: four ranks as threads all-gather blobs of different sizes, twice") {
  const int port = free_port(), n = 4;
  std::vector<std::vector<std::string>> got(n);
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        World w;
        w.rank = r;
        w.size = n;
        w.local_rank = r;
        w.local_size = n;
        w.master_port = port;
        Rendezvous rv(w, std::chrono::seconds(10));
        got[r] = rv.all_gather(std::string(1000 * r + 1, static_cast<char>('a' + r)));
        rv.barrier();
        const auto again = rv.all_gather(std::to_string(r * r));
        if (again[3] != "9" || again[2] != "4") errors[r] = "second all_gather out of order";
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    CHECK_MESSAGE(errors[r].empty(), errors[r]);
    REQUIRE(got[r].size() == 4u);
    for (int k = 0; k < n; ++k)
      CHECK(got[r][k] == std::string(1000 * k + 1, static_cast<char>('a' + k)));
  }
}

// Two jobs one after the other on one port (the JIT API does this when a program builds a second
// kernel): rank 1 starts the second rendezvous while rank 0 still holds the first one's listener.
// Its connection to the old listener is never acknowledged, so it connects again.
TEST_CASE("rendezvous: a second job on the same port while the first one's listener lingers") {
  const int port = free_port();
  std::string errors[2];
  std::vector<std::string> second[2];
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      try {
        World w;
        w.rank = r;
        w.size = 2;
        w.local_rank = r;
        w.local_size = 2;
        w.master_port = port;
        {
          Rendezvous first(w, std::chrono::seconds(10));
          first.barrier();
          if (r == 0) std::this_thread::sleep_for(std::chrono::milliseconds(500));
        }
        Rendezvous next(w, std::chrono::seconds(10));
        second[r] = next.all_gather(fmt::format("job 2 rank {}", r));
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    CHECK_MESSAGE(errors[r].empty(), errors[r]);
    REQUIRE(second[r].size() == 2u);
    CHECK(second[r][1] == "job 2 rank 1");
  }
}

TEST_CASE("rendezvous: a rank that never comes, or a rank 0 that never listens, is named") {
  const int port = free_port();
  std::string err0, err1;
  const auto t0 = std::chrono::steady_clock::now();
  std::thread a([&] {
    try {
      World w;
      w.size = 3;
      w.local_size = 3;
      w.master_port = port;
      Rendezvous rv(w, std::chrono::milliseconds(800));
    } catch (const EnvironmentError& e) {
      err0 = e.what();
    }
  });
  std::thread b([&] {
    World w;
    w.rank = 1;
    w.local_rank = 1;
    w.size = 3;
    w.local_size = 3;
    w.master_port = port;
    try {
      Rendezvous rv(w, std::chrono::milliseconds(800));
      rv.all_gather("x");  // rank 0 gave up: this rank learns it
    } catch (const EnvironmentError& e) {
      err1 = e.what();
    }
  });
  a.join();
  b.join();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK_MESSAGE(err0.find("rank(s) 2 of 3 never came") != std::string::npos, err0);
  CHECK_MESSAGE(err1.find("rank 1") != std::string::npos, err1);
  CHECK(s < 5.0);

  World lonely;
  lonely.rank = 1;
  lonely.local_rank = 1;
  lonely.size = 2;
  lonely.local_size = 2;
  lonely.master_port = free_port();
  CHECK_THROWS_WITH_AS(Rendezvous(lonely, std::chrono::milliseconds(300)),
                       doctest::Contains("could not reach rank 0 at 127.0.0.1"), EnvironmentError);
}

using mkc::testing::run_command;

const char* kMkrun = "tools/mkrun/mkrun";
const char* kProbe = "tests/runtime/bootstrap_probe";

TEST_CASE("mkrun: a 4-process job rendezvous; every rank sees every other") {
  const auto [rc, out] = run_command(fmt::format("{} -n 4 {}", kMkrun, kProbe));
  CHECK_MESSAGE(rc == 0, out);
  for (int r = 0; r < 4; ++r) {
    CHECK_MESSAGE(out.find(fmt::format("probe {} of 4 (torchrun/mkrun): rank 0,rank 1,rank 2,rank "
                                       "3",
                                       r)) != std::string::npos,
                  out);
  }
}

TEST_CASE("mkrun: a failing rank stops the job with its code; a hung one is killed") {
  auto [rc, out] = run_command(fmt::format("{} -n 3 {} --fail-rank 1", kMkrun, kProbe));
  CHECK(rc == 3);
  CHECK_MESSAGE(
      out.find("mkrun: rank 1 exited with code 3; stopping the other") != std::string::npos, out);
  // Rank 2 hangs and ignores nothing: SIGTERM ends it; ranks 0 and 1 time out in the rendezvous
  // or are stopped. The job ends well within the probe's 20 s rendezvous deadline.
  const auto t0 = std::chrono::steady_clock::now();
  std::tie(rc, out) =
      run_command(fmt::format("{} -n 3 --grace 1 {} --hang-rank 2 --fail-rank 0", kMkrun, kProbe));
  CHECK(rc == 3);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
  std::tie(rc, out) = run_command(fmt::format("{} -n 2 /nonexistent/program", kMkrun));
  CHECK(rc == 127);
  CHECK_MESSAGE(out.find("cannot run `/nonexistent/program`") != std::string::npos, out);
  std::tie(rc, out) = run_command(fmt::format("{} {}", kMkrun, kProbe));
  CHECK(rc == 1);
  CHECK_MESSAGE(out.find("-n N is required") != std::string::npos, out);
}

}  // namespace
}  // namespace mkc::rt
