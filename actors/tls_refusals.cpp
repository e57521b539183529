// Note [Refused TLS peers]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// A peer whose handshake fails on our listening side must be logged (issue:
// "refused and logged"), but CAF 0.17's OpenSSL session closes such a socket
// without a word and offers no hook. castor therefore defines SSL_accept
// itself. The linker exports a definition in the executable that a shared
// library linked to it (libcaf_openssl) refers to, and the dynamic linker
// binds that library's calls to the executable's definition first (ELF
// symbol interposition, the way malloc wrappers work). Ours forwards to
// OpenSSL's (dlsym RTLD_NEXT) and only watches the result:
//  R1 A handshake that ends in failure (not "try again": the socket is
//     non-blocking, so SSL_accept is called until it finishes) is logged with
//     the peer's address, the listening worker (by local port, see
//     remember_tls_listener) and OpenSSL's reason, read without taking it
//     off the error queue CAF looks at next.
//  R2 A stranger retries; the first few refusals per peer address are
//     logged, after that every hundredth, with the count. Hosts past the
//     first kMaxCountedHosts share one count, so that a scan from many
//     addresses cannot grow the log's memory without bound.
//  R3 Nothing else changes: the return value, the error queue and the SSL
//     object are CAF's as before. Where the wrapper is not linked in (a
//     program without castor's TLS), OpenSSL's own SSL_accept runs.
#include "actors/tls.hpp"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>
#include <sys/socket.h>

#include <cstdio>
#include <map>
#include <mutex>
#include <string>

namespace castor::detail {
namespace {

constexpr size_t kMaxCountedHosts = 1024;  // R2
constexpr const char* kOtherHosts = "(other hosts)";

struct RefusalLog {
  std::mutex mtx;
  std::map<uint16_t, std::string> worker_by_port;  // our TLS listeners
  std::map<std::string, int64_t> refusals_by_peer;
  // The peer's address while its handshake runs: a peer that aborts the
  // handshake has often closed its end before we log (getpeername fails).
  std::map<const SSL*, std::string> handshaking;
};

RefusalLog& refusal_log() {
  static RefusalLog log;
  return log;
}

std::string address_of(const sockaddr_storage& a) {
  char host[INET6_ADDRSTRLEN] = "?";
  uint16_t port = 0;
  if (a.ss_family == AF_INET) {
    auto* in = reinterpret_cast<const sockaddr_in*>(&a);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    port = ntohs(in->sin_port);
  } else if (a.ss_family == AF_INET6) {
    auto* in6 = reinterpret_cast<const sockaddr_in6*>(&a);
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
    port = ntohs(in6->sin6_port);
  }
  return std::string(host) + ":" + std::to_string(port);
}

uint16_t port_of(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&a)->sin_port);
  if (a.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&a)->sin6_port);
  return 0;
}

// Why the handshake failed, in OpenSSL's words (R1: the queue is only peeked).
std::string reason_of(const SSL* ssl, int ssl_error) {
  std::string why;
  if (auto code = ERR_peek_error(); code != 0) {
    char buf[256];
    ERR_error_string_n(code, buf, sizeof buf);
    why = buf;
  } else {
    why = ssl_error == SSL_ERROR_SYSCALL ? "the peer closed the connection during the handshake"
                                         : "handshake failed";
  }
  auto verify = SSL_get_verify_result(ssl);
  if (verify != X509_V_OK) why += " (certificate: " + std::string(X509_verify_cert_error_string(verify)) + ")";
  return why;
}

// Remembers the peer's address on every step of a handshake (see handshaking).
void note_handshake_step(const SSL* ssl) {
  int fd = SSL_get_fd(ssl);
  sockaddr_storage peer{};
  socklen_t n = sizeof peer;
  if (fd < 0 || getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &n) != 0) return;
  auto& log = refusal_log();
  std::lock_guard<std::mutex> lock(log.mtx);
  if (log.handshaking.size() > 4096) log.handshaking.clear();  // handshakes CAF abandoned midway
  log.handshaking[ssl] = address_of(peer);
}

void end_handshake(const SSL* ssl) {
  auto& log = refusal_log();
  std::lock_guard<std::mutex> lock(log.mtx);
  log.handshaking.erase(ssl);
}

void log_refusal(SSL* ssl, int ssl_error) {
  int fd = SSL_get_fd(ssl);
  sockaddr_storage local{};
  socklen_t m = sizeof local;
  std::string peer_addr = "an unknown address";
  uint16_t local_port = fd >= 0 && getsockname(fd, reinterpret_cast<sockaddr*>(&local), &m) == 0 ? port_of(local) : 0;
  auto why = reason_of(ssl, ssl_error);
  auto& log = refusal_log();
  std::string worker;
  int64_t count;
  bool shared_count = false;
  {
    std::lock_guard<std::mutex> lock(log.mtx);
    if (auto h = log.handshaking.find(ssl); h != log.handshaking.end()) peer_addr = h->second;
    auto it = log.worker_by_port.find(local_port);
    worker = it != log.worker_by_port.end() ? it->second : "port " + std::to_string(local_port);
    auto host = peer_addr.substr(0, peer_addr.rfind(':'));
    if (log.refusals_by_peer.size() >= kMaxCountedHosts && !log.refusals_by_peer.count(host))
      host = kOtherHosts;  // R2: counted together
    count = ++log.refusals_by_peer[host];
    shared_count = host == kOtherHosts;
  }
  if (count > 3 && count % 100 != 0) return;  // R2
  std::fprintf(stderr,
               "castor[%s]: refused a TLS connection from %s: %s; only peers with a certificate signed by the "
               "cluster CA may connect%s\n",
               worker.c_str(), peer_addr.c_str(), why.c_str(),
               count > 1 ? (" (refusal " + std::to_string(count) +
                            (shared_count ? " from hosts past the first 1024)" : " from this host)"))
                               .c_str()
                         : "");
}

}  // namespace

void remember_tls_listener(uint16_t port, const std::string& worker) {
  auto& log = refusal_log();
  std::lock_guard<std::mutex> lock(log.mtx);
  log.worker_by_port[port] = worker;
}

}  // namespace castor::detail

// R1-R3 of Note [Refused TLS peers]: OpenSSL's SSL_accept, watched.
extern "C" int SSL_accept(SSL* ssl) {
  using accept_fn = int (*)(SSL*);
  static auto real = reinterpret_cast<accept_fn>(dlsym(RTLD_NEXT, "SSL_accept"));
  if (real == nullptr) return -1;  // no OpenSSL below us: cannot happen where CAF's module loaded
  castor::detail::note_handshake_step(ssl);
  int ret = real(ssl);
  int err = ret <= 0 ? SSL_get_error(ssl, ret) : SSL_ERROR_NONE;
  if (err == SSL_ERROR_SSL || err == SSL_ERROR_SYSCALL) castor::detail::log_refusal(ssl, err);
  if (err != SSL_ERROR_WANT_READ && err != SSL_ERROR_WANT_WRITE) castor::detail::end_handshake(ssl);
  return ret;
}
