// Bootstrap: the launchers' variables read into a World (torchrun, Open MPI, Slurm, mkc's own;
// bad and partial settings named), the TCP rendezvous among threads (all_gather in rank order,
// repeated; a rank that never comes or never answers is named; rank 0 listens on MASTER_ADDR
// only and takes only the job's ranks: a wrong token or a silent connection neither joins nor
// stalls the job), and mkrun (a 4-process job that rendezvous with its token; a failing rank
// stops the job with its exit code; a hung rank is killed; SIGTERM and SIGHUP stop what the ranks
// started too, and killing mkrun kills its ranks). No GPU needed.
#include "runtime/bootstrap.h"

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
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

TEST_CASE("ranks_per_node: asked for, else $MKC_RANKS_PER_NODE, else the launcher's hosts") {
  const auto env = [](const char* v) {
    return
        [v](const char* name) { return std::string(name) == "MKC_RANKS_PER_NODE" ? v : nullptr; };
  };
  World one;  // one host
  one.size = one.local_size = 8;
  World two = one;  // two hosts of 4
  two.local_size = 4;
  CHECK(ranks_per_node(one, 0, env(nullptr)) == 0);
  CHECK(ranks_per_node(two, 0, env(nullptr)) == 4);
  CHECK(ranks_per_node(one, 0, env("2")) == 2);
  CHECK(ranks_per_node(two, 0, env("2")) == 2);
  CHECK(ranks_per_node(two, 1, env("2")) == 1);
  CHECK(ranks_per_node(one, 0, env("")) == 0);
  for (const char* bad : {"0", "-1", "2x", "two"}) {
    CHECK_THROWS_WITH_AS(ranks_per_node(one, 0, env(bad)), doctest::Contains("MKC_RANKS_PER_NODE="),
                         UserError);
  }
}

TEST_CASE("planned_rank: a launched process plans its own rank unless MKC_PLAN=world") {
  const auto env = [](const char* v) {
    return [v](const char* name) { return std::string(name) == "MKC_PLAN" ? v : nullptr; };
  };
  World alone;  // no launcher: this process runs every rank
  World launched;
  launched.size = launched.local_size = 8;
  launched.rank = 5;
  CHECK(planned_rank(alone, env(nullptr)) == -1);
  CHECK(planned_rank(alone, env("rank")) == -1);
  CHECK(planned_rank(launched, env(nullptr)) == 5);
  CHECK(planned_rank(launched, env("")) == 5);
  CHECK(planned_rank(launched, env("rank")) == 5);
  CHECK(planned_rank(launched, env("world")) == -1);
  for (const char* bad : {"ranks", "World", "1"}) {
    CHECK_THROWS_WITH_AS(planned_rank(launched, env(bad)), doctest::Contains("MKC_PLAN="),
                         UserError);
  }
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
  CHECK_MESSAGE(err0.find("rank(s) 2 of 3 never came") != std::string::npos, err0);
  CHECK_MESSAGE(err1.find("rank 1") != std::string::npos, err1);

  World lonely;
  lonely.rank = 1;
  lonely.local_rank = 1;
  lonely.size = 2;
  lonely.local_size = 2;
  lonely.master_port = free_port();
  CHECK_THROWS_WITH_AS(Rendezvous(lonely, std::chrono::milliseconds(300)),
                       doctest::Contains("could not reach rank 0 at 127.0.0.1"), EnvironmentError);
}

// A World for rank `r` of `n` ranks on this host, at `port`.
World local_world(int r, int n, int port, const std::string& token = "") {
  World w;
  w.rank = r;
  w.size = n;
  w.local_rank = r;
  w.local_size = n;
  w.master_port = port;
  w.token = token;
  return w;
}

// Connects to addr:port; true when something listens there.
bool can_connect(const char* addr, int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, addr, &a.sin_addr);
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  ::close(fd);
  return ok;
}

