// TLS contexts, castor's socket BIO and handshakes, with the error-queue
// discipline of T6 (Note [TLS]).
#include "actors/transport/tls_session.hpp"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace castor::detail {
namespace {

// -- castor's socket BIO --------------------------------------------------------
// OpenSSL's own socket BIO writes with write(2): a peer that went away raises
// SIGPIPE, which kills a process that did not ignore it. Ours sends with
// MSG_NOSIGNAL; everything else is what the socket BIO does.

int fd_of(BIO* b) { return int(reinterpret_cast<intptr_t>(BIO_get_data(b))); }

bool retryable(int err) { return err == EAGAIN || err == EWOULDBLOCK || err == EINTR || err == EINPROGRESS; }

int bio_write(BIO* b, const char* data, int len) {
  BIO_clear_retry_flags(b);
  auto n = ::send(fd_of(b), data, size_t(len), MSG_NOSIGNAL);
  if (n < 0 && retryable(errno)) BIO_set_retry_write(b);
  return int(n);
}

int bio_read(BIO* b, char* data, int len) {
  BIO_clear_retry_flags(b);
  auto n = ::recv(fd_of(b), data, size_t(len), 0);
  if (n < 0 && retryable(errno)) BIO_set_retry_read(b);
  return int(n);
}

long bio_ctrl(BIO* b, int cmd, long, void* ptr) {
  switch (cmd) {
    case BIO_CTRL_FLUSH: return 1;
    case BIO_C_GET_FD:
      if (ptr) *static_cast<int*>(ptr) = fd_of(b);
      return fd_of(b);
    default: return 0;
  }
}

int bio_create(BIO* b) {
  BIO_set_init(b, 1);
  return 1;
}

int bio_destroy(BIO*) { return 1; }  // the socket or buffer is castor's (the door's, the scribe's, a stream's)

BIO_METHOD* socket_method() {
  static BIO_METHOD* method = new_bio_method(BIO_TYPE_SOURCE_SINK | BIO_TYPE_DESCRIPTOR, "castor socket", bio_write,
                                             bio_read, bio_ctrl);
  return method;
}

std::string take_errors() {
  std::string out;
  while (auto e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    out += (out.empty() ? "" : "; ") + std::string(buf);
  }
  return out;
}

}  // namespace

BIO_METHOD* new_bio_method(int type, const char* name, int (*write)(BIO*, const char*, int),
                           int (*read)(BIO*, char*, int), long (*ctrl)(BIO*, int, long, void*)) {
  auto* m = BIO_meth_new(BIO_get_new_index() | type, name);
  if (!m) return m;
  BIO_meth_set_write(m, write);
  if (read) BIO_meth_set_read(m, read);
  BIO_meth_set_ctrl(m, ctrl);
  BIO_meth_set_create(m, bio_create);
  BIO_meth_set_destroy(m, bio_destroy);
  return m;
}

int tls_passphrase_callback(char* buf, int size, int, void* user) {
  const auto* pass = static_cast<const std::string*>(user);
  if (!pass || size <= 0) return 0;
  auto n = std::min<size_t>(pass->size(), size_t(size - 1));
  std::memcpy(buf, pass->data(), n);
  buf[n] = 0;
  return int(n);
}

void SslDeleter::operator()(SSL* ssl) const { SSL_free(ssl); }

