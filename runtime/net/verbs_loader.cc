// load_verbs(): dlopen libibverbs, resolve every entry point, and stand in for the calls verbs.h
// makes inline.
#include "runtime/net/verbs_loader.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <atomic>
#include <cstring>

#include "support/error.h"

namespace mkc::rt::net {
namespace {

// The exported ibv_query_port fills the old, shorter port attributes; verbs.h's inline version
// asks the provider for the full ones when it can, and falls back to it. The same here, with the
// exported function found by dlsym (kept process-wide: one libibverbs per process).
using CompatQueryPort = int (*)(ibv_context*, uint8_t, _compat_ibv_port_attr*);
std::atomic<CompatQueryPort> g_compat_query_port{nullptr};

int real_query_port(ibv_context* ctx, uint8_t port, ibv_port_attr* attr) {
  verbs_context* vctx = verbs_get_ctx_op(ctx, query_port);
  if (vctx == nullptr) {
    std::memset(attr, 0, sizeof(*attr));
    return g_compat_query_port.load()(ctx, port, reinterpret_cast<_compat_ibv_port_attr*>(attr));
  }
  return vctx->query_port(ctx, port, attr, sizeof(*attr));
}
int real_post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
  return ibv_post_send(qp, wr, bad);
}
int real_post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  return ibv_post_recv(qp, wr, bad);
}
int real_poll_cq(ibv_cq* cq, int n, ibv_wc* wc) {
  return ibv_poll_cq(cq, n, wc);
}

}  // namespace

VerbsApi load_verbs(const char* library) {
  void* handle = ::dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = ::dlerror();
    throw EnvironmentError(
        fmt::format("verbs: dlopen(\"{}\") failed: {} (rdma-core's "
                    "libibverbs1 is not installed)",
                    library, why != nullptr ? why : "unknown error"));
  }
  // The handle is never closed: the function pointers live for the process.
  VerbsApi api;
  api.library = library;
#define MKC_RESOLVE(name)                                                     \
  {                                                                           \
    void* fn = ::dlsym(handle, "ibv_" #name);                                 \
    if (fn == nullptr) {                                                      \
      throw EnvironmentError(                                                 \
          fmt::format("verbs: {} has no ibv_{} (a libibverbs too old or not " \
                      "rdma-core's)",                                         \
                      library, #name));                                       \
    }                                                                         \
    api.name = reinterpret_cast<decltype(api.name)>(fn);                      \
  }
  MKC_VERBS_ENTRY_POINTS(MKC_RESOLVE)
#undef MKC_RESOLVE
  api.reg_dmabuf_mr =
      reinterpret_cast<decltype(api.reg_dmabuf_mr)>(::dlsym(handle, "ibv_reg_dmabuf_mr"));
  api.qp_to_qp_ex = reinterpret_cast<decltype(api.qp_to_qp_ex)>(::dlsym(handle, "ibv_qp_to_qp_ex"));
  // AWS EFA's direct verbs, where rdma-core's libefa is installed (it uses the libibverbs just
  // loaded). Without it an EFA device is still listed, but no SRD queue pair can be made.
  if (void* efa = ::dlopen("libefa.so.1", RTLD_NOW | RTLD_LOCAL); efa != nullptr) {
    api.efa_query_device =
        reinterpret_cast<decltype(api.efa_query_device)>(::dlsym(efa, "efadv_query_device"));
    api.efa_create_qp_ex =
        reinterpret_cast<decltype(api.efa_create_qp_ex)>(::dlsym(efa, "efadv_create_qp_ex"));
  }
  auto compat = reinterpret_cast<CompatQueryPort>(::dlsym(handle, "ibv_query_port"));
  if (compat == nullptr) {
    throw EnvironmentError(fmt::format("verbs: {} has no ibv_query_port", library));
  }
  g_compat_query_port.store(compat);
  api.query_port = real_query_port;
  api.post_send = real_post_send;
  api.post_recv = real_post_recv;
  api.poll_cq = real_poll_cq;
  return api;
}

}  // namespace mkc::rt::net
