// Note [TLS]
// ~~~~~~~~~~
// With TLS configured (certificate, key and CA; WorkerOptions::tls or a
// cluster file's "tls" section), every castor link of the worker -- the
// rendezvous, every peer connection, castor inspect -- is TLS, run by castor
// itself with OpenSSL (tls_session.cpp) behind the door's greeting (Note
// [The door]), and handed to CAF as an established session (tls_scribe.cpp):
//
//  T1. Both sides of a link present a certificate and verify the other's
//      against the cluster CA (SSL_VERIFY_PEER and
//      SSL_VERIFY_FAIL_IF_NO_PEER_CERT on both sides). A peer whose
//      certificate the CA did not sign, or that has none, fails the
//      handshake in the door: no byte of it reaches CAF, so it cannot call
//      anything.
//  T2. Identity is "signed by the cluster CA", not a worker's name: give the
//      CA's signature only to machines allowed to run any worker of the
//      cluster.
//  T3. There is no anonymous mode: a partial setting (say a CA without a
//      certificate) is refused at init_rpc, and so are unreadable files, a
//      key that does not match its certificate, or a certificate the CA did
//      not sign. These are checked with OpenSSL before anything starts.
//  T4. Without TLS, links are plain TCP: castor says once how they are
//      protected (by the cluster secret, or not at all).
//  T5. A refused handshake is logged by the worker that refused it, naming
//      the peer's address and OpenSSL's reason (D5 of Note [The door]).
//  T6. OpenSSL reports a failed call through a per-thread error queue, and
//      SSL_get_error reads that queue first: an error one session left
//      there makes the next call of any other session on that thread look
//      failed. (CAF 0.17's OpenSSL module never empties it, so one refused
//      handshake or unclean close dropped every other link of the worker.)
//      Every castor OpenSSL call empties the queue before it runs and after
//      it failed, so a failure ends its own link and no other.
//  T7. No SIGPIPE: sessions write through castor's socket BIO with
//      MSG_NOSIGNAL, so a peer that went away fails a write, not the process.
//  T8. The bulk links (Note [Bulk path]) are TLS too, through the same door
//      and context (B6).
#include "actors/transport/tls.hpp"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>

#include <cstring>
#include <fstream>
#include <memory>

#include "actors/api/errors.hpp"
#include "actors/transport/tls_session.hpp"

namespace castor::detail {
namespace {

[[noreturn]] void refuse(const WorkerOptions& opts, const std::string& why) {
  throw RpcError(ErrorInfo{ErrorKind::Lookup, opts.name, "init_rpc(" + opts.name + "): TLS: " + why});
}

std::string openssl_errors() {
  std::string out;
  while (auto e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    out += (out.empty() ? "" : "; ") + std::string(buf);
  }
  return out.empty() ? "unknown OpenSSL error" : out;
}

}  // namespace

void check_tls(const WorkerOptions& opts) {
  const auto& t = opts.tls;
  if (!t.enabled()) return;
  // T3: all three or nothing.
  for (auto [value, what] : {std::pair{&t.certificate, "certificate"}, {&t.key, "key"}, {&t.ca, "ca"}})
    if (value->empty())
      refuse(opts, std::string("the ") + what +
                       " file is not set; TLS needs certificate, key and ca (castor never runs TLS without "
                       "verifying peers)");
  for (auto [path, what] : {std::pair{&t.certificate, "certificate"}, {&t.key, "key"}, {&t.ca, "CA"}})
    if (!std::ifstream(*path)) refuse(opts, std::string("cannot read the ") + what + " file " + *path);
  ERR_clear_error();
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx(SSL_CTX_new(TLS_method()), SSL_CTX_free);
  if (!ctx) refuse(opts, "cannot create an OpenSSL context: " + openssl_errors());
  SSL_CTX_set_default_passwd_cb(ctx.get(), tls_passphrase_callback);
  SSL_CTX_set_default_passwd_cb_userdata(ctx.get(), const_cast<std::string*>(&t.passphrase));
  if (SSL_CTX_use_certificate_chain_file(ctx.get(), t.certificate.c_str()) != 1)
    refuse(opts, "the certificate file " + t.certificate + " is not a PEM certificate: " + openssl_errors());
  if (SSL_CTX_use_PrivateKey_file(ctx.get(), t.key.c_str(), SSL_FILETYPE_PEM) != 1)
    refuse(opts, "the key file " + t.key + " is not a usable PEM private key (wrong passphrase?): " +
                     openssl_errors());
  if (SSL_CTX_check_private_key(ctx.get()) != 1)
    refuse(opts, "the key " + t.key + " does not belong to the certificate " + t.certificate);
  if (SSL_CTX_load_verify_locations(ctx.get(), t.ca.c_str(), nullptr) != 1)
    refuse(opts, "the CA file " + t.ca + " holds no PEM certificate: " + openssl_errors());
  // Our own certificate must pass the check our peers will make: with the
  // intermediates the certificate file holds after it, which the handshake
  // sends along.
  STACK_OF(X509)* chain = nullptr;
  SSL_CTX_get0_chain_certs(ctx.get(), &chain);
  std::unique_ptr<X509_STORE_CTX, decltype(&X509_STORE_CTX_free)> check(X509_STORE_CTX_new(), X509_STORE_CTX_free);
  if (!check || X509_STORE_CTX_init(check.get(), SSL_CTX_get_cert_store(ctx.get()),
                                    SSL_CTX_get0_certificate(ctx.get()), chain) != 1)
    refuse(opts, "cannot check the certificate " + t.certificate + ": " + openssl_errors());
  if (X509_verify_cert(check.get()) != 1)
    refuse(opts, "the certificate " + t.certificate + " is not signed by the CA " + t.ca + ": " +
                     X509_verify_cert_error_string(X509_STORE_CTX_get_error(check.get())));
}

}  // namespace castor::detail
