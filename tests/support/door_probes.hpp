// Strangers at the door (Note [The door]): connections that a worker must
// refuse without its job noticing. Used by the door's tests and fuzzer.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "actors/api/worker_options.hpp"

namespace castor::test::probe {

/// What came back on a probe's connection.
struct Seen {
  std::vector<uint8_t> received;  // what the worker sent before closing (its greeting, an answer)
  bool closed_by_worker = false;  // the worker closed (or reset) the connection within the wait
};

/// Connects, sends `bytes` in one go, reads until the worker closes or
/// `wait` passes, then closes (with a reset when `reset`). Never throws.
Seen send_bytes(const std::string& host, uint16_t port, const std::vector<uint8_t>& bytes,
                std::chrono::milliseconds wait = std::chrono::milliseconds(2000), bool reset = false);

/// 8 zero bytes and 64 bytes of 0xff: a BASP header CAF 0.17 dereferences
/// a null payload on (it crashed a worker before the door).
std::vector<uint8_t> crafted_basp_header();
/// `n` pseudo-random bytes.
std::vector<uint8_t> garbage(size_t n, uint32_t seed);
/// A TLS ClientHello, as `openssl s_client` opens with.
std::vector<uint8_t> tls_client_hello();
/// An HTTP request, as a browser or scraper would send.
std::vector<uint8_t> http_get();

/// Opens and closes a connection at once (a port scanner).
void port_scan(const std::string& host, uint16_t port);

/// Passes the door with `secret` (and the TLS files, which may be a wrong
/// CA's or none), then sends `after` and closes, resetting when `reset`.
/// Greets as a bulk link (Note [Bulk path]) when `bulk`, else as a peer.
/// Returns what the dial said (empty when it passed).
std::string greeted(const std::string& host, uint16_t port, const std::string& secret, const TlsOptions& tls,
                    const std::vector<uint8_t>& after, bool reset, bool bulk = false);

/// A TLS handshake without a certificate after a valid greeting: the door
/// must refuse it (the handshake fails). Returns the client's view.
std::string greeted_tls_without_certificate(const std::string& host, uint16_t port, const std::string& secret);

/// A greeting that announces TLS, then plain bytes instead of a handshake
/// (a client that does not speak TLS at a TLS port). "" when the door took
/// the greeting (and then ended the connection).
std::string greeted_plain_at_tls_port(const std::string& host, uint16_t port, const std::string& secret,
                                      const std::vector<uint8_t>& bytes);

}  // namespace castor::test::probe
