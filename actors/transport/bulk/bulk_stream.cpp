// Plain or TLS bytes of a bulk link (bulk_stream.hpp).
#include "actors/transport/bulk/bulk_stream.hpp"

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <cerrno>

#include "actors/transport/sockets.hpp"

namespace castor::detail::bulk {
namespace {

// One SSL_read or SSL_write takes an int; a 64 MiB tensor goes in a few calls.
constexpr size_t kMaxCall = size_t(1) << 30;

// T6: the queue is emptied before each call and after a failure. A call
// interrupted by a signal is retried; any other failure ends the link (a
// blocking socket only says "want read/write" when its timeout passed).
template <class Byte, class Call>
bool tls_all(SSL* ssl, Byte* p, size_t n, Call call) {
  while (n > 0) {
    ERR_clear_error();
    errno = 0;
    int done = call(ssl, p, int(std::min(n, kMaxCall)));
    if (done <= 0) {
      int why = SSL_get_error(ssl, done);
      bool interrupted = (why == SSL_ERROR_WANT_READ || why == SSL_ERROR_WANT_WRITE) && errno == EINTR;
      ERR_clear_error();
      if (interrupted) continue;
      return false;
    }
    p += done, n -= size_t(done);
  }
  return true;
}

}  // namespace

// The sending side reads only one-byte answers: no read-ahead (the
// receiver's sessions read ahead: bulk_receiver.cpp).
Stream::Stream(int fd, SslPtr ssl) : fd_(fd), ssl_(std::move(ssl)) {}

bool Stream::write_all(const void* data, size_t n) {
  if (!ssl_) return net::write_all(fd_, data, n);
  return tls_all(ssl_.get(), static_cast<const char*>(data), n,
                 [](SSL* s, const char* p, int k) { return SSL_write(s, p, k); });
}

bool Stream::read_all(void* data, size_t n) {
  if (!ssl_) return net::read_all(fd_, data, n);
  return tls_all(ssl_.get(), static_cast<char*>(data), n, [](SSL* s, char* p, int k) { return SSL_read(s, p, k); });
}

}  // namespace castor::detail::bulk
