// Strangers at the door: raw sockets, the dialer, and OpenSSL clients.
#include "support/door_probes.hpp"

#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <random>

#include "actors/transport/dialer.hpp"
#include "actors/transport/tls_session.hpp"
#include "messages/rendezvous.hpp"

namespace castor::test::probe {

using detail::net::Clock;

Seen send_bytes(const std::string& host, uint16_t port, const std::vector<uint8_t>& bytes,
                std::chrono::milliseconds wait, bool reset) {
  Seen seen;
  std::string why;
  int fd = detail::net::connect_tcp(host, port, Clock::now() + std::chrono::seconds(3), why);
  if (fd < 0) return seen;
  if (!bytes.empty()) (void)detail::net::send_exact(fd, bytes.data(), bytes.size(), Clock::now() + wait, why);
  auto deadline = Clock::now() + wait;
  uint8_t buf[4096];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, detail::net::ms_until(deadline)) <= 0) break;
    auto n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) {
      seen.closed_by_worker = true;
      break;
    }
    seen.received.insert(seen.received.end(), buf, buf + n);
  }
  if (reset) {
    linger l{1, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
  }
  ::close(fd);
  return seen;
}

std::vector<uint8_t> crafted_basp_header() {
  std::vector<uint8_t> out(72, 0xff);
  for (size_t i = 0; i < 8; ++i) out[i] = 0x00;
  return out;
}

std::vector<uint8_t> garbage(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> out(n);
  for (auto& b : out) b = uint8_t(rng());
  return out;
}

std::vector<uint8_t> tls_client_hello() {
  // A TLS 1.2 record header and the start of a ClientHello: the door only
  // needs to see that it is not castor's greeting.
  std::vector<uint8_t> out = {0x16, 0x03, 0x01, 0x00, 0xc8, 0x01, 0x00, 0x00, 0xc4, 0x03, 0x03};
  auto random = garbage(32, 7);
  out.insert(out.end(), random.begin(), random.end());
  out.resize(out.size() + 160, 0);
  return out;
}

std::vector<uint8_t> http_get() {
  std::string s = "GET /metrics HTTP/1.1\r\nHost: castor\r\n\r\n";
  return {s.begin(), s.end()};
}

void port_scan(const std::string& host, uint16_t port) {
  std::string why;
  int fd = detail::net::connect_tcp(host, port, Clock::now() + std::chrono::seconds(3), why);
  if (fd >= 0) ::close(fd);
}

std::string greeted(const std::string& host, uint16_t port, const std::string& secret, const TlsOptions& tls,
                    const std::vector<uint8_t>& after, bool reset, bool bulk) {
  std::unique_ptr<detail::TlsContext> ctx;
  if (tls.enabled()) ctx = std::make_unique<detail::TlsContext>(tls);
  detail::DialOptions opts;
  opts.key.secret = secret;
  opts.tls = ctx.get();
  opts.wire_version = uint16_t(kWireProtocolVersion);
  auto purpose = bulk ? detail::door::Purpose::bulk : detail::door::Purpose::basp;
  auto d = detail::dial(opts, host, port, purpose, Clock::now() + std::chrono::seconds(5));
  if (!d.ok()) return d.error.empty() ? "refused" : d.error;
  if (!after.empty()) {
    if (d.ssl) {
      ERR_clear_error();
      (void)SSL_write(d.ssl.get(), after.data(), int(after.size()));
      ERR_clear_error();
    } else {
      std::string why;
      (void)detail::net::send_exact(d.fd, after.data(), after.size(), Clock::now() + std::chrono::seconds(1), why);
    }
  }
  if (reset) {
    linger l{1, 0};
    ::setsockopt(d.fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
  }
  d.ssl.reset();  // no close_notify: an unclean end
  ::close(d.fd);
  return "";
}

std::string greeted_plain_at_tls_port(const std::string& host, uint16_t port, const std::string& secret,
                                      const std::vector<uint8_t>& bytes) {
  detail::DialOptions opts;
  opts.key.secret = secret;
  opts.wire_version = uint16_t(kWireProtocolVersion);
  opts.claim_tls = true;
  auto d = detail::dial(opts, host, port, detail::door::Purpose::basp, Clock::now() + std::chrono::seconds(5));
  if (!d.ok()) return "the door refused the greeting: " + d.error;
  std::string why;
  (void)detail::net::send_exact(d.fd, bytes.data(), bytes.size(), Clock::now() + std::chrono::seconds(1), why);
  pollfd p{d.fd, POLLIN, 0};
  (void)::poll(&p, 1, 5000);  // the door ends the handshake it could not have
  ::close(d.fd);
  return "";
}

std::string greeted_tls_without_certificate(const std::string& host, uint16_t port, const std::string& secret) {
  detail::DialOptions opts;
  opts.key.secret = secret;
  opts.wire_version = uint16_t(kWireProtocolVersion);
  opts.claim_tls = true;
  auto d = detail::dial(opts, host, port, detail::door::Purpose::basp, Clock::now() + std::chrono::seconds(5));
  if (!d.ok()) return "the door refused the greeting: " + d.error;
  ::signal(SIGPIPE, SIG_IGN);  // OpenSSL's socket BIO writes with write(2); this test process ignores SIGPIPE
  // A client context with no certificate and no verification.
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx(SSL_CTX_new(TLS_client_method()), SSL_CTX_free);
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_NONE, nullptr);
  std::unique_ptr<SSL, decltype(&SSL_free)> ssl(SSL_new(ctx.get()), SSL_free);
  SSL_set_fd(ssl.get(), d.fd);
  detail::net::set_nonblocking(d.fd, false);
  timeval limit{5, 0};
  ::setsockopt(d.fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  ERR_clear_error();
  int rc = SSL_connect(ssl.get());
  std::string out;
  if (rc == 1) {
    // TLS 1.3 finishes the client's side before the server checked the
    // client's (missing) certificate: the refusal comes with the first read.
    char byte;
    rc = SSL_read(ssl.get(), &byte, 1);
    out = rc > 0 ? "the worker accepted a TLS client without a certificate" : "refused after the handshake";
  } else {
    out = "refused in the handshake";
  }
  ERR_clear_error();
  ::close(d.fd);
  return out;
}

}  // namespace castor::test::probe
