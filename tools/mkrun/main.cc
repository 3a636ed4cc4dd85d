// mkrun: start an N-process job on this machine, the way torchrun would, for programs that use
// mkc's runtime one rank per process (or any program that reads torchrun's variables).
//
//   mkrun -n N [--port P] [--grace S] [--] CMD [ARGS...]
//
// Each child i gets RANK=i, WORLD_SIZE=N, LOCAL_RANK=i, LOCAL_WORLD_SIZE=N, MASTER_ADDR=127.0.0.1,
// MASTER_PORT (P, or a free port) and MKC_JOB_TOKEN (random, new for every job: the rendezvous
// takes only ranks that show it). mkrun waits for all of them. When one fails (non-zero exit or a
// signal) it says which, stops the others (SIGTERM, then SIGKILL after the grace period, default
// 5 s) and exits with the failing rank's code (128 + signal for a signal). SIGINT, SIGTERM and
// SIGHUP to mkrun stop the job the same way (SIGINT is passed on as SIGINT).
//
// No orphans are left holding GPUs: each rank leads a process group of its own, and stopping
// signals the whole group, so what a rank started (a shell's children, a data loader) stops with
// it. When every rank has exited, what they left running is stopped the same way, and at the end
// any process still carrying the job's token (one that left its group) is killed. Each rank asks
// the kernel to kill it (SIGKILL) if mkrun itself dies, even by SIGKILL; and a guard process, which
// the kernel tells when mkrun dies, then kills every process that carries the job's token (what
// the ranks started, also outside their groups).
// Multi-node jobs use torchrun, mpirun or srun instead: mkc reads their variables too
// (runtime/bootstrap.h).
#include <dirent.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr const char* kUsage =
    "usage: mkrun -n N [--port P] [--grace SECONDS] [--] CMD [ARGS...]\n"
    "  starts N processes of CMD on this machine with torchrun's variables (RANK, WORLD_SIZE,\n"
    "  LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT); stops them all when one fails.\n";

volatile std::sig_atomic_t g_signal = 0;

void on_signal(int sig) {
  g_signal = sig;
}

// A port nobody listens on now (the kernel picks it; small race, as with every launcher).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 29500;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof(a);
  int port = 29500;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

// A job's token: 128 random bits as hex. Empty when the kernel gives no randomness (then the
// rendezvous runs without one, as under other launchers).
std::string job_token() {
  unsigned char bytes[16];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    const ssize_t k = getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return "";
    got += static_cast<size_t>(k);
  }
  std::string hex;
  for (unsigned char b : bytes) hex += fmt::format("{:02x}", b);
  return hex;
}

// True while group `pgid` has a process (kill with signal 0 only asks).
bool group_alive(pid_t pgid) {
  return kill(-pgid, 0) == 0 || errno == EPERM;
}

