// MKC_NET: auto takes verbs only with libibverbs loaded and an active port (else tcp, saying why),
// tcp never loads libibverbs, verbs (or MKC_IB_HCA) demanded and unavailable is an error, a bad
// value is the user's error; the transport made is the one chosen, configured from the variables.
#include "runtime/net/net.h"

#include <doctest/doctest.h>

#include <map>

#include "tests/runtime/net/fake_verbs.h"

namespace mkc::rt::net {
namespace {

using testing::FakeVerbs;

EnvFn env_of(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> const char* {
    const auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

VerbsLoader absent(int* calls) {
  return [calls]() -> const VerbsApi& {
    ++*calls;
    // What load_verbs says on a host without rdma-core (it throws: nothing is returned).
    static VerbsApi never;
    never = load_verbs("libibverbs-absent.so.1");
    return never;
  };
}

VerbsLoader of(const FakeVerbs& fake, int* calls) {
  return [&fake, calls]() -> const VerbsApi& {
    ++*calls;
    return fake.api();
  };
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST_CASE("MKC_NET=auto: libibverbs absent -> tcp, saying why") {
  for (const char* mode : {"", "auto"}) {
    int calls = 0;
    std::map<std::string, std::string> vars;
    if (*mode) vars["MKC_NET"] = mode;
    const NetChoice c = choose_net(env_of(vars), absent(&calls));
    CHECK(c.backend == NetBackend::kTcp);
    CHECK(contains(c.reason, "MKC_NET=auto: verbs: dlopen(\"libibverbs-absent.so.1\") failed"));
    CHECK(calls == 1);
  }
}

TEST_CASE("MKC_NET=auto: no device, or no active port -> tcp; an active port -> verbs") {
  int calls = 0;
  {
    FakeVerbs fake({});
    const NetChoice c = choose_net(env_of({}), of(fake, &calls));
    CHECK(c.backend == NetBackend::kTcp);
    CHECK(contains(c.reason, "no RDMA device"));
  }
  {
    FakeVerbs fake({{"mlx5_0", {IBV_PORT_DOWN}}});
    const NetChoice c = choose_net(env_of({}), of(fake, &calls));
    CHECK(c.backend == NetBackend::kTcp);
    CHECK(c.reason == "MKC_NET=auto: verbs: no active RDMA port: mlx5_0 port 1: down");
  }
  {
    FakeVerbs fake({{"mlx5_0", {IBV_PORT_DOWN}}, {"mlx5_1", {IBV_PORT_ACTIVE}}});
    const NetChoice c = choose_net(env_of({}), of(fake, &calls));
    CHECK(c.backend == NetBackend::kVerbs);
    CHECK(c.reason == "MKC_NET=auto: mlx5_1 port 1 is active (fake)");
    const NetChoice h = choose_net(env_of({{"MKC_IB_HCA", "mlx5_1"}}), of(fake, &calls));
    CHECK(h.backend == NetBackend::kVerbs);
    // A device asked for that cannot be used is an error, not tcp in silence.
    CHECK_THROWS_WITH_AS(choose_net(env_of({{"MKC_IB_HCA", "mlx5_0"}}), of(fake, &calls)),
                         "MKC_IB_HCA=mlx5_0, but verbs: no active RDMA port among "
                         "MKC_IB_HCA=mlx5_0: mlx5_0 port 1: down",
                         EnvironmentError);
  }
}

TEST_CASE("MKC_NET=tcp does not load libibverbs; MKC_NET=verbs demands it") {
  int calls = 0;
  const NetChoice c = choose_net(env_of({{"MKC_NET", "tcp"}}), absent(&calls));
  CHECK(c.backend == NetBackend::kTcp);
  CHECK(calls == 0);
  CHECK_THROWS_WITH_AS(choose_net(env_of({{"MKC_NET", "verbs"}}), absent(&calls)),
                       doctest::Contains("MKC_NET=verbs, but verbs: dlopen"), EnvironmentError);
  FakeVerbs fake({});
  CHECK_THROWS_WITH_AS(choose_net(env_of({{"MKC_NET", "verbs"}}), of(fake, &calls)),
                       doctest::Contains("MKC_NET=verbs, but verbs: no RDMA device"),
                       EnvironmentError);
  CHECK_THROWS_WITH_AS(choose_net(env_of({{"MKC_NET", "rdma"}}), absent(&calls)),
                       "MKC_NET=rdma: the inter-node transport is tcp, verbs or auto", UserError);
}

TEST_CASE("make_transport: the backend chosen, configured from the environment") {
  int calls = 0;
  NetSetup s;
  s.quiet = true;
  s.env = env_of({});
  s.load_verbs = absent(&calls);
  CHECK(std::string(make_transport(s)->name()) == "tcp");
  FakeVerbs fake({{"mlx5_0", {IBV_PORT_ACTIVE}}});
  s.load_verbs = of(fake, &calls);
  CHECK(std::string(make_transport(s)->name()) == "verbs");
  s.env = env_of({{"MKC_IB_GID_INDEX", "x"}});
  CHECK_THROWS_AS(make_transport(s), UserError);
  s.env = env_of({{"MKC_NET", "tcp"}, {"MKC_NET_ADDR", "127.0.0.1"}});
  CHECK(std::string(make_transport(s)->name()) == "tcp");
  s.env = env_of({{"MKC_NET", "tcp"}});
  s.route_to = "no-such-host.invalid";
  CHECK_THROWS_AS(make_transport(s), EnvironmentError);
}

}  // namespace
}  // namespace mkc::rt::net
