// A bulk link's bytes (B1, B6 of Note [Bulk path]): plain TCP, or a TLS
// session over it when the cluster runs TLS.
#pragma once

#include <cstddef>
#include <memory>

#include "actors/transport/tls_session.hpp"

namespace castor::detail::bulk {

/// The socket of one bulk link and, with TLS, its session. The socket is
/// blocking and not owned: whoever joins the link's thread closes it (after
/// shutdown() ended that thread's wait). Only one thread uses a stream, the
/// link's writer or its reader, so one OpenSSL session never sees two
/// threads (it would corrupt its state).
class Stream {
 public:
  Stream() = default;
  Stream(int fd, SslPtr ssl);

  int fd() const { return fd_; }
  /// B9 of Note [Bulk path]: plain reads from now on take what the socket
  /// holds, up to 64 KiB, and serve later reads from it. For a link's
  /// reader; a sending side reads only one-byte answers.
  void read_ahead() { read_ahead_ = true; }
  bool tls() const { return ssl_ != nullptr; }

  /// Writes / reads exactly `n` bytes; false when the link ended, broke or
  /// timed out (a socket timeout, shutdown()). With TLS the thread's OpenSSL
  /// error queue is empty afterwards (T6 of Note [TLS]), and writes never
  /// raise SIGPIPE (T7).
  bool write_all(const void* data, size_t n);
  bool read_all(void* data, size_t n);

 private:
  bool read_plain(char* data, size_t n);

  int fd_ = -1;
  SslPtr ssl_;
  // A plain link's reader reads ahead into this buffer (TLS reads ahead in
  // OpenSSL), so that a frame's head and envelope, and the frames queued
  // behind it, come in one recv, not one per field (B9 of Note [Bulk path]).
  bool read_ahead_ = false;
  std::unique_ptr<char[]> ahead_;
  size_t ahead_begin_ = 0, ahead_end_ = 0;
};

}  // namespace castor::detail::bulk
