// castor's TLS sessions (Note [TLS] in actors/transport/tls.cpp): one
// OpenSSL context per worker, sessions over castor's own sockets, driven by
// the door (accepting), the dialer (connecting) and the TLS scribe (CAF's
// reads and writes once a link is up).
#pragma once

#include <memory>
#include <string>

#include "actors/transport/sockets.hpp"
#include "actors/api/worker_options.hpp"

using SSL = struct ssl_st;
using SSL_CTX = struct ssl_ctx_st;
using BIO = struct bio_st;
using BIO_METHOD = struct bio_method_st;

namespace castor::detail {

/// OpenSSL's pem_password_cb for an encrypted key: `user` points to the
/// passphrase (a std::string). Used by TlsContext and by check_tls.
int tls_passphrase_callback(char* buf, int size, int rwflag, void* user);

/// A BIO type of castor's own (the socket BIO of T7, the record collector
/// of B6): `write` and `read` (none when null) move the bytes, `ctrl`
/// answers OpenSSL's questions. A BIO of it is ready once made, and freeing
/// one frees nothing: what it reads and writes is castor's. Null when
/// OpenSSL has no memory: callers check before BIO_new, which dereferences
/// the method it is given.
BIO_METHOD* new_bio_method(int type, const char* name, int (*write)(BIO*, const char*, int),
                           int (*read)(BIO*, char*, int), long (*ctrl)(BIO*, int, long, void*));

/// Owns an SSL session (SSL_free on destruction).
struct SslDeleter {
  void operator()(SSL* ssl) const;
};
using SslPtr = std::unique_ptr<SSL, SslDeleter>;

class TlsContext {
 public:
  /// Loads the worker's certificate, key and CA (check_tls has vetted them);
  /// both sides of every session verify the peer against the CA (T1).
  /// Throws std::runtime_error with OpenSSL's reason.
  explicit TlsContext(const TlsOptions& opts);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  /// A new session over `fd` (not owned), the server's or the client's side.
  SslPtr session(int fd, bool server) const;

 private:
  SSL_CTX* ctx_ = nullptr;
  std::string passphrase_;
};

enum class TlsProgress { done, want_read, want_write, failed };

/// One step of a non-blocking handshake. T6: the thread's error queue is
/// cleared before the call and after a failure, whose reason goes to `why`.
TlsProgress tls_handshake_step(SSL* ssl, std::string& why);

/// A whole handshake on a non-blocking socket, waiting at most until `deadline`.
bool tls_handshake(SSL* ssl, int fd, net::Deadline deadline, std::string& why);

}  // namespace castor::detail
