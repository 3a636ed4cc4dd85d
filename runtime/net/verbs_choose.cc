// make_verbs_transport(): which queue pairs a rank's verbs transport uses, decided at connect()
// from VerbsOptions::qp and the device the port choice lands on: SRD on AWS EFA (which has no
// RC), RC elsewhere. The transport it returns hands every call to the path it chose.
#include <fmt/format.h>

#include "runtime/net/verbs.h"

namespace mkc::rt::net {
namespace {

class ChosenVerbs final : public Transport {
 public:
  ChosenVerbs(const VerbsApi& api, const VerbsOptions& options) : api_(api), options_(options) {}

  const char* name() const override { return path_ ? path_->name() : "verbs"; }

  void connect(const ConnectParams& params, MemoryAccess& heap) override {
    check_connect(params, path_ != nullptr, "verbs");
    const std::string& qp = options_.qp;
    if (qp != "auto" && qp != "rc" && qp != "srd") {
      throw UserError(fmt::format("MKC_IB_QP={}: the queue pair type is rc, srd or auto", qp));
    }
    const VerbsPort port = choose_port(api_, options_.hca);
    const std::string here =
        fmt::format(" (rank {}, {} port {})", params.rank, port.device, port.port);
    ibv_context* ctx = open_named_device(api_, port.device, here);
    efadv_device_attr attr{};
    const bool efa = is_efa_device(api_, ctx, &attr);
    api_.close_device(ctx);
    if (qp == "rc" && efa) {
      throw EnvironmentError(fmt::format(
          "verbs: MKC_IB_QP=rc, but {} is an AWS EFA device, which has no RC queue pairs: set "
          "MKC_IB_QP=srd or auto{}",
          port.device, here));
    }
    const bool srd = qp == "srd" || (qp == "auto" && efa);
    path_ = srd ? make_srd_transport(api_, options_) : make_rc_transport(api_, options_);
    path_->connect(params, heap);
  }

  bool send(int peer, const MessageHeader& header, int64_t src_offset, uint64_t cookie) override {
    if (!path_) {
      throw TransportError(peer, fmt::format("verbs: a message to rank {} before connect()", peer));
    }
    return path_->send(peer, header, src_offset, cookie);
  }
  size_t poll(Completion* out, size_t max) override { return path_ ? path_->poll(out, max) : 0; }
  std::string peer_address(int peer) const override {
    return path_ ? path_->peer_address(peer) : "not connected";
  }
  void close() override {
    if (path_) path_->close();
  }

 private:
  const VerbsApi& api_;
  VerbsOptions options_;
  std::unique_ptr<Transport> path_;
};

}  // namespace

std::unique_ptr<Transport> make_verbs_transport(const VerbsApi& api, const VerbsOptions& options) {
  return std::make_unique<ChosenVerbs>(api, options);
}

}  // namespace mkc::rt::net