TEST_CASE("rendezvous: rank 0 listens on MASTER_ADDR's address, not on every interface") {
  const int port = free_port();
  std::string err0, err1;
  std::thread zero([&] {
    try {
      Rendezvous rv(local_world(0, 2, port), std::chrono::seconds(10));
      rv.barrier();
    } catch (const std::exception& e) {
      err0 = e.what();
    }
  });
  // Wait until rank 0 listens (a connection that closes at once is ignored by it).
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!can_connect("127.0.0.1", port) && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  // 127.0.0.2 is this host too: a listener on every interface (0.0.0.0) would take it.
  CHECK_FALSE(can_connect("127.0.0.2", port));
  try {
    Rendezvous rv(local_world(1, 2, port), std::chrono::seconds(10));
    rv.barrier();
  } catch (const std::exception& e) {
    err1 = e.what();
  }
  zero.join();
  CHECK_MESSAGE(err0.empty(), err0);
  CHECK_MESSAGE(err1.empty(), err1);
  // MASTER_ADDR that is not this host's: named.
  World away = local_world(0, 2, free_port());
  away.master_addr = "192.0.2.1";  // TEST-NET-1: never a local address
  CHECK_THROWS_WITH_AS(Rendezvous(away, std::chrono::milliseconds(500)),
                       doctest::Contains("MASTER_ADDR must be an address of rank 0's host"),
                       EnvironmentError);
  // The wildcard address (every interface), as written or as a name that resolves to it: refused
  // before anything listens.
  for (const char* wildcard : {"0.0.0.0", "0"}) {
    World any = local_world(0, 2, free_port());
    any.master_addr = wildcard;
    CHECK_THROWS_WITH_AS(Rendezvous(any, std::chrono::milliseconds(500)),
                         doctest::Contains("which would listen on every interface"),
                         EnvironmentError);
  }
}

