// The TLS scribe: CAF's stream machinery with a policy that reads and writes
// through OpenSSL, keeping T6 of Note [TLS] (no error outlives its call).
#include "actors/transport/tls_scribe.hpp"

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <climits>
#include <memory>

#include <caf/io/network/default_multiplexer.hpp>
#include <caf/io/network/interfaces.hpp>
#include <caf/io/network/stream_impl.hpp>

namespace castor::detail {
namespace {

using caf::io::network::native_socket;
using caf::io::network::rw_state;

// What CAF's stream_impl asks of a protocol policy.
class TlsPolicy {
 public:
  explicit TlsPolicy(std::shared_ptr<SSL> ssl) : ssl_(std::move(ssl)) {}

  rw_state read_some(size_t& result, native_socket, void* buf, size_t len) {
    result = 0;
    if (len == 0) return rw_state::success;
    ERR_clear_error();  // T6
    int n = SSL_read(ssl_.get(), buf, int(std::min<size_t>(len, INT_MAX)));
    if (n > 0) {
      result = size_t(n);
      return rw_state::success;
    }
    return after_failed_call(n);
  }

  rw_state write_some(size_t& result, native_socket, const void* buf, size_t len) {
    result = 0;
    if (len == 0) return rw_state::indeterminate;  // nothing to write: CAF moves on
    ERR_clear_error();  // T6
    int n = SSL_write(ssl_.get(), buf, int(std::min<size_t>(len, INT_MAX)));
    if (n > 0) {
      result = size_t(n);
      return rw_state::success;
    }
    return after_failed_call(n);
  }

  // Decrypted bytes that epoll cannot announce (they left the socket
  // already): read on while there are any, or the link would stall.
  bool must_read_more(native_socket, size_t) { return SSL_pending(ssl_.get()) > 0; }

 private:
  rw_state after_failed_call(int rc) {
    switch (SSL_get_error(ssl_.get(), rc)) {
      case SSL_ERROR_WANT_READ:
      case SSL_ERROR_WANT_WRITE:
        return rw_state::success;  // wait for the socket
      default:
        ERR_clear_error();  // T6: this link ends, no other with it
        return rw_state::failure;
    }
  }

  std::shared_ptr<SSL> ssl_;
};

class TlsScribe final : public caf::io::scribe {
 public:
  TlsScribe(caf::io::network::default_multiplexer& mpx, native_socket fd, std::shared_ptr<SSL> ssl)
      : scribe(caf::io::network::conn_hdl_from_socket(fd)), stream_(mpx, fd, TlsPolicy{std::move(ssl)}) {}

  void configure_read(caf::io::receive_policy::config config) override {
    stream_.configure_read(config);
    if (!launched_) {
      launched_ = true;
      stream_.start(this);
    }
  }
  void ack_writes(bool enable) override { stream_.ack_writes(enable); }
  std::vector<char>& wr_buf() override { return stream_.wr_buf(); }
  std::vector<char>& rd_buf() override { return stream_.rd_buf(); }
  void graceful_shutdown() override {
    stream_.graceful_shutdown();
    detach(&stream_.backend(), false);
  }
  void flush() override { stream_.flush(this); }
  std::string addr() const override {
    auto x = caf::io::network::remote_addr_of_fd(stream_.fd());
    return x ? *x : std::string();
  }
  uint16_t port() const override {
    auto x = caf::io::network::remote_port_of_fd(stream_.fd());
    return x ? *x : 0;
  }
  void add_to_loop() override { stream_.activate(this); }
  void remove_from_loop() override { stream_.passivate(); }

 private:
  bool launched_ = false;
  caf::io::network::stream_impl<TlsPolicy> stream_;
};

}  // namespace

caf::io::scribe_ptr make_tls_scribe(caf::io::network::default_multiplexer& mpx, int fd, SslPtr ssl) {
  std::shared_ptr<SSL> shared(ssl.release(), SslDeleter{});
  return caf::make_counted<TlsScribe>(mpx, fd, std::move(shared));
}

}  // namespace castor::detail
