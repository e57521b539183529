// The door's greeting: the bytes a connection must exchange before castor
// hands it to CAF's BASP or to the bulk path (Note [The door] in
// actors/transport/door.cpp). Pure functions over byte arrays, so that the
// checks are unit-tested without sockets.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace castor::detail::door {

/// What a connection is for; a listener accepts one purpose only, so bytes
/// meant for one protocol never reach another.
enum class Purpose : uint8_t { basp = 1, bulk = 2 };
const char* to_string(Purpose p);

inline constexpr uint16_t kDoorVersion = 1;
inline constexpr size_t kNonceBytes = 16;
inline constexpr size_t kMacBytes = 32;  // HMAC-SHA256
using Nonce = std::array<uint8_t, kNonceBytes>;
using Mac = std::array<uint8_t, kMacBytes>;

/// Sizes on the wire (all fixed: a reader never guesses a length).
///  server hello: "CASTOR<D", door version (u16 LE), wire version (u16 LE), server nonce
///  client hello: "CASTOR>D", door version, wire version, purpose (u8), flags (u8: 1 = TLS
///                follows), 2 zero bytes, client nonce,
///                HMAC(key, "castor door client" | purpose | flags | wire version | nonces)
///  answer:       verdict (u8), 3 zero bytes, HMAC(key, "castor door server" | ...) or zeros
inline constexpr size_t kServerHelloBytes = 8 + 2 + 2 + kNonceBytes;
inline constexpr size_t kClientHelloBytes = 8 + 2 + 2 + 1 + 3 + kNonceBytes + kMacBytes;
inline constexpr size_t kAnswerBytes = 1 + 3 + kMacBytes;
using ServerHello = std::array<uint8_t, kServerHelloBytes>;
using ClientHello = std::array<uint8_t, kClientHelloBytes>;
using Answer = std::array<uint8_t, kAnswerBytes>;

/// The key both sides prove they hold. An empty secret gives the public
/// key: the greeting then only keeps out what is not castor (D4).
struct Key {
  std::string secret;
  bool authenticated() const { return !secret.empty(); }
};

/// How a greeting ended, as the server judged it.
enum class Verdict : uint8_t {
  admitted = 'K',
  not_castor = 'X',   // no castor magic: never answered, the connection is just closed
  version = 'V',      // another door or wire version
  purpose = 'P',      // a bulk greeting at the CAF port or the other way round
  secret = 'S',       // the MAC does not match: another cluster secret, or none
  tls = 'T',          // TLS on one side only
};
/// Why a greeting was refused, for the log and the caller's error.
std::string describe(Verdict v);

Nonce random_nonce();

ServerHello make_server_hello(uint16_t wire_version, const Nonce& server_nonce);

/// The client's reading of a server hello.
struct ServerHelloView {
  bool castor = false;  // the magic matched
  uint16_t door_version = 0;
  uint16_t wire_version = 0;
  Nonce nonce{};
};
ServerHelloView parse_server_hello(const ServerHello& bytes);

ClientHello make_client_hello(const Key& key, Purpose purpose, bool tls, uint16_t wire_version,
                              const Nonce& server_nonce, const Nonce& client_nonce);

/// Whether the first `n` bytes a client sent can still be a client hello
/// (the magic, as far as it came): strangers give themselves away early.
bool may_be_client_hello(const uint8_t* data, size_t n);

/// The server's check of a client hello against what this listener expects.
struct ClientHelloCheck {
  Verdict verdict = Verdict::not_castor;
  Nonce client_nonce{};
  uint16_t wire_version = 0;
  uint8_t purpose = 0;
  bool tls = false;  // the client will start TLS after the greeting
};
ClientHelloCheck check_client_hello(const Key& key, Purpose expected, bool tls_required, uint16_t wire_version,
                                    const Nonce& server_nonce, const ClientHello& bytes);

/// The server's answer: on admission it proves the server holds the key too.
Answer make_answer(const Key& key, Verdict verdict, Purpose purpose, bool tls, uint16_t wire_version,
                   const Nonce& server_nonce, const Nonce& client_nonce);

/// The client's check of an answer; `admitted` only with the right MAC.
/// Anything else returns the refusal the server gave (or `secret` when the
/// server's proof does not match: it is not of our cluster).
Verdict check_answer(const Key& key, Purpose purpose, bool tls, uint16_t wire_version, const Nonce& server_nonce,
                     const Nonce& client_nonce, const Answer& bytes);

/// Up to `n` bytes a stranger sent, printable: "GET / HTTP/1.1" or
/// "00 00 00 00 ff ff" -- for the refusal log.
std::string preview(const uint8_t* data, size_t n);

}  // namespace castor::detail::door