TlsContext::TlsContext(const TlsOptions& opts) : passphrase_(opts.passphrase) {
  ERR_clear_error();
  ctx_ = SSL_CTX_new(TLS_method());
  auto fail = [&](const std::string& what) {
    auto why = take_errors();
    if (ctx_) SSL_CTX_free(ctx_);
    ctx_ = nullptr;
    throw std::runtime_error("TLS: " + what + (why.empty() ? "" : ": " + why));
  };
  if (!ctx_) fail("cannot create an OpenSSL context");
  SSL_CTX_set_min_proto_version(ctx_, TLS1_2_VERSION);
  SSL_CTX_set_default_passwd_cb(ctx_, tls_passphrase_callback);
  SSL_CTX_set_default_passwd_cb_userdata(ctx_, &passphrase_);
  if (SSL_CTX_use_certificate_chain_file(ctx_, opts.certificate.c_str()) != 1)
    fail("cannot load the certificate " + opts.certificate);
  if (SSL_CTX_use_PrivateKey_file(ctx_, opts.key.c_str(), SSL_FILETYPE_PEM) != 1)
    fail("cannot load the key " + opts.key);
  if (SSL_CTX_load_verify_locations(ctx_, opts.ca.c_str(), nullptr) != 1) fail("cannot load the CA " + opts.ca);
  // T1: both sides present a certificate and verify the other's.
  SSL_CTX_set_verify(ctx_, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  if (SSL_CTX_set_cipher_list(ctx_, "HIGH:!aNULL:!MD5") != 1) fail("cannot set the cipher list");
  // Links are long-lived and never resumed: no tickets, no cache, no renegotiation.
  SSL_CTX_set_num_tickets(ctx_, 0);
  SSL_CTX_set_session_cache_mode(ctx_, SSL_SESS_CACHE_OFF);
  SSL_CTX_set_options(ctx_, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_TICKET);
  // CAF's stream hands SSL_write the same unsent bytes again, perhaps from a
  // moved buffer, and takes partial writes.
  SSL_CTX_set_mode(ctx_, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  ERR_clear_error();
}

TlsContext::~TlsContext() {
  if (ctx_) SSL_CTX_free(ctx_);
}

SslPtr TlsContext::session(int fd, bool server) const {
  ERR_clear_error();
  SslPtr ssl(SSL_new(ctx_));
  if (!ssl) throw std::runtime_error("TLS: cannot create a session: " + take_errors());
  BIO_METHOD* method = socket_method();
  BIO* bio = method ? BIO_new(method) : nullptr;  // BIO_new does not take a null method
  if (!bio) throw std::runtime_error("TLS: cannot create a socket BIO: " + take_errors());
  BIO_set_data(bio, reinterpret_cast<void*>(intptr_t(fd)));
  SSL_set_bio(ssl.get(), bio, bio);  // the session owns the BIO
  if (server)
    SSL_set_accept_state(ssl.get());
  else
    SSL_set_connect_state(ssl.get());
  return ssl;
}

TlsProgress tls_handshake_step(SSL* ssl, std::string& why) {
  ERR_clear_error();  // T6: a stale error would make SSL_get_error lie about this session
  int rc = SSL_do_handshake(ssl);
  if (rc == 1) return TlsProgress::done;
  int err = SSL_get_error(ssl, rc);
  if (err == SSL_ERROR_WANT_READ) return TlsProgress::want_read;
  if (err == SSL_ERROR_WANT_WRITE) return TlsProgress::want_write;
  why = take_errors();  // T6: leaves the queue empty for the next session
  if (why.empty())
    why = err == SSL_ERROR_SYSCALL || err == SSL_ERROR_ZERO_RETURN ? "the peer closed the connection during the handshake"
                                                                   : "handshake failed";
  auto verify = SSL_get_verify_result(ssl);
  if (verify != X509_V_OK) why += " (certificate: " + std::string(X509_verify_cert_error_string(verify)) + ")";
  return TlsProgress::failed;
}

bool tls_handshake(SSL* ssl, int fd, net::Deadline deadline, std::string& why) {
  for (;;) {
    auto step = tls_handshake_step(ssl, why);
    if (step == TlsProgress::done) return true;
    if (step == TlsProgress::failed) return false;
    pollfd p{fd, short(step == TlsProgress::want_read ? POLLIN : POLLOUT), 0};
    if (net::poll_until(p, deadline) <= 0) {
      why = "timed out in the TLS handshake";
      return false;
    }
  }
}

}  // namespace castor::detail
