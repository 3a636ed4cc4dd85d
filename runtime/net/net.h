// Which transport a job's proxies use, from the environment:
//   MKC_NET=tcp     sockets (runtime/net/tcp.h), on any host;
//   MKC_NET=verbs   RDMA (runtime/net/verbs.h); no libibverbs or no active port is an error;
//   MKC_NET=auto    (or unset) verbs when libibverbs loads and an active port exists, else tcp.
//                   With MKC_IB_HCA set, a port it names that cannot be used is an error, not a
//                   quiet fall back: whoever set it wanted RDMA.
// make_transport() says what it chose, and why, once per process on stderr.
//
// The other variables: MKC_IB_HCA (device[:port][,...]: verbs.h), MKC_IB_QP (rc, srd or auto:
// SRD on AWS EFA, RC elsewhere), MKC_IB_GID_INDEX (the GID entry RoCE ports are addressed by),
// MKC_NET_ADDR (the IPv4 address the tcp transport listens on and gives its peers; default: the
// local address toward NetSetup::route_to, or 127.0.0.1).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "runtime/net/transport.h"
#include "runtime/net/verbs.h"

namespace mkc::rt::net {

// getenv, or a map in tests.
using EnvFn = std::function<const char*(const char*)>;

// libibverbs' table: the system's (load_verbs, once per process) unless a test gives a fake. It
// must outlive the transports made with it. Throws EnvironmentError when it cannot be loaded.
using VerbsLoader = std::function<const VerbsApi&()>;

// The process's libibverbs, loaded on first use (a failed load is tried again next time).
const VerbsApi& system_verbs();

enum class NetBackend { kTcp, kVerbs };

struct NetChoice {
  NetBackend backend = NetBackend::kTcp;
  // Why, for the one line on stderr: "MKC_NET=auto: no active RDMA port: mlx5_0 port 1: down".
  std::string reason;
};

// Throws UserError for an MKC_NET that is none of tcp, verbs, auto; EnvironmentError when verbs
// is demanded (MKC_NET=verbs, or MKC_IB_HCA set) and cannot be had.
NetChoice choose_net(const EnvFn& env, const VerbsLoader& load);

struct NetSetup {
  EnvFn env;               // empty: getenv
  VerbsLoader load_verbs;  // empty: system_verbs
  // An address the job's ranks reach each other by (MASTER_ADDR): the tcp transport listens on
  // this host's address toward it. Empty or loopback: 127.0.0.1.
  std::string route_to;
  // Do not print the choice (tests).
  bool quiet = false;
};

// The transport MKC_NET picks, configured from the variables above.
std::unique_ptr<Transport> make_transport(const NetSetup& setup = {});

}  // namespace mkc::rt::net
