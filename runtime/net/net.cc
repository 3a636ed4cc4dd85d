#include "runtime/net/net.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "runtime/net/tcp.h"

namespace mkc::rt::net {
namespace {

int parse_index(const char* name, const char* text, int lo, int hi) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v < lo || v > hi) {
    throw UserError(fmt::format("{}={} is not a number in [{}, {}]", name, text, lo, hi));
  }
  return static_cast<int>(v);
}

std::string text_or_empty(const char* s) {
  return s != nullptr ? s : "";
}

}  // namespace

const VerbsApi& system_verbs() {
  // A throwing initializer leaves the static uninitialized: the next call tries again.
  static const VerbsApi api = load_verbs();
  return api;
}

NetChoice choose_net(const EnvFn& env, const VerbsLoader& load) {
  const std::string mode = text_or_empty(env("MKC_NET"));
  const std::string hca = text_or_empty(env("MKC_IB_HCA"));
  if (mode == "tcp") return {NetBackend::kTcp, "MKC_NET=tcp"};
  if (!mode.empty() && mode != "auto" && mode != "verbs") {
    throw UserError(
        fmt::format("MKC_NET={}: the inter-node transport is tcp, verbs or auto", mode));
  }
  // Verbs is demanded when named, or when a device is: then its failure is an error.
  const bool demanded = mode == "verbs" || !hca.empty();
  const std::string why = mode == "verbs" ? "MKC_NET=verbs" : "MKC_IB_HCA=" + hca;
  std::string reason;
  try {
    const VerbsApi& api = load();
    const VerbsPort port = choose_port(api, hca);
    return {NetBackend::kVerbs,
            fmt::format("MKC_NET={}: {} port {} is active ({})", mode.empty() ? "auto" : mode,
                        port.device, port.port, api.library)};
  } catch (const EnvironmentError& e) {
    if (demanded) throw EnvironmentError(fmt::format("{}, but {}", why, e.what()));
    reason = e.what();
  }
  return {NetBackend::kTcp, "MKC_NET=auto: " + reason};
}

std::unique_ptr<Transport> make_transport(const NetSetup& setup) {
  const EnvFn env = setup.env ? setup.env : EnvFn([](const char* n) { return std::getenv(n); });
  const VerbsLoader load = setup.load_verbs ? setup.load_verbs : VerbsLoader(system_verbs);
  const NetChoice choice = choose_net(env, load);
  std::unique_ptr<Transport> t;
  if (choice.backend == NetBackend::kVerbs) {
    VerbsOptions o;
    o.hca = text_or_empty(env("MKC_IB_HCA"));
    if (const char* q = env("MKC_IB_QP"); q != nullptr && *q != '\0') o.qp = q;
    if (const char* g = env("MKC_IB_GID_INDEX"))
      o.gid_index = parse_index("MKC_IB_GID_INDEX", g, 0, 255);
    t = make_verbs_transport(load(), o);
  } else {
    TcpOptions o;
    if (const char* a = env("MKC_NET_ADDR"); a != nullptr && *a != '\0') {
      o.address = a;
    } else if (!setup.route_to.empty() && setup.route_to != "127.0.0.1" &&
               setup.route_to != "localhost") {
      o.address = local_address_toward(setup.route_to);
    }
    t = make_tcp_transport(o);
  }
  if (!setup.quiet) {
    static std::once_flag said;
    std::call_once(said, [&] {
      std::fprintf(stderr, "mkc: inter-node transport: %s (%s)\n", t->name(),
                   choice.reason.c_str());
    });
  }
  return t;
}

}  // namespace mkc::rt::net
