// Plain or TLS bytes of a bulk link (bulk_stream.hpp).
#include "actors/transport/bulk/bulk_stream.hpp"

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <cerrno>
#include <new>
#include <stdexcept>
#include <vector>

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

// The session's records are appended to the stream's buffer, which
// write_all sends in one call (B6).
int collect_write(BIO* b, const char* data, int len) {
  auto* out = static_cast<std::vector<char>*>(BIO_get_data(b));
  try {
    out->insert(out->end(), data, data + len);
  } catch (const std::bad_alloc&) {
    return -1;  // no exception crosses OpenSSL's frames: the write fails, the link ends
  }
  return len;
}

long collect_ctrl(BIO*, int cmd, long, void*) { return cmd == BIO_CTRL_FLUSH ? 1 : 0; }

// Null without memory, and then the stream cannot be made. The buffer is
// the stream's; the session only writes into it.
BIO_METHOD* collect_method() {
  static BIO_METHOD* method =
      new_bio_method(BIO_TYPE_SOURCE_SINK, "castor record collector", collect_write, nullptr, collect_ctrl);
  return method;
}

// B6: how much plaintext one socket write carries at most, in 16 KiB
// records. Measured with a 64 MiB echo across TCP, alternating runs: 64 KiB
// took 1.2x the time of 256 KiB, 1 MiB the same.
constexpr size_t kCollectBytes = size_t(256) * 1024;
// A buffer grown past this by a large message is freed after it: an idle
// link of a large world keeps no quarter MiB.
constexpr size_t kKeepBytes = size_t(64) * 1024;

}  // namespace

// The sending side reads only one-byte answers: no read-ahead (the
// receiver's sessions read ahead: bulk_receiver.cpp).
Stream::Stream(int fd, SslPtr ssl) : fd_(fd), ssl_(std::move(ssl)) {
  if (!ssl_) return;
  records_ = std::make_unique<std::vector<char>>();
  BIO_METHOD* method = collect_method();
  BIO* bio = method ? BIO_new(method) : nullptr;  // BIO_new does not take a null method
  if (!bio) throw std::runtime_error("TLS: cannot create a BIO for a bulk link");
  BIO_set_data(bio, records_.get());
  SSL_set0_wbio(ssl_.get(), bio);  // the socket BIO stays the session's rbio
}

bool Stream::write_all(const void* data, size_t n) {
  if (!ssl_) return net::write_all(fd_, data, n);
  auto* p = static_cast<const char*>(data);
  bool sent = true;
  while (sent && n > 0) {
    size_t k = std::min(n, kCollectBytes);
    sent = tls_all(ssl_.get(), p, k, [](SSL* s, const char* q, int m) { return SSL_write(s, q, m); }) &&
           send_records();
    p += k, n -= k;
  }
  // A buffer grown by a large message is freed; so is one a failed write
  // left (the link ends, and stays in its table until the worker stops).
  if (!sent || records_->capacity() > kKeepBytes) std::vector<char>().swap(*records_);
  return sent;
}

bool Stream::read_all(void* data, size_t n) {
  if (!ssl_) return net::read_all(fd_, data, n);
  bool read =
      tls_all(ssl_.get(), static_cast<char*>(data), n, [](SSL* s, char* p, int k) { return SSL_read(s, p, k); });
  // A read that fails may make a record of its own (an alert): it leaves
  // now. (OpenSSL answers a peer's key update with the next write's records.)
  return send_records() && read;
}

bool Stream::send_records() {
  bool sent = records_->empty() || net::write_all(fd_, records_->data(), records_->size());
  records_->clear();
  return sent;
}

}  // namespace castor::detail::bulk
