// Errors of the inter-node transports and the proxy: errno decoded as text and name, and
// TransportError, which says which peer a failure concerns, so the proxy can name the request it
// had in flight to that peer.
#pragma once

#include <string>

#include "support/error.h"

namespace mkc::rt::net {

// "Connection reset by peer (ECONNRESET)"; an unknown value reads "errno 1234".
std::string errno_text(int e);

// A transport call failed, or a peer misbehaved or went away. `peer` is the rank concerned, -1
// when none is (a local setup call). The message already names the call, the decoded errno or
// status, the peer and its address.
class TransportError : public EnvironmentError {
 public:
  TransportError(int peer, const std::string& what) : EnvironmentError(what), peer_(peer) {}
  int peer() const { return peer_; }

 private:
  int peer_;
};

}  // namespace mkc::rt::net
