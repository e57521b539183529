// The client's side of the greeting (D2 of Note [The door]).
#include "actors/transport/dialer.hpp"

#include <unistd.h>

namespace castor::detail {

Dialed dial(const DialOptions& opts, const std::string& host, uint16_t port, door::Purpose purpose,
            net::Deadline deadline) {
  Dialed out;
  auto fail = [&](DialFailure f, std::string why, int fd) {
    if (fd >= 0) {
      if (opts.watch) opts.watch(-1);
      ::close(fd);
    }
    out.fd = -1;
    out.ssl.reset();
    out.failure = f;
    out.error = std::move(why);
    return std::move(out);
  };
  std::string why;
  int fd = net::connect_tcp(host, port, deadline, why, opts.watch);
  if (fd < 0) return fail(DialFailure::unreachable, why, -1);
  door::ServerHello hello{};
  if (!net::recv_exact(fd, hello.data(), hello.size(), deadline, why))
    return fail(net::Clock::now() >= deadline ? DialFailure::timeout : DialFailure::unreachable,
                "no greeting from its door: " + why, fd);
  auto server = door::parse_server_hello(hello);
  if (!server.castor)
    return fail(DialFailure::not_castor,
                "it is not a castor worker's door (it sent " + door::preview(hello.data(), hello.size()) +
                    "; a castor older than the door?)",
                fd);
  if (server.door_version != door::kDoorVersion || server.wire_version != opts.wire_version) {
    out.verdict = door::Verdict::version;
    return fail(DialFailure::refused,
                "it runs another castor version (door " + std::to_string(server.door_version) + ", wire protocol " +
                    std::to_string(server.wire_version) + "; ours: door " + std::to_string(door::kDoorVersion) +
                    ", wire protocol " + std::to_string(opts.wire_version) + ")",
                fd);
  }
  auto client_nonce = door::random_nonce();
  bool tls = opts.tls != nullptr || opts.claim_tls;
  auto mine = door::make_client_hello(opts.key, purpose, tls, opts.wire_version, server.nonce, client_nonce);
  door::Answer answer{};
  if (!net::send_exact(fd, mine.data(), mine.size(), deadline, why) ||
      !net::recv_exact(fd, answer.data(), answer.size(), deadline, why))
    return fail(net::Clock::now() >= deadline ? DialFailure::timeout : DialFailure::unreachable,
                "its door closed the connection during the greeting: " + why, fd);
  out.verdict = door::check_answer(opts.key, purpose, tls, opts.wire_version, server.nonce, client_nonce, answer);
  if (out.verdict != door::Verdict::admitted) {
    bool forged = answer[0] == uint8_t(door::Verdict::admitted);  // it claims admission without the key
    std::string why = "it refused our greeting: " + door::describe(out.verdict);
    if (forged) why = "its answer does not prove the cluster secret: it is not a worker of this cluster";
    if (out.verdict == door::Verdict::tls)
      why = tls ? "it does not speak TLS, and we do (are the TLS files meant for this cluster?)"
                : "it requires TLS, and we have no TLS files (give the cluster's certificate, key and CA)";
    return fail(DialFailure::refused, why, fd);
  }
  if (opts.tls) {
    try {
      out.ssl = opts.tls->session(fd, false);
    } catch (const std::exception& e) {
      return fail(DialFailure::tls, e.what(), fd);
    }
    if (!tls_handshake(out.ssl.get(), fd, deadline, why)) return fail(DialFailure::tls, "the TLS handshake failed: " + why, fd);
  }
  out.fd = fd;
  return out;
}

}  // namespace castor::detail
