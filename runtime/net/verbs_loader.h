// Loading libibverbs: the table of its entry points the verbs transport calls through
// (VerbsApi), and load_verbs(), which fills it from a dlopen'd library. No binary links
// libibverbs; a test gives a fake table instead (tests/runtime/net/fake_verbs.h).
#pragma once

#include <infiniband/efadv.h>
#include <infiniband/verbs.h>

#include <string>

namespace mkc::rt::net {

// X-macro: every entry point libibverbs exports that the transport uses, without the ibv_ prefix
// (some of the prefixed names are macros in verbs.h). Typed from the header's declarations.
#define MKC_VERBS_ENTRY_POINTS(X) \
  X(get_device_list)              \
  X(free_device_list)             \
  X(get_device_name)              \
  X(open_device)                  \
  X(close_device)                 \
  X(query_device)                 \
  X(query_gid)                    \
  X(alloc_pd)                     \
  X(dealloc_pd)                   \
  X(create_cq)                    \
  X(destroy_cq)                   \
  X(create_qp)                    \
  X(destroy_qp)                   \
  X(modify_qp)                    \
  X(reg_mr)                       \
  X(dereg_mr)                     \
  X(create_ah)                    \
  X(destroy_ah)                   \
  X(wc_status_str)

// The library's functions, and the calls verbs.h makes inline (through the context's ops).
struct VerbsApi {
#define MKC_VERBS_MEMBER(name) decltype(&::ibv_##name) name = nullptr;
  MKC_VERBS_ENTRY_POINTS(MKC_VERBS_MEMBER)
#undef MKC_VERBS_MEMBER
  // rdma-core 34 and later; null when the library lacks it (then GPU memory is staged).
  decltype(&::ibv_reg_dmabuf_mr) reg_dmabuf_mr = nullptr;
  // rdma-core 26 and later (the extended work-request API, which EFA's SRD queue pairs need for
  // RDMA reads; the wr_* calls themselves are reached through the ibv_qp_ex it returns); null
  // when the library lacks it.
  decltype(&::ibv_qp_to_qp_ex) qp_to_qp_ex = nullptr;
  // libefa.so.1 (AWS EFA's direct verbs), loaded beside libibverbs when it is there; null
  // otherwise (then no device is taken for an EFA device, and SRD is not offered).
  decltype(&::efadv_query_device) efa_query_device = nullptr;
  decltype(&::efadv_create_qp_ex) efa_create_qp_ex = nullptr;
  // Inline in verbs.h; the loaded table points them at the context's ops.
  int (*query_port)(ibv_context*, uint8_t, ibv_port_attr*) = nullptr;
  int (*post_send)(ibv_qp*, ibv_send_wr*, ibv_send_wr**) = nullptr;
  int (*post_recv)(ibv_qp*, ibv_recv_wr*, ibv_recv_wr**) = nullptr;
  int (*poll_cq)(ibv_cq*, int, ibv_wc*) = nullptr;
  // Where it came from: "libibverbs.so.1", or a fake's name.
  std::string library;
};

// Loads `library` with dlopen and resolves every entry point. Throws EnvironmentError naming the
// library and the dlopen error, or the entry point it lacks. The handle stays open for the process.
VerbsApi load_verbs(const char* library = "libibverbs.so.1");

}  // namespace mkc::rt::net
