// The door's greeting: building and checking its three fixed-size messages.
#include "actors/transport/greeting.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <stdexcept>

namespace castor::detail::door {
namespace {

constexpr char kServerMagic[8] = {'C', 'A', 'S', 'T', 'O', 'R', '<', 'D'};
constexpr char kClientMagic[8] = {'C', 'A', 'S', 'T', 'O', 'R', '>', 'D'};

void put16(uint8_t* p, uint16_t x) {
  p[0] = uint8_t(x & 0xff);
  p[1] = uint8_t(x >> 8);
}

uint16_t get16(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }

// HMAC-SHA256 over a label and the greeting's fields: the label makes the
// client's proof useless as the server's and the other way round.
Mac mac_of(const Key& key, const char* label, Purpose purpose, bool tls, uint16_t wire_version,
           const Nonce& server_nonce, const Nonce& client_nonce) {
  std::array<uint8_t, 64 + 2 + 2 + 2 * kNonceBytes> input{};
  size_t n = std::strlen(label);
  std::memcpy(input.data(), label, n);
  input[n++] = uint8_t(purpose);
  input[n++] = tls ? 1 : 0;
  put16(input.data() + n, wire_version);
  n += 2;
  std::memcpy(input.data() + n, server_nonce.data(), kNonceBytes);
  n += kNonceBytes;
  std::memcpy(input.data() + n, client_nonce.data(), kNonceBytes);
  n += kNonceBytes;
  Mac out{};
  unsigned len = 0;
  static const unsigned char kEmpty[1] = {0};
  const auto* k = key.secret.empty() ? kEmpty : reinterpret_cast<const unsigned char*>(key.secret.data());
  if (!HMAC(EVP_sha256(), k, int(key.secret.size()), input.data(), n, out.data(), &len) || len != kMacBytes)
    throw std::runtime_error("castor: HMAC-SHA256 is not available from OpenSSL");
  return out;
}

bool same(const uint8_t* a, const uint8_t* b, size_t n) { return CRYPTO_memcmp(a, b, n) == 0; }

}  // namespace

const char* to_string(Purpose p) {
  switch (p) {
    case Purpose::basp: return "castor link";
    case Purpose::bulk: return "bulk link";
  }
  return "unknown purpose";
}

std::string describe(Verdict v) {
  switch (v) {
    case Verdict::admitted: return "admitted";
    case Verdict::not_castor: return "not castor's greeting";
    case Verdict::version: return "another castor version (door or wire protocol)";
    case Verdict::purpose: return "a greeting for another port (castor link at the bulk port, or the other way round)";
    case Verdict::secret: return "the cluster secret differs (or one side has none)";
    case Verdict::tls: return "TLS on one side only (one has the cluster's TLS files, the other not)";
  }
  return "refused";
}

Nonce random_nonce() {
  Nonce n{};
  if (RAND_bytes(n.data(), int(n.size())) != 1) {
    // OpenSSL's generator failed (no entropy source): still never repeat.
    static thread_local std::mt19937_64 fallback{std::random_device{}()};
    for (auto& b : n) b = uint8_t(fallback());
  }
  return n;
}

ServerHello make_server_hello(uint16_t wire_version, const Nonce& server_nonce) {
  ServerHello h{};
  std::memcpy(h.data(), kServerMagic, 8);
  put16(h.data() + 8, kDoorVersion);
  put16(h.data() + 10, wire_version);
  std::memcpy(h.data() + 12, server_nonce.data(), kNonceBytes);
  return h;
}

ServerHelloView parse_server_hello(const ServerHello& bytes) {
  ServerHelloView v;
  v.castor = std::memcmp(bytes.data(), kServerMagic, 8) == 0;
  v.door_version = get16(bytes.data() + 8);
  v.wire_version = get16(bytes.data() + 10);
  std::memcpy(v.nonce.data(), bytes.data() + 12, kNonceBytes);
  return v;
}

ClientHello make_client_hello(const Key& key, Purpose purpose, bool tls, uint16_t wire_version,
                              const Nonce& server_nonce, const Nonce& client_nonce) {
  ClientHello h{};
  std::memcpy(h.data(), kClientMagic, 8);
  put16(h.data() + 8, kDoorVersion);
  put16(h.data() + 10, wire_version);
  h[12] = uint8_t(purpose);
  h[13] = tls ? 1 : 0;
  std::memcpy(h.data() + 16, client_nonce.data(), kNonceBytes);
  auto mac = mac_of(key, "castor door client", purpose, tls, wire_version, server_nonce, client_nonce);
  std::memcpy(h.data() + 16 + kNonceBytes, mac.data(), kMacBytes);
  return h;
}

bool may_be_client_hello(const uint8_t* data, size_t n) {
  return std::memcmp(data, kClientMagic, std::min<size_t>(n, 8)) == 0;
}

ClientHelloCheck check_client_hello(const Key& key, Purpose expected, bool tls_required, uint16_t wire_version,
                                    const Nonce& server_nonce, const ClientHello& bytes) {
  ClientHelloCheck c;
  if (std::memcmp(bytes.data(), kClientMagic, 8) != 0) return c;  // not_castor
  c.wire_version = get16(bytes.data() + 10);
  c.purpose = bytes[12];
  c.tls = (bytes[13] & 1) != 0;
  std::memcpy(c.client_nonce.data(), bytes.data() + 16, kNonceBytes);
  if (get16(bytes.data() + 8) != kDoorVersion || c.wire_version != wire_version) {
    c.verdict = Verdict::version;
    return c;
  }
  if (c.purpose != uint8_t(expected)) {
    c.verdict = Verdict::purpose;
    return c;
  }
  auto mac = mac_of(key, "castor door client", expected, c.tls, wire_version, server_nonce, c.client_nonce);
  if (!same(mac.data(), bytes.data() + 16 + kNonceBytes, kMacBytes))
    c.verdict = Verdict::secret;
  else
    c.verdict = c.tls == tls_required ? Verdict::admitted : Verdict::tls;
  return c;
}

Answer make_answer(const Key& key, Verdict verdict, Purpose purpose, bool tls, uint16_t wire_version,
                   const Nonce& server_nonce, const Nonce& client_nonce) {
  Answer a{};
  a[0] = uint8_t(verdict);
  if (verdict == Verdict::admitted) {
    auto mac = mac_of(key, "castor door server", purpose, tls, wire_version, server_nonce, client_nonce);
    std::memcpy(a.data() + 4, mac.data(), kMacBytes);
  }
  return a;
}

Verdict check_answer(const Key& key, Purpose purpose, bool tls, uint16_t wire_version, const Nonce& server_nonce,
                     const Nonce& client_nonce, const Answer& bytes) {
  switch (Verdict(bytes[0])) {
    case Verdict::admitted: {
      auto mac = mac_of(key, "castor door server", purpose, tls, wire_version, server_nonce, client_nonce);
      return same(mac.data(), bytes.data() + 4, kMacBytes) ? Verdict::admitted : Verdict::secret;
    }
    case Verdict::version: return Verdict::version;
    case Verdict::purpose: return Verdict::purpose;
    case Verdict::secret: return Verdict::secret;
    case Verdict::tls: return Verdict::tls;
    case Verdict::not_castor: break;
  }
  return Verdict::not_castor;
}

std::string preview(const uint8_t* data, size_t n) {
  n = std::min<size_t>(n, 16);
  bool printable = n > 0;
  for (size_t i = 0; i < n && printable; ++i)
    printable = (data[i] >= 0x20 && data[i] < 0x7f) || data[i] == '\r' || data[i] == '\n';
  std::string out;
  if (printable) {
    out = "\"";
    for (size_t i = 0; i < n; ++i) out += data[i] == '\r' ? std::string("\\r") : data[i] == '\n' ? std::string("\\n") : std::string(1, char(data[i]));
    return out + "\"";
  }
  static const char* kHex = "0123456789abcdef";
  for (size_t i = 0; i < n; ++i) {
    if (i) out += ' ';
    out += kHex[data[i] >> 4];
    out += kHex[data[i] & 15];
  }
  return out;
}

}  // namespace castor::detail::door