// Kills every process of the job: each that carries MKC_JOB_TOKEN=token in its environment (the
// ranks set it; what they start inherits it), else, without a token, the ranks' groups. A few
// passes, for processes forked while the first ran.
void kill_job(const std::vector<pid_t>& groups, const std::string& token) {
  const std::string wanted = "MKC_JOB_TOKEN=" + token;
  for (int pass = 0; pass < 3; ++pass) {
    if (token.empty()) {
      for (pid_t g : groups)
        if (g > 0) kill(-g, SIGKILL);
    } else if (DIR* proc = opendir("/proc")) {
      while (const dirent* e = readdir(proc)) {
        char* end = nullptr;
        const long pid = std::strtol(e->d_name, &end, 10);
        if (end == e->d_name || *end != '\0' || pid <= 1 || pid == getpid()) continue;
        std::ifstream env(fmt::format("/proc/{}/environ", pid), std::ios::binary);
        const std::string text((std::istreambuf_iterator<char>(env)),
                               std::istreambuf_iterator<char>());
        size_t at = 0;
        while (at < text.size()) {
          const size_t nul = std::min(text.find('\0', at), text.size());
          if (text.compare(at, nul - at, wanted) == 0) {
            kill(static_cast<pid_t>(pid), SIGKILL);
            break;
          }
          at = nul + 1;
        }
      }
      closedir(proc);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

// The job's guard: a process outside the ranks' groups that the kernel sends SIGTERM when mkrun
// dies, however it dies (prctl PDEATHSIG); it then kills the job (kill_job). The ranks die with
// mkrun on their own, but what they started would not. mkrun kills the guard when the job ends in
// order. Returns its pid, or -1 (no guard: the ranks still die with mkrun).
pid_t start_guard(const std::vector<pid_t>& groups, const std::string& token, pid_t launcher) {
  sigset_t term;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  sigset_t old;
  sigprocmask(SIG_BLOCK, &term, &old);
  const pid_t pid = fork();
  if (pid != 0) {
    sigprocmask(SIG_SETMASK, &old, nullptr);
    return pid;
  }
  setpgid(0, 0);
  signal(SIGINT, SIG_IGN);
  signal(SIGHUP, SIG_IGN);
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  // A SIGTERM from anyone else while mkrun lives changes nothing.
  while (getppid() == launcher) {
    const timespec poll{1, 0};
    sigtimedwait(&term, nullptr, &poll);
  }
  kill_job(groups, token);
  _exit(0);
}

int parse_positive(const std::string& flag, const char* text, long max = 1 << 16) {
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || v < 1 || v > max) {
    fmt::print(stderr, "mkrun: {} {}: expected a number from 1 to {}\n{}", flag, text, max, kUsage);
    std::exit(1);
  }
  return static_cast<int>(v);
}

int code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

std::string describe(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with code {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return fmt::format("was killed by signal {} ({})", WTERMSIG(status),
                       strsignal(WTERMSIG(status)));
  return "stopped";
}

}  // namespace

int main(int argc, char** argv) {
  int n = 0, port = 0, grace = 5;
  int i = 1;
  for (; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a == "-h" || a == "--help") {
      fmt::print("{}", kUsage);
      return 0;
    }
    if ((a == "-n" || a == "--port" || a == "--grace") && i + 1 >= argc) {
      fmt::print(stderr, "mkrun: {} needs a value\n{}", a, kUsage);
      return 1;
    }
    if (a == "-n") {
      n = parse_positive(a, argv[++i]);
    } else if (a == "--port") {
      port = parse_positive(a, argv[++i], 65535);  // a TCP port
    } else if (a == "--grace") {
      grace = parse_positive(a, argv[++i]);
    } else if (!a.empty() && a[0] == '-') {
      fmt::print(stderr, "mkrun: unknown option `{}`\n{}", a, kUsage);
      return 1;
    } else {
      break;
    }
  }
  if (n == 0 || i >= argc) {
    fmt::print(stderr, "mkrun: {}\n{}", n == 0 ? "-n N is required" : "no command given", kUsage);
    return 1;
  }
  if (port == 0) port = free_port();
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  // A closed terminal (ssh dropped) stops the job too, rather than leaving it running unseen.
  sigaction(SIGHUP, &sa, nullptr);
  const std::string token = job_token();
  const pid_t launcher = getpid();

  std::vector<pid_t> pids(n, -1);
  // Each rank's process group (its pid); -1 once the group is known to be empty.
  std::vector<pid_t> groups(n, -1);
  for (int r = 0; r < n; ++r) {
    const pid_t pid = fork();
    if (pid < 0) {
      fmt::print(stderr, "mkrun: fork failed: {}\n", std::strerror(errno));
      for (pid_t g : groups)
        if (g > 0) kill(-g, SIGKILL);
      return 2;
    }
    if (pid == 0) {
      // Its own process group, so stopping the rank reaches everything it started.
      setpgid(0, 0);
      // Killed with mkrun, whatever kills mkrun; if mkrun is already gone, stop here.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != launcher) _exit(128 + SIGKILL);
      setenv("RANK", std::to_string(r).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(n).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", std::to_string(n).c_str(), 1);
      setenv("MASTER_ADDR", "127.0.0.1", 1);
      setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      if (!token.empty()) setenv("MKC_JOB_TOKEN", token.c_str(), 1);
      signal(SIGINT, SIG_DFL);
      signal(SIGTERM, SIG_DFL);
      signal(SIGHUP, SIG_DFL);
      execvp(argv[i], argv + i);
      fmt::print(stderr, "mkrun: cannot run `{}`: {}\n", argv[i], std::strerror(errno));
      _exit(127);
    }
    // Also here: whichever of parent and child runs first, the group exists before it is
    // signalled.
    setpgid(pid, pid);
    pids[r] = pid;
    groups[r] = pid;
  }
  const pid_t guard = start_guard(groups, token, launcher);

  int alive = n, result = 0, failed_rank = -1;
  bool stopping = false;
  auto stop_deadline = std::chrono::steady_clock::time_point::max();
  // Every group not yet empty: the ranks and what they started.
  const auto signal_groups = [&](int sig) {
    for (pid_t& g : groups) {
      if (g <= 0) continue;
      if (kill(-g, sig) != 0 && errno == ESRCH) g = -1;
    }
  };
  const auto groups_left = [&]() {
    int left = 0;
    for (pid_t& g : groups) {
      if (g > 0 && !group_alive(g)) g = -1;
      left += g > 0;
    }
    return left;
  };
  const auto start_stopping = [&](int sig) {
    stopping = true;
    signal_groups(sig);
    stop_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(grace);
  };
  // Until every rank has exited, and then until what they started has gone too (or has been sent
  // SIGKILL: a zombie nobody reaps would keep its group for ever).
  bool killed = false;
  while (alive > 0 || (!killed && groups_left() > 0)) {
    if (alive == 0 && !stopping) {
      fmt::print(stderr, "mkrun: every rank has exited; stopping what {} rank(s) left running\n",
                 groups_left());
      start_stopping(SIGTERM);
    }
    int status = 0;
    const pid_t pid = alive > 0 ? waitpid(-1, &status, WNOHANG) : 0;
    if (pid == guard && guard > 0) continue;  // it died early: the job runs on without it
    if (pid > 0) {
      int r = 0;
      while (r < n && pids[r] != pid) ++r;
      if (r == n) continue;
      pids[r] = -1;
      --alive;
      if (code_of(status) != 0 && failed_rank < 0 && !stopping) {
        failed_rank = r;
        result = code_of(status);
        fmt::print(stderr, "mkrun: rank {} {}; stopping the other {} rank(s)\n", r,
                   describe(status), alive);
      }
      if (failed_rank >= 0 && !stopping) start_stopping(SIGTERM);
      continue;
    }
    if (g_signal != 0 && !stopping) {
      fmt::print(stderr, "mkrun: got signal {}; stopping {} rank(s)\n", static_cast<int>(g_signal),
                 alive);
      result = 128 + g_signal;
      // Ctrl-C reaches the ranks as Ctrl-C (they are not in the terminal's process group any
      // more); a hang-up or a termination as SIGTERM.
      start_stopping(g_signal == SIGINT ? SIGINT : SIGTERM);
    }
    if (stopping && std::chrono::steady_clock::now() > stop_deadline) {
      fmt::print(stderr,
                 "mkrun: {} rank(s) or their processes still running after {} s; killing them\n",
                 std::max(alive, groups_left()), grace);
      signal_groups(SIGKILL);
      killed = true;
      stop_deadline = std::chrono::steady_clock::time_point::max();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (guard > 0) {
    kill(guard, SIGKILL);
    waitpid(guard, nullptr, 0);
  }
  // What left the ranks' groups (setsid) but carries the job's token.
  if (!token.empty()) kill_job(groups, token);
  return result;
}
