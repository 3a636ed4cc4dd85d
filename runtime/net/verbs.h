// The `verbs` transport: RDMA between the proxies through rdma-core's libibverbs, loaded with
// dlopen (no binary links it: every binary starts without libibverbs and without a NIC).
//
// NOT RUN ON A REAL NIC. No machine this was written on has one; its logic is tested against a
// fake verbs table (tests/runtime/net/fake_verbs.h) that simulates devices, ports, queue pairs,
// memory regions and completions in memory. Expect the first run on hardware to find what a fake
// cannot (provider quirks, RoCE GID choice, dma-buf support of the GPU driver).
//
// The library's entry points are listed once (MKC_VERBS_ENTRY_POINTS and the few that verbs.h
// defines inline, which are reached through the device context's ops), gathered in VerbsApi, a
// table of function pointers the transport calls through and a test replaces. Every call is
// checked; a failure names the call, the decoded errno or completion status, the peer rank and
// its address (device, LID/GID, QP number).
//
// connect(): the device is MKC_IB_HCA's (VerbsOptions::hca: "mlx5_0", "mlx5_0:1", or a comma
// list: the first with an active port), else the first device with an active port. One protection
// domain, one completion queue, one RC queue pair per peer. Connection data (QP number, PSN,
// LID/GID, MTU, memory keys) goes through the all_gather, then the queue pairs are moved to RTR
// and RTS and a second all_gather makes sure every one is ready before any write.
//
// Memory: the heap is registered when MemoryAccess::registration() allows, as a dma-buf
// (ibv_reg_dmabuf_mr: GPU memory, the NIC reads and writes it directly) or as host memory
// (ibv_reg_mr); otherwise the transport stages through host buffers it registers itself. A
// control region holds, per peer, a mailbox of message headers, the outgoing headers and two
// credit words.
//
// A message is sent as fragments (one, unless staging cuts it into chunks): an RDMA WRITE of the
// payload (to the peer's heap, or to its staging slot) and then an RDMA WRITE WITH IMMEDIATE of a
// 64-byte header into the peer's mailbox slot; the immediate (the fragment's sequence number)
// consumes one of the receives the peer keeps posted, and its completion tells the peer's proxy
// the fragment is there (RC queue pairs execute writes in order). The peer hands the fragment out,
// reposts the receive, and returns credits (mailbox slots and staging slots it has freed) with an
// RDMA WRITE into the sender's credit words. Every write is bounded: a completion that does not
// come within ConnectParams::timeout, or credits that stop coming, are errors naming the peer.
//
// The files, one concern each: verbs_loader.h (the entry point table, dlopen), verbs_calls.h
// (checked calls, the text of failures), verbs_wire.h (connection details, mailbox headers,
// credits, work request ids), verbs_port.cc (port choice), verbs_transport.h (the transport's
// state), verbs_connect.cc (registration, queue pairs, their state transitions) and verbs.cc
// (sending, credits, completions, receiving, teardown).
#pragma once

#include <infiniband/verbs.h>

#include <memory>
#include <string>
#include <vector>

#include "runtime/net/transport.h"
#include "runtime/net/verbs_loader.h"

namespace mkc::rt::net {

struct VerbsOptions {
  // MKC_IB_HCA: "mlx5_0", "mlx5_0:1", or a comma list of them; empty: the first active port.
  std::string hca;
  // MKC_IB_GID_INDEX: the GID table entry this rank is addressed by (RoCE needs the right one:
  // `show_gids` lists them; InfiniBand uses the LID and needs none). -1: 0.
  int gid_index = -1;
  // Fragments in flight per peer (mailbox slots), and staging chunks in flight per peer and way.
  int mailbox_slots = 64;
  int staging_slots = 8;
  size_t chunk_bytes = size_t{1} << 20;
  // Messages queued per peer before send() says no room (at least the ring's slots).
  size_t queue = 1024;
  // RC queue pair settings: local ACK timeout (4.096 us * 2^timeout), retries.
  int ack_timeout = 14;
  int retry_count = 7;
  int rnr_retry = 7;
  // MKC_IB_QP: the queue pair type. "auto": SRD on an AWS EFA device (it has no RC), RC on any
  // other; "rc" or "srd" insist (an error where the device cannot).
  std::string qp = "auto";
};

// A device port that is active, as chosen for this rank.
struct VerbsPort {
  std::string device;
  int port = 0;
  ibv_port_attr attr{};
};

// The port MKC_IB_HCA (`hca`) names, or the first active one. Throws EnvironmentError: no device
// (listing why), an MKC_IB_HCA entry that names no device (listing those found), no active port
// (listing each device's ports and their states).
VerbsPort choose_port(const VerbsApi& api, const std::string& hca);

// Opens the device named `name` (as listed by ibv_get_device_list). Throws TransportError naming
// the call and `where` when it fails or the device is gone.
ibv_context* open_named_device(const VerbsApi& api, const std::string& name,
                               const std::string& where);

// Whether `ctx` is an AWS EFA device (libefa loaded and efadv_query_device answers for it); its
// attributes in `attr` when it is.
bool is_efa_device(const VerbsApi& api, ibv_context* ctx, efadv_device_attr* attr);

// The transport, calling through `api` (which must outlive it): RC queue pairs, or EFA's SRD
// (verbs_srd.h) as VerbsOptions::qp and the chosen device say, decided at connect().
std::unique_ptr<Transport> make_verbs_transport(const VerbsApi& api, const VerbsOptions& options);
// The two paths themselves (tests): RC queue pairs (verbs.cc), and EFA's SRD (verbs_srd.h).
std::unique_ptr<Transport> make_rc_transport(const VerbsApi& api, const VerbsOptions& options);
std::unique_ptr<Transport> make_srd_transport(const VerbsApi& api, const VerbsOptions& options);

// "transport retry counter exceeded (IBV_WC_RETRY_EXC_ERR, status 12)", with a hint for the
// statuses a vanished or refusing peer gives.
std::string describe_wc_status(const VerbsApi& api, ibv_wc_status status);

}  // namespace mkc::rt::net
