// Connecting the SRD path (verbs_srd.h): the EFA device's port, memory registration for reads,
// one SRD queue pair per peer and its moves from RESET to RTS, the exchange of GIDs and queue pair
// numbers, and an address handle per peer.
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "runtime/net/verbs_calls.h"
#include "runtime/net/verbs_srd.h"

namespace mkc::rt::net::verbs {

void SrdTransport::connect(const ConnectParams& params, MemoryAccess& heap) {
  check_connect(params, connected_, "verbs (srd)");
  rank_ = params.rank;
  world_ = params.world;
  timeout_ = params.timeout;
  heap_ = &heap;
  try {
    port_ = choose_port(api_, options_.hca);
    const std::string here = fmt::format(" (rank {}, {} port {})", rank_, port_.device, port_.port);
    if (api_.efa_create_qp_ex == nullptr || api_.qp_to_qp_ex == nullptr) {
      throw EnvironmentError(fmt::format(
          "verbs (srd): {} has no {}: SRD queue pairs need rdma-core's libefa.so.1 and the "
          "extended work-request API (rdma-core 26 or later){}",
          api_.library, api_.efa_create_qp_ex == nullptr ? "efadv_create_qp_ex" : "ibv_qp_to_qp_ex",
          here));
    }
    dev_.ctx = open_named_device(api_, port_.device, here);
    if (!is_efa_device(api_, dev_.ctx, &efa_)) {
      throw EnvironmentError(fmt::format(
          "verbs (srd): {} is not an EFA device (efadv_query_device refuses it): SRD queue pairs "
          "exist on AWS EFA only; set MKC_IB_QP=rc or auto{}",
          port_.device, here));
    }
    if ((efa_.device_caps & EFADV_DEVICE_ATTR_CAPS_RDMA_READ) == 0) {
      throw EnvironmentError(fmt::format(
          "verbs (srd): EFA device {} cannot do RDMA reads (device_caps {:#x}; EFA's first "
          "generation): mkc's SRD path reads every payload; use MKC_NET=tcp{}",
          port_.device, efa_.device_caps, here));
    }
    ibv_device_attr dev{};
    MKC_IBV(api_, query_device, -1, here, dev_.ctx, &dev);
    MKC_IBV(api_, query_port, -1, here, dev_.ctx, static_cast<uint8_t>(port_.port), &port_.attr);
    gid_index_ = std::max(0, options_.gid_index);
    MKC_IBV(api_, query_gid, -1, here, dev_.ctx, static_cast<uint8_t>(port_.port), gid_index_,
            &gid_);
    if (efa_.max_rdma_size > 0) {
      max_fragment_ = std::min<int64_t>(max_fragment_, static_cast<int64_t>(efa_.max_rdma_size));
    }
    dev_.pd = MKC_IBV_PTR(api_, alloc_pd, -1, here, dev_.ctx);

    std::vector<int> mine = params.peers;
    std::sort(mine.begin(), mine.end());
    const size_t npeers = mine.size();
    const int m = options_.mailbox_slots;
    // Headers (m), reads of the peer's fragments (m), one credit message, one goodbye.
    const int max_sq = efa_.max_sq_wr > 0 ? static_cast<int>(efa_.max_sq_wr) : dev.max_qp_wr;
    sq_depth_ = 2 * m + 2;
    if (max_sq < sq_depth_) {
      throw EnvironmentError(fmt::format(
          "verbs (srd): {} takes {} sends per queue pair, this transport needs {} for {} "
          "fragments in flight{}",
          port_.device, max_sq, sq_depth_, m, here));
    }
    // Receive buffers: the peer's headers in flight (at most m: it needs this rank's credits for
    // more), its goodbye, and its credit messages, of which at most m + 1 can arrive between two
    // polls of this rank (each follows a fragment this rank announced). No receive-not-ready.
    const int max_rq = efa_.max_rq_wr > 0 ? static_cast<int>(efa_.max_rq_wr) : dev.max_qp_wr;
    inbox_ = 2 * m + 4;
    if (max_rq < inbox_) {
      throw EnvironmentError(fmt::format(
          "verbs (srd): {} takes {} receives per queue pair, this transport needs {} for {} "
          "fragments in flight{}",
          port_.device, max_rq, inbox_, m, here));
    }
    const int cqe =
        std::min(std::max(16, dev.max_cqe), static_cast<int>(npeers) * (sq_depth_ + inbox_) + 16);
    dev_.cq = MKC_IBV_PTR(api_, create_cq, -1, here, dev_.ctx, cqe, nullptr, nullptr, 0);
    wcs_.resize(64);

    // For reads both ways: the peers read its sources, this rank's reads land in it.
    dev_.register_heap(heap, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ, "verbs (srd)", rank_,
                       here);
    peers_.assign(world_, mine);
    const size_t per_peer_ctrl =
        (static_cast<size_t>(inbox_) + static_cast<size_t>(m) + 1) * sizeof(Ctl);
    ctrl_.allocate(per_peer_ctrl * std::max<size_t>(npeers, 1));
    dev_.ctrl_mr = MKC_IBV_PTR(api_, reg_mr, -1, here, dev_.pd, ctrl_.data.get(), ctrl_.bytes,
                               IBV_ACCESS_LOCAL_WRITE);
    const size_t chunk = options_.chunk_bytes;
    const size_t slots = static_cast<size_t>(options_.staging_slots);
    if (!dev_.direct && npeers > 0) {
      stage_.allocate(2 * slots * chunk * npeers);
      dev_.stage_mr = MKC_IBV_PTR(api_, reg_mr, -1, here, dev_.pd, stage_.data.get(), stage_.bytes,
                                  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
    }
    for (size_t i = 0; i < npeers; ++i) {
      Peer& p = peers_[i];
      char* base = ctrl_.data.get() + i * per_peer_ctrl;
      p.inbox = reinterpret_cast<Ctl*>(base);
      p.headers = p.inbox + inbox_;
      p.credit = p.headers + m;
      if (!dev_.direct) {
        p.recv_stage = stage_.data.get() + i * 2 * slots * chunk;
        p.send_stage = p.recv_stage + slots * chunk;
      }
      p.queue.set_capacity(options_.queue);
      p.sent.resize(static_cast<size_t>(m));
      p.window.resize(static_cast<size_t>(m));
      make_qp(p, i);
    }

    SrdHead head{};
    head.chunk_bytes = chunk;
    head.port = static_cast<uint32_t>(port_.port);
    head.qkey = kSrdQkey;
    head.mailbox_slots = static_cast<uint32_t>(m);
    head.staging_slots = static_cast<uint32_t>(slots);
    head.gid_index = static_cast<uint32_t>(gid_index_);
    head.direct = dev_.direct ? 1 : 0;
    head.max_fragment = static_cast<uint32_t>(max_fragment_);
    std::memcpy(head.gid, gid_.raw, sizeof(head.gid));
    std::snprintf(head.device, sizeof(head.device), "%s", port_.device.c_str());
    std::vector<SrdPeer> entries;
    for (const Peer& p : peers_) entries.push_back(SrdPeer{p.rank, p.qp->qp_num});
    auto details = exchange_details(params, head, entries, kSrdDetails);
    for (Peer& p : peers_) {
      SrdHead& h = details[static_cast<size_t>(p.rank)].head;
      h.device[sizeof(h.device) - 1] = '\0';
      const std::vector<SrdPeer>& es = details[static_cast<size_t>(p.rank)].entries;
      const auto e =
          std::find_if(es.begin(), es.end(), [&](const SrdPeer& x) { return x.rank == rank_; });
      p.remote_qpn = e->qpn;
      p.remote_direct = h.direct != 0;
      // Fragments the reader's device can read whole: ranks on different EFA generations agree.
      p.max_fragment = std::min<int64_t>(max_fragment_, std::max<uint32_t>(h.max_fragment, 4096));
      p.address = fmt::format("{}:{} gid {} qpn {:#x}", h.device, h.port, gid_text(h.gid), e->qpn);
      if (h.mailbox_slots != static_cast<uint32_t>(m) || h.staging_slots != slots ||
          h.chunk_bytes != chunk || h.qkey != kSrdQkey) {
        fail(p, fmt::format("its proxy has {} mailbox slots, {} staging slots of {} bytes; this "
                            "rank {}, {} of {}: every rank must have the same settings",
                            h.mailbox_slots, h.staging_slots, h.chunk_bytes, m, slots, chunk));
      }
      ibv_ah_attr ah{};
      ah.is_global = 1;
      std::memcpy(ah.grh.dgid.raw, h.gid, sizeof(h.gid));
      ah.grh.sgid_index = static_cast<uint8_t>(gid_index_);
      ah.grh.hop_limit = 255;
      ah.port_num = static_cast<uint8_t>(port_.port);
      p.ah = MKC_IBV_PTR(api_, create_ah, p.rank,
                         fmt::format(" (rank {}, toward rank {} at {})", rank_, p.rank, p.address),
                         dev_.pd, &ah);
    }
    // Every queue pair has its receives posted before anyone sends.
    params.all_gather(std::string());
  } catch (...) {
    release();
    throw;
  }
  connected_ = true;
}

void SrdTransport::make_qp(Peer& p, size_t index) {
  const std::string where = for_peer(p.rank);
  ibv_qp_init_attr_ex init{};
  init.qp_type = IBV_QPT_DRIVER;
  init.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  init.pd = dev_.pd;
  init.send_cq = dev_.cq;
  init.recv_cq = dev_.cq;
  init.sq_sig_all = 1;
  init.cap.max_send_wr = static_cast<uint32_t>(sq_depth_);
  init.cap.max_recv_wr = static_cast<uint32_t>(inbox_);
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  init.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_READ;
  efadv_qp_init_attr efa{};
  efa.driver_qp_type = EFADV_QP_DRIVER_TYPE_SRD;
  errno = 0;
  p.qp = api_.efa_create_qp_ex(dev_.ctx, &init, &efa, sizeof(efa));
  if (p.qp == nullptr)
    throw_call("efadv_create_qp_ex", errno ? errno : EIO, p.rank, where, __FILE__, __LINE__);
  p.qpx = MKC_IBV_PTR(api_, qp_to_qp_ex, p.rank, where, p.qp);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = static_cast<uint8_t>(port_.port);
  a.qkey = kSrdQkey;
  MKC_IBV(api_, modify_qp, p.rank, where + " to INIT", p.qp, &a,
          IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
  ibv_qp_attr r{};
  r.qp_state = IBV_QPS_RTR;
  MKC_IBV(api_, modify_qp, p.rank, where + " to RTR", p.qp, &r, IBV_QP_STATE);
  ibv_qp_attr s{};
  s.qp_state = IBV_QPS_RTS;
  s.sq_psn = 0;
  int mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
  // Where the device lets it be set, 7: retry without end while the peer has no receive posted
  // (the receive buffers are sized so that it always has; this is a second line).
  if (efa_.device_caps & EFADV_DEVICE_ATTR_CAPS_RNR_RETRY) {
    s.rnr_retry = 7;
    mask |= IBV_QP_RNR_RETRY;
  }
  MKC_IBV(api_, modify_qp, p.rank, where + " to RTS", p.qp, &s, mask);
  for (int k = 0; k < inbox_; ++k) post_recv(p, index, static_cast<uint64_t>(k));
}

void SrdTransport::release() {
  for (Peer& p : peers_) {
    if (p.ah != nullptr) api_.destroy_ah(p.ah);
    if (p.qp != nullptr) api_.destroy_qp(p.qp);
    p.ah = nullptr;
    p.qp = nullptr;
    p.qpx = nullptr;
  }
  dev_.release();
}

}  // namespace mkc::rt::net::verbs
