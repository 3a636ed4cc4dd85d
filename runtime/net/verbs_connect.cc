// Connecting the verbs transport: opening the chosen port's device, memory registration, one
// queue pair per peer, the exchange of connection details, and the queue pairs' moves from RESET
// to INIT, RTR and RTS.
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>

#include "runtime/net/verbs_calls.h"
#include "runtime/net/verbs_transport.h"

namespace mkc::rt::net::verbs {

void VerbsTransport::connect(const ConnectParams& params, MemoryAccess& heap) {
  check_connect(params, connected_, "verbs");
  rank_ = params.rank;
  world_ = params.world;
  timeout_ = params.timeout;
  heap_ = &heap;
  try {
    port_ = choose_port(api_, options_.hca);
    const std::string here = fmt::format(" (rank {}, {} port {})", rank_, port_.device, port_.port);
    dev_.ctx = open_named_device(api_, port_.device, here);
    ibv_device_attr dev{};
    MKC_IBV(api_, query_device, -1, here, dev_.ctx, &dev);
    MKC_IBV(api_, query_port, -1, here, dev_.ctx, static_cast<uint8_t>(port_.port), &port_.attr);
    gid_index_ = std::max(0, options_.gid_index);
    MKC_IBV(api_, query_gid, -1, here, dev_.ctx, static_cast<uint8_t>(port_.port), gid_index_,
            &gid_);
    if (port_.attr.max_msg_sz > 0) {
      max_fragment_ = std::min<int64_t>(max_fragment_, static_cast<int64_t>(port_.attr.max_msg_sz));
    }
    dev_.pd = MKC_IBV_PTR(api_, alloc_pd, -1, here, dev_.ctx);

    std::vector<int> mine = params.peers;
    std::sort(mine.begin(), mine.end());
    const size_t npeers = mine.size();
    const int m = options_.mailbox_slots;
    // Fragments (payload + header), one credit update, one goodbye.
    sq_depth_ = std::min(2 * m + 2, std::max(8, dev.max_qp_wr));
    const int cqe =
        std::min(std::max(16, dev.max_cqe), static_cast<int>(npeers) * (sq_depth_ + m) + 16);
    dev_.cq = MKC_IBV_PTR(api_, create_cq, -1, here, dev_.ctx, cqe, nullptr, nullptr, 0);
    wcs_.resize(64);

    dev_.register_heap(heap, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, "verbs", rank_,
                       fmt::format(" (rank {})", rank_));
    const size_t per_peer_ctrl = 2 * static_cast<size_t>(m) * sizeof(Mail) + 2 * sizeof(Credits);
    ctrl_.allocate(per_peer_ctrl * std::max<size_t>(npeers, 1));
    const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
    dev_.ctrl_mr =
        MKC_IBV_PTR(api_, reg_mr, -1, here, dev_.pd, ctrl_.data.get(), ctrl_.bytes, access);
    const size_t chunk = options_.chunk_bytes;
    const size_t stage_slots = static_cast<size_t>(options_.staging_slots);
    if (!dev_.direct && npeers > 0) {
      stage_.allocate(2 * stage_slots * chunk * npeers);
      dev_.stage_mr =
          MKC_IBV_PTR(api_, reg_mr, -1, here, dev_.pd, stage_.data.get(), stage_.bytes, access);
    }

    peers_.assign(world_, mine);
    std::mt19937 rng(std::random_device{}());
    for (size_t i = 0; i < npeers; ++i) {
      Peer& p = peers_[i];
      p.ctrl_offset = i * per_peer_ctrl;
      char* base = ctrl_.data.get() + p.ctrl_offset;
      p.mailbox = reinterpret_cast<Mail*>(base);
      p.headers = reinterpret_cast<Mail*>(base + static_cast<size_t>(m) * sizeof(Mail));
      p.credits_in = reinterpret_cast<Credits*>(base + 2 * static_cast<size_t>(m) * sizeof(Mail));
      p.credits_out = p.credits_in + 1;
      if (!dev_.direct) {
        p.stage_offset = i * 2 * stage_slots * chunk;
        p.recv_stage = stage_.data.get() + p.stage_offset;
        p.send_stage = p.recv_stage + stage_slots * chunk;
      }
      p.psn = rng() & 0xffffff;
      p.queue.set_capacity(options_.queue);
      p.slots.resize(static_cast<size_t>(m));
      ibv_qp_init_attr init{};
      init.send_cq = dev_.cq;
      init.recv_cq = dev_.cq;
      init.qp_type = IBV_QPT_RC;
      init.sq_sig_all = 0;
      init.cap.max_send_wr = static_cast<uint32_t>(sq_depth_);
      init.cap.max_recv_wr = static_cast<uint32_t>(m);
      init.cap.max_send_sge = 1;
      init.cap.max_recv_sge = 1;
      p.qp = MKC_IBV_PTR(api_, create_qp, p.rank, for_peer(p.rank), dev_.pd, &init);
      to_init(p);
      for (int k = 0; k < m; ++k) post_recv(p, i);
    }

    BlobHead head{};
    head.port = static_cast<uint32_t>(port_.port);
    head.link_layer = port_.attr.link_layer;
    head.active_mtu = static_cast<uint32_t>(port_.attr.active_mtu);
    head.lid = port_.attr.lid;
    head.gid_index = static_cast<uint32_t>(gid_index_);
    head.direct = dev_.direct ? 1 : 0;
    head.heap_base = dev_.heap_base;
    head.heap_bytes = static_cast<uint64_t>(heap.size());
    head.heap_rkey = dev_.heap_mr != nullptr ? dev_.heap_mr->rkey : 0;
    head.ctrl_base = reinterpret_cast<uintptr_t>(ctrl_.data.get());
    head.ctrl_rkey = dev_.ctrl_mr->rkey;
    head.stage_base = reinterpret_cast<uintptr_t>(stage_.data.get());
    head.stage_rkey = dev_.stage_mr != nullptr ? dev_.stage_mr->rkey : 0;
    head.mailbox_slots = static_cast<uint32_t>(m);
    head.staging_slots = static_cast<uint32_t>(stage_slots);
    head.chunk_bytes = chunk;
    std::memcpy(head.gid, gid_.raw, sizeof(head.gid));
    std::snprintf(head.device, sizeof(head.device), "%s", port_.device.c_str());
    std::vector<BlobPeer> entries;
    for (const Peer& p : peers_) {
      entries.push_back(BlobPeer{p.ctrl_offset, p.stage_offset, p.rank, p.qp->qp_num, p.psn, 0});
    }
    auto details = exchange_details(params, head, entries, kDetails);
    for (Peer& p : peers_) {
      BlobHead& h = details[static_cast<size_t>(p.rank)].head;
      h.device[sizeof(h.device) - 1] = '\0';
      const std::vector<BlobPeer>& es = details[static_cast<size_t>(p.rank)].entries;
      const auto e =
          std::find_if(es.begin(), es.end(), [&](const BlobPeer& x) { return x.rank == rank_; });
      const bool ethernet = h.link_layer == IBV_LINK_LAYER_ETHERNET;
      p.address =
          ethernet
              ? fmt::format("{}:{} gid {} qpn {:#x}", h.device, h.port, gid_text(h.gid), e->qpn)
              : fmt::format("{}:{} lid {:#x} qpn {:#x}", h.device, h.port, h.lid, e->qpn);
      if (h.mailbox_slots != static_cast<uint32_t>(m) || h.staging_slots != stage_slots ||
          h.chunk_bytes != chunk) {
        fail(p,
             fmt::format("its proxy has {} mailbox slots, {} staging slots of {} bytes; this "
                         "rank {}, {} of {}: every rank must have the same settings",
                         h.mailbox_slots, h.staging_slots, h.chunk_bytes, m, stage_slots, chunk));
      }
      if (h.link_layer != port_.attr.link_layer) {
        fail(p, "its port's link layer (InfiniBand or Ethernet) differs from this rank's");
      }
      p.remote_direct = h.direct != 0;
      p.remote_heap_base = h.heap_base;
      p.remote_heap_rkey = h.heap_rkey;
      p.remote_ctrl_rkey = h.ctrl_rkey;
      p.remote_stage_rkey = h.stage_rkey;
      p.remote_mailbox = h.ctrl_base + e->ctrl_offset;
      p.remote_credits = p.remote_mailbox + 2 * static_cast<uint64_t>(m) * sizeof(Mail);
      p.remote_stage = h.stage_base + e->stage_offset;
      to_rtr_rts(p, h, *e);
    }
    // Every queue pair is ready to receive before anyone writes.
    params.all_gather(std::string());
  } catch (...) {
    release();
    throw;
  }
  connected_ = true;
}

void DeviceResources::register_heap(MemoryAccess& heap, int access, const char* transport, int rank,
                                    const std::string& here) {
  const HeapRegistration reg = heap.registration();
  const size_t bytes = static_cast<size_t>(heap.size());
  if (bytes == 0) return;
  if (reg.dmabuf_fd >= 0 && api->reg_dmabuf_mr != nullptr) {
    errno = 0;
    heap_mr =
        api->reg_dmabuf_mr(pd, reg.dmabuf_offset, bytes, reg.device_address, reg.dmabuf_fd, access);
    if (heap_mr != nullptr) {
      direct = true;
      heap_base = reg.device_address;
      return;
    }
    // The GPU driver or the NIC may not do dma-buf (no peer memory support): staging still works.
    std::fprintf(stderr,
                 "mkc: %s: rank %d: ibv_reg_dmabuf_mr of the heap failed (%s); staging through "
                 "host memory instead\n",
                 transport, rank, errno_text(errno ? errno : EIO).c_str());
  }
  if (reg.host_address != nullptr) {
    heap_mr =
        MKC_IBV_PTR(*api, reg_mr, -1, " of the heap" + here, pd, reg.host_address, bytes, access);
    direct = true;
    heap_base = reinterpret_cast<uintptr_t>(reg.host_address);
  }
}

void DeviceResources::release() {
  if (heap_mr != nullptr) api->dereg_mr(heap_mr);
  if (ctrl_mr != nullptr) api->dereg_mr(ctrl_mr);
  if (stage_mr != nullptr) api->dereg_mr(stage_mr);
  heap_mr = ctrl_mr = stage_mr = nullptr;
  if (cq != nullptr) api->destroy_cq(cq);
  cq = nullptr;
  if (pd != nullptr) api->dealloc_pd(pd);
  pd = nullptr;
  if (ctx != nullptr) api->close_device(ctx);
  ctx = nullptr;
}

void VerbsTransport::to_init(Peer& p) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = static_cast<uint8_t>(port_.port);
  a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  MKC_IBV(api_, modify_qp, p.rank, for_peer(p.rank) + " to INIT", p.qp, &a,
          IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

void VerbsTransport::to_rtr_rts(Peer& p, const BlobHead& remote, const BlobPeer& entry) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = static_cast<ibv_mtu>(std::min<uint32_t>(port_.attr.active_mtu, remote.active_mtu));
  a.dest_qp_num = entry.qpn;
  a.rq_psn = entry.psn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.port_num = static_cast<uint8_t>(port_.port);
  a.ah_attr.dlid = static_cast<uint16_t>(remote.lid);
  // RoCE has no LIDs: the GID addresses the peer (and on InfiniBand when its LID is not set).
  if (remote.link_layer == IBV_LINK_LAYER_ETHERNET || remote.lid == 0) {
    a.ah_attr.is_global = 1;
    std::memcpy(a.ah_attr.grh.dgid.raw, remote.gid, sizeof(remote.gid));
    a.ah_attr.grh.sgid_index = static_cast<uint8_t>(gid_index_);
    a.ah_attr.grh.hop_limit = 64;
  }
  MKC_IBV(api_, modify_qp, p.rank, fmt::format(" to RTR, toward rank {} at {}", p.rank, p.address),
          p.qp, &a,
          IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
              IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  ibv_qp_attr s{};
  s.qp_state = IBV_QPS_RTS;
  s.timeout = static_cast<uint8_t>(options_.ack_timeout);
  s.retry_cnt = static_cast<uint8_t>(options_.retry_count);
  s.rnr_retry = static_cast<uint8_t>(options_.rnr_retry);
  s.sq_psn = p.psn;
  s.max_rd_atomic = 1;
  MKC_IBV(api_, modify_qp, p.rank, fmt::format(" to RTS, toward rank {} at {}", p.rank, p.address),
          p.qp, &s,
          IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
              IBV_QP_MAX_QP_RD_ATOMIC);
}

}  // namespace mkc::rt::net::verbs
