// The `tcp` transport: one TCP connection between the proxies of every pair of peers, for hosts
// without RDMA, and for tests and the emulation of several nodes on one host (loopback).
//
// connect(): each rank listens on an ephemeral port of TcpOptions::address, publishes address,
// port and a random nonce through the all_gather, connects to the lower-ranked peers and accepts
// the higher-ranked ones (an introduction carries the acceptor's nonce, so a stray connection is
// dropped, not taken for a rank). Then every socket is non-blocking with TCP_NODELAY.
//
// Messages are a 32-byte header (magic, event, destination offset, bytes, sequence number) and
// the payload, staged through one buffer of TcpOptions::chunk_bytes per connection and direction:
// a send copies its source from the heap into the outgoing buffer (then the source is free: kSent),
// a receive hands the payload out in fragments of at least half a buffer (or the message's end),
// so a heap in GPU memory sees few, large copies. Partial reads and writes are resumed on the next
// poll; the incoming stream is cut by a tcp::StreamReader (runtime/net/tcp_stream.h), whatever
// pieces recv() returns. A peer that closes (without the goodbye close() sends), resets, or makes
// no progress for ConnectParams::timeout while a message is under way is a TransportError naming
// its rank and address.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "runtime/net/transport.h"

namespace mkc::rt::net {

struct TcpOptions {
  // The IPv4 address this rank listens on and gives its peers; empty: 127.0.0.1 (one host).
  std::string address;
  // The staging buffer of a connection, each way.
  size_t chunk_bytes = size_t{1} << 20;
  // Messages a connection can hold queued before send() says no room (at least the ring's slots).
  size_t queue = 1024;
};

std::unique_ptr<Transport> make_tcp_transport(const TcpOptions& options = {});

// The local IPv4 address that traffic to `host` leaves from (a UDP socket is connected, nothing is
// sent): what a multi-node job gives TcpOptions::address. Throws EnvironmentError.
std::string local_address_toward(const std::string& host);

}  // namespace mkc::rt::net
