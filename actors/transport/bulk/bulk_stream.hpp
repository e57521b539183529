// A bulk link's bytes (B1, B6 of Note [Bulk path]): plain TCP, or a TLS
// session over it when the cluster runs TLS.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "actors/transport/tls_session.hpp"

namespace castor::detail::bulk {

/// The sending side of one bulk link: its socket and, with TLS, its
/// session. The socket is blocking and not owned: whoever joins the link's
/// writer closes it (after shutdown() ended that thread's wait). One thread
/// writes at a time (B8), so one OpenSSL session never sees two threads (it
/// would corrupt its state); the receiving side has its own (bulk::Receiver).
class Stream {
 public:
  Stream() = default;
  Stream(int fd, SslPtr ssl);

  int fd() const { return fd_; }

  /// Writes / reads exactly `n` bytes; false when the link ended, broke or
  /// timed out (a socket timeout, shutdown()). With TLS the thread's OpenSSL
  /// error queue is empty afterwards (T6 of Note [TLS]), and writes never
  /// raise SIGPIPE (T7).
  bool write_all(const void* data, size_t n);
  bool read_all(void* data, size_t n);

 private:
  bool send_records();  // sends what the session wrote since the last call (B6)

  int fd_ = -1;
  // With TLS: the session's records of one write (B6), sent in one call.
  // Before ssl_, which uses it until freed (the order covers destruction; a
  // stream is only ever moved into an empty one); on the heap, so that a
  // moved stream's session still finds it.
  std::unique_ptr<std::vector<char>> records_;
  SslPtr ssl_;
};

}  // namespace castor::detail::bulk