TEST_CASE("rendezvous: a wrong token or a silent connection neither joins nor stalls the job") {
  const int port = free_port(), n = 3;
  std::vector<std::vector<std::string>> got(n);
  std::vector<std::string> errors(n);
  std::string intruder_error;
  std::vector<std::thread> threads;
  threads.emplace_back([&] {
    try {
      got[0] = Rendezvous(local_world(0, n, port, "s3cret"), std::chrono::seconds(15))
                   .all_gather("rank 0");
    } catch (const std::exception& e) {
      errors[0] = e.what();
    }
  });
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!can_connect("127.0.0.1", port) && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  // A connection that says nothing and stays open.
  const int silent = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(silent, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  // A process that claims rank 1 with another token, before the real rank 1.
  std::thread intruder([&] {
    try {
      Rendezvous rv(local_world(1, n, port, "guess"), std::chrono::milliseconds(1500));
      intruder_error = "joined";
    } catch (const EnvironmentError& e) {
      intruder_error = e.what();
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  for (int r = 1; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        got[r] = Rendezvous(local_world(r, n, port, "s3cret"), std::chrono::seconds(15))
                     .all_gather(fmt::format("rank {}", r));
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  intruder.join();
  ::close(silent);
  CHECK_MESSAGE(intruder_error.find("could not reach rank 0") != std::string::npos, intruder_error);
  for (int r = 0; r < n; ++r) {
    CHECK_MESSAGE(errors[r].empty(), errors[r]);
    CHECK(got[r] == std::vector<std::string>{"rank 0", "rank 1", "rank 2"});
  }
}

TEST_CASE("detect_world: the job's token from MKC_JOB_TOKEN") {
  CHECK(from({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MKC_JOB_TOKEN", "abc"}}).token == "abc");
  CHECK(from({{"RANK", "0"}, {"WORLD_SIZE", "2"}}).token.empty());
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

TEST_CASE("mkrun: a port past 65535 is refused before any rank starts") {
  const auto [rc, out] = run_command(fmt::format("{} -n 2 --port 65536 {}", kMkrun, kProbe));
  CHECK_MESSAGE(rc == 1, out);
  CHECK_MESSAGE(out.find("--port 65536: expected a number from 1 to 65535") != std::string::npos,
                out);
  CHECK_MESSAGE(out.find("probe") == std::string::npos, out);
}

TEST_CASE("mkrun: a failing rank stops the job with its code; a hung one is killed") {
  auto [rc, out] = run_command(fmt::format("{} -n 3 {} --fail-rank 1", kMkrun, kProbe));
  CHECK(rc == 3);
  CHECK_MESSAGE(
      out.find("mkrun: rank 1 exited with code 3; stopping the other") != std::string::npos, out);
  // Rank 2 hangs and ignores nothing: SIGTERM ends it (a rank left running would keep the test
  // from ending); ranks 0 and 1 time out in the rendezvous or are stopped.
  std::tie(rc, out) =
      run_command(fmt::format("{} -n 3 --grace 1 {} --hang-rank 2 --fail-rank 0", kMkrun, kProbe));
  CHECK(rc == 3);
  CHECK_MESSAGE(out.find("mkrun: rank 0 exited with code 3") != std::string::npos, out);
  std::tie(rc, out) = run_command(fmt::format("{} -n 2 /nonexistent/program", kMkrun));
  CHECK(rc == 127);
  CHECK_MESSAGE(out.find("cannot run `/nonexistent/program`") != std::string::npos, out);
  std::tie(rc, out) = run_command(fmt::format("{} {}", kMkrun, kProbe));
  CHECK(rc == 1);
  CHECK_MESSAGE(out.find("-n N is required") != std::string::npos, out);
}

TEST_CASE("mkrun: every rank of a job gets the same fresh token") {
  const auto [rc, out] =
      run_command(fmt::format("{} -n 3 sh -c 'echo token=$MKC_JOB_TOKEN'", kMkrun));
  REQUIRE(rc == 0);
  std::set<std::string> tokens;
  std::istringstream lines(out);
  for (std::string l; std::getline(lines, l);) {
    if (l.rfind("token=", 0) == 0) tokens.insert(l.substr(6));
  }
  REQUIRE(tokens.size() == 1);
  CHECK(tokens.begin()->size() == 32);
  const auto [rc2, again] =
      run_command(fmt::format("{} -n 1 sh -c 'echo token=$MKC_JOB_TOKEN'", kMkrun));
  CHECK(rc2 == 0);
  CHECK(again.find("token=" + *tokens.begin()) == std::string::npos);
}

// A process that has exited (a zombie nobody reaped yet counts as gone).
bool gone(pid_t pid) {
  if (::kill(pid, 0) != 0) return true;
  std::ifstream stat(fmt::format("/proc/{}/stat", pid));
  std::string text;
  std::getline(stat, text);
  const size_t paren = text.rfind(')');
  return paren == std::string::npos || text.substr(paren + 2, 1) == "Z";
}

// An mkrun job of `n` ranks, each a shell that starts a child of its own and waits: the pids of
// the shells and of their children, once all are running, and mkrun's pid.
struct Job {
  pid_t mkrun = -1;
  std::vector<pid_t> ranks, children;
};

Job start_job(int n, const std::string& dir) {
  const std::string file = dir + "/pids";
  ::unlink(file.c_str());
  Job job;
  job.mkrun = ::fork();
  REQUIRE(job.mkrun >= 0);
  if (job.mkrun == 0) {
    const std::string script = fmt::format("sleep 300 & echo \"$$ $!\" >> {}; wait", file);
    const std::string count = std::to_string(n);
    ::execl(kMkrun, kMkrun, "-n", count.c_str(), "--grace", "2", "sh", "-c", script.c_str(),
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < until) {
    std::ifstream in(file);
    std::vector<pid_t> ranks, children;
    pid_t r = 0, c = 0;
    while (in >> r >> c) {
      ranks.push_back(r);
      children.push_back(c);
    }
    if (static_cast<int>(ranks.size()) == n) {
      job.ranks = ranks;
      job.children = children;
      return job;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  FAIL("the job's ranks did not start");
  return job;
}

// Waits up to 10 s for every pid to be gone; those still there.
std::vector<pid_t> survivors(const std::vector<pid_t>& pids) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  std::vector<pid_t> left = pids;
  while (!left.empty() && std::chrono::steady_clock::now() < until) {
    std::vector<pid_t> still;
    for (pid_t p : left)
      if (!gone(p)) still.push_back(p);
    left = still;
    if (!left.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (pid_t p : left) ::kill(p, SIGKILL);  // leave nothing behind, whatever the outcome
  return left;
}

TEST_CASE("mkrun: SIGTERM and SIGHUP stop the ranks and what they started") {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = tmp != nullptr ? tmp : "/tmp";
  for (int sig : {SIGTERM, SIGHUP}) {
    CAPTURE(sig);
    Job job = start_job(2, dir);
    REQUIRE(job.ranks.size() == 2);
    ::kill(job.mkrun, sig);
    int status = 0;
    ::waitpid(job.mkrun, &status, 0);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 128 + sig);
    CHECK(survivors(job.ranks).empty());
    CHECK(survivors(job.children).empty());
  }
}

TEST_CASE("mkrun: killing mkrun (SIGKILL) kills its ranks and what they started") {
  const char* tmp = std::getenv("TEST_TMPDIR");
  Job job = start_job(2, tmp != nullptr ? tmp : "/tmp");
  REQUIRE(job.ranks.size() == 2);
  ::kill(job.mkrun, SIGKILL);
  int status = 0;
  ::waitpid(job.mkrun, &status, 0);
  CHECK(survivors(job.ranks).empty());
  // The ranks' own children too (issue 34: they outlived a SIGKILLed launcher): mkrun's guard
  // kills every process carrying the job's token.
  CHECK(survivors(job.children).empty());
}

TEST_CASE("mkrun: what the ranks leave running is stopped when they all succeed") {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string file = std::string(tmp != nullptr ? tmp : "/tmp") + "/left_pids";
  ::unlink(file.c_str());
  // Each rank starts a background sleep, one in a session of its own (outside its group), and
  // exits 0 at once.
  const auto [rc, out] = run_command(fmt::format(
      "{} -n 2 --grace 2 sh -c 'sleep 300 & echo $! >> {}; setsid sleep 300 & echo $! >> {}; "
      "exit 0'",
      kMkrun, file, file));
  CHECK_MESSAGE(rc == 0, out);
  CHECK_MESSAGE(out.find("every rank has exited; stopping what") != std::string::npos, out);
  std::vector<pid_t> left;
  std::ifstream in(file);
  for (pid_t p = 0; in >> p;) left.push_back(p);
  CHECK(left.size() == 4);
  // All of them, in the ranks' groups or not, are gone when mkrun returns.
  for (pid_t p : left) {
    CAPTURE(p);
    CHECK(gone(p));
    ::kill(p, SIGKILL);  // leave nothing behind, whatever the outcome
  }
}

}  // namespace
// An in-process all-gather of fixed-size blocks for `n` threads: what MPI_Allgather or a torch
// process group gives a program, here without a network. `shift` puts each block one place later
// (a broken gather); `huge` reports the last rank's size as 1 TiB (a corrupt one).
class ThreadGather {
 public:
  explicit ThreadGather(int n) : n_(n) {}
  bool shift = false;
  bool huge = false;
  BlockGatherFn for_rank(int r) {
    return [this, r](const void* mine, size_t bytes, void* all) {
      std::unique_lock<std::mutex> lock(mutex_);
      const uint64_t generation = generation_;
      if (arrived_ == 0) round_.assign(static_cast<size_t>(n_) * bytes, '\0');
      const size_t at = static_cast<size_t>(shift ? (r + 1) % n_ : r) * bytes;
      std::memcpy(round_.data() + at, mine, bytes);
      if (++arrived_ == n_) {
        if (huge && bytes == sizeof(uint64_t)) {
          const uint64_t tib = uint64_t{1} << 40;
          std::memcpy(round_.data() + static_cast<size_t>(n_ - 1) * sizeof(uint64_t), &tib,
                      sizeof(tib));
        }
        result_ = round_;
        arrived_ = 0;
        ++generation_;
        done_.notify_all();
      } else {
        done_.wait(lock, [&] { return generation_ != generation; });
      }
      std::memcpy(all, result_.data(), result_.size());
    };
  }

 private:
  int n_;
  std::mutex mutex_;
  std::condition_variable done_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  std::string round_, result_;
};

// Runs `n` ranks as threads, each with a Rendezvous through `gather`, calling `body`; returns
// each rank's exception text ("" when it finished).
std::vector<std::string> run_gathering(int n, ThreadGather& gather,
                                       const std::function<void(Rendezvous&, int)>& body) {
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
        Rendezvous rv(w, gather.for_rank(r));
        body(rv, r);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

TEST_CASE("rendezvous through the caller's all-gather: blobs of every size, in rank order") {
  const int n = 4;
  ThreadGather gather(n);
  std::vector<std::vector<std::string>> got(n), again(n);
  const auto errors = run_gathering(n, gather, [&](Rendezvous& rv, int r) {
    got[r] = rv.all_gather(std::string(1000 * r, static_cast<char>('a' + r)));  // rank 0: empty
    rv.barrier();
    again[r] = rv.all_gather(std::to_string(r * r));
  });
  for (int r = 0; r < n; ++r) {
    CHECK_MESSAGE(errors[r].empty(), errors[r]);
    REQUIRE(got[r].size() == 4u);
    for (int k = 0; k < n; ++k) {
      CHECK(got[r][k] == std::string(1000 * k, static_cast<char>('a' + k)));
      CHECK(again[r][k] == std::to_string(k * k));
    }
  }
}

TEST_CASE("rendezvous through the caller's all-gather: a gather out of rank order is named") {
  const int n = 3;
  ThreadGather gather(n);
  gather.shift = true;
  // Sizes that differ: the first round (the sizes) already finds it.
  auto errors = run_gathering(n, gather, [](Rendezvous& rv, int r) {
    rv.all_gather(std::string(static_cast<size_t>(r + 1), 'x'));
  });
  for (int r = 0; r < n; ++r) {
    CHECK(errors[r].find(fmt::format("did not return rank {}'s own size at its place", r)) !=
          std::string::npos);
  }
  // Sizes alike: the second (the blobs).
  errors =
      run_gathering(n, gather, [](Rendezvous& rv, int r) { rv.all_gather(std::to_string(r)); });
  for (int r = 0; r < n; ++r) {
    CHECK(errors[r].find(fmt::format("did not return rank {}'s own blob at its place", r)) !=
          std::string::npos);
  }
}

TEST_CASE("rendezvous through the caller's all-gather: a corrupt size and a failing gather") {
  const int n = 3;
  ThreadGather gather(n);
  gather.huge = true;
  const auto errors = run_gathering(n, gather, [](Rendezvous& rv, int) { rv.all_gather("blob"); });
  for (int r = 0; r < n - 1; ++r)
    CHECK(errors[r].find("gave rank 2 a blob of 1099511627776 bytes") != std::string::npos);
  CHECK(errors[n - 1].find("own size") != std::string::npos);  // its own was changed

  World w;
  w.rank = 0;
  w.size = 2;
  Rendezvous failing(
      w, [](const void*, size_t, void*) { throw EnvironmentError("the process group is gone"); });
  CHECK_THROWS_WITH_AS(failing.all_gather("x"), "the process group is gone", EnvironmentError);
  CHECK_THROWS_AS(Rendezvous(w, BlockGatherFn{}), UserError);
  w.rank = 2;
  CHECK_THROWS_AS(Rendezvous(w, [](const void*, size_t, void*) {}), UserError);
}

}  // namespace mkc::rt
