// The connecting side of the door (Note [The door]): a TCP connection, the
// client's greeting and, with TLS, the client's handshake, all on the
// calling thread with one deadline.
#pragma once

#include <string>

#include "actors/transport/greeting.hpp"
#include "actors/transport/sockets.hpp"
#include "actors/transport/tls_session.hpp"

namespace castor::detail {

enum class DialFailure {
  none,
  unreachable,  // no connection (nobody listens yet, no route): worth retrying
  not_castor,   // something else listens there
  refused,      // the door refused our greeting (`verdict` says why): retrying will not help
  tls,          // the TLS handshake failed
  timeout,      // no answer in time
};

struct Dialed {
  int fd = -1;  // non-blocking, TCP_NODELAY; owned by the receiver
  SslPtr ssl;   // with TLS: the established session
  DialFailure failure = DialFailure::none;
  door::Verdict verdict = door::Verdict::admitted;
  std::string error;  // what went wrong, for an error message that names the peer
  bool ok() const { return fd >= 0; }
};

struct DialOptions {
  door::Key key;
  const TlsContext* tls = nullptr;  // null: plain
  uint16_t wire_version = 0;
  /// Tests only: announce TLS in the greeting without running a handshake
  /// (a stranger that starts its own, or none).
  bool claim_tls = false;
  /// Told of the dial's socket (net::SocketWatch); a dial that succeeds
  /// leaves it watched, for the caller to end.
  net::SocketWatch watch;
};

/// Connects to host:port and passes its door for `purpose`.
Dialed dial(const DialOptions& opts, const std::string& host, uint16_t port, door::Purpose purpose,
            net::Deadline deadline);

}  // namespace castor::detail
