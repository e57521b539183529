// The door (Note [The door]): the greeting's checks as pure functions, then
// the door and the dialer over loopback sockets -- who gets in, who is
// refused and why, and that strangers cost nothing lasting.
#include <doctest/doctest.h>

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "actors/transport/dialer.hpp"
#include "actors/transport/door.hpp"
#include "actors/transport/greeting.hpp"
#include "support/cluster.hpp"
#include "support/door_probes.hpp"

using namespace castor::detail;
using namespace std::chrono_literals;

namespace {

constexpr uint16_t kWire = 4;

door::Key key(const std::string& s) { return door::Key{s}; }

// A door on 127.0.0.1 that keeps what it admits.
struct TestDoor {
  explicit TestDoor(const std::string& secret, std::chrono::milliseconds timeout = 2000ms, size_t per_host = 32) {
    DoorOptions o;
    o.worker = "test";
    o.key = key(secret);
    o.wire_version = kWire;
    o.greeting_timeout = timeout;
    o.max_pending_per_host = per_host;
    door = std::make_unique<Door>(std::move(o));
    port = door->listen("127.0.0.1", 0, false, door::Purpose::basp, false, [this](Admitted a) {
      std::lock_guard<std::mutex> lock(mtx);
      admitted.push_back(a.fd);
    });
  }
  ~TestDoor() {
    door->stop();
    for (int fd : admitted) ::close(fd);
  }
  size_t count_admitted() {
    std::lock_guard<std::mutex> lock(mtx);
    return admitted.size();
  }
  std::unique_ptr<Door> door;
  uint16_t port = 0;
  std::mutex mtx;
  std::vector<int> admitted;
};

Dialed dial_with(const std::string& secret, uint16_t port, door::Purpose purpose = door::Purpose::basp,
                 uint16_t wire = kWire) {
  DialOptions o;
  o.key = key(secret);
  o.wire_version = wire;
  return dial(o, "127.0.0.1", port, purpose, net::Clock::now() + 3s);
}

uint64_t refused(Door& d, Refusal r) { return d.counts().refused[size_t(r)]; }

}  // namespace

TEST_CASE("greeting: the same secret admits, and each side proves it to the other") {
  auto server = door::random_nonce(), client = door::random_nonce();
  auto k = key("a cluster secret of some length");
  auto hello = door::make_client_hello(k, door::Purpose::basp, false, kWire, server, client);
  auto check = door::check_client_hello(k, door::Purpose::basp, false, kWire, server, hello);
  CHECK(check.verdict == door::Verdict::admitted);
  CHECK(check.client_nonce == client);
  auto answer = door::make_answer(k, check.verdict, door::Purpose::basp, false, kWire, server, client);
  CHECK(door::check_answer(k, door::Purpose::basp, false, kWire, server, client, answer) == door::Verdict::admitted);
  // The server's proof is not the client's: a reflected hello proves nothing.
  CHECK(std::memcmp(answer.data() + 4, hello.data() + 32, door::kMacBytes) != 0);
}

TEST_CASE("greeting: another secret, a replayed greeting, another purpose or version are refused by name") {
  auto server = door::random_nonce(), client = door::random_nonce();
  auto hello = door::make_client_hello(key("secret-one-0123456789"), door::Purpose::basp, false, kWire, server, client);
  CHECK(door::check_client_hello(key("secret-two-0123456789"), door::Purpose::basp, false, kWire, server, hello).verdict ==
        door::Verdict::secret);
  CHECK(door::check_client_hello(key(""), door::Purpose::basp, false, kWire, server, hello).verdict == door::Verdict::secret);
  // Replayed against a new server nonce (D2).
  CHECK(door::check_client_hello(key("secret-one-0123456789"), door::Purpose::basp, false, kWire, door::random_nonce(), hello)
            .verdict == door::Verdict::secret);
  CHECK(door::check_client_hello(key("secret-one-0123456789"), door::Purpose::bulk, false, kWire, server, hello).verdict ==
        door::Verdict::purpose);
  CHECK(door::check_client_hello(key("secret-one-0123456789"), door::Purpose::basp, false, kWire + 1, server, hello).verdict ==
        door::Verdict::version);
  door::ClientHello junk{};
  std::memcpy(junk.data(), "GET / HT", 8);
  CHECK(door::check_client_hello(key(""), door::Purpose::basp, false, kWire, server, junk).verdict == door::Verdict::not_castor);
  CHECK_FALSE(door::may_be_client_hello(junk.data(), 3));
  CHECK(door::may_be_client_hello(hello.data(), 5));
  // An answer that claims admission without the key is a forgery.
  door::Answer forged{};
  forged[0] = uint8_t(door::Verdict::admitted);
  CHECK(door::check_answer(key("secret-one-0123456789"), door::Purpose::basp, false, kWire, server, client, forged) ==
        door::Verdict::secret);
  CHECK(door::describe(door::Verdict::secret) == "the cluster secret differs (or one side has none)");
  // TLS on one side only is named as such, but only to a peer with the key.
  auto tls_hello = door::make_client_hello(key("secret-one-0123456789"), door::Purpose::basp, true, kWire, server, client);
  CHECK(door::check_client_hello(key("secret-one-0123456789"), door::Purpose::basp, false, kWire, server, tls_hello)
            .verdict == door::Verdict::tls);
  CHECK(door::check_client_hello(key("secret-one-0123456789"), door::Purpose::basp, true, kWire, server, tls_hello)
            .verdict == door::Verdict::admitted);
  CHECK(door::check_client_hello(key("secret-two-0123456789"), door::Purpose::basp, false, kWire, server, tls_hello)
            .verdict == door::Verdict::secret);
}

TEST_CASE("greeting: what strangers sent is shown printable or in hex") {
  std::string http = "GET / HTTP/1.1\r\n";
  CHECK(door::preview(reinterpret_cast<const uint8_t*>(http.data()), http.size()) == "\"GET / HTTP/1.1\\r\\n\"");
  auto crafted = castor::test::probe::crafted_basp_header();
  CHECK(door::preview(crafted.data(), 10) == "00 00 00 00 00 00 00 00 ff ff");
}

TEST_CASE("door: a dialer with the cluster secret is admitted, without it, it is refused and told why") {
  TestDoor d("the-cluster-secret-0123");
  auto ok = dial_with("the-cluster-secret-0123", d.port);
  REQUIRE(ok.ok());
  ::close(ok.fd);
  CHECK(castor::test::eventually([&] { return d.count_admitted() == 1; }, 3s));
  auto wrong = dial_with("another-secret-0123456", d.port);
  CHECK_FALSE(wrong.ok());
  CHECK(wrong.failure == DialFailure::refused);
  CHECK(wrong.error == "it refused our greeting: the cluster secret differs (or one side has none)");
  auto none = dial_with("", d.port);
  CHECK(none.failure == DialFailure::refused);
  auto bulk = dial_with("the-cluster-secret-0123", d.port, door::Purpose::bulk);
  CHECK(bulk.failure == DialFailure::refused);
  CHECK(bulk.verdict == door::Verdict::purpose);
  auto old = dial_with("the-cluster-secret-0123", d.port, door::Purpose::basp, kWire - 1);
  CHECK(old.failure == DialFailure::refused);
  CHECK(old.error.find("another castor version") != std::string::npos);
  CHECK(castor::test::eventually([&] { return d.door->counts().refused_total() == 4; }, 3s));
  CHECK(refused(*d.door, Refusal::secret) == 2);
  CHECK(refused(*d.door, Refusal::purpose) == 1);
  CHECK(refused(*d.door, Refusal::version) == 0);  // the dialer saw the version in the server's hello and left
  CHECK(refused(*d.door, Refusal::closed) == 1);
  CHECK(d.count_admitted() == 1);
}

TEST_CASE("door: garbage, a crafted BASP header, TLS and HTTP are closed at once as not castor") {
  namespace probe = castor::test::probe;
  TestDoor d("");
  for (auto& bytes : {probe::crafted_basp_header(), probe::garbage(4096, 1), probe::tls_client_hello(), probe::http_get()}) {
    auto seen = probe::send_bytes("127.0.0.1", d.port, bytes);
    CHECK(seen.closed_by_worker);
    CHECK(seen.received.size() == door::kServerHelloBytes);  // the door's hello, then nothing
  }
  CHECK(castor::test::eventually([&] { return refused(*d.door, Refusal::not_castor) == 4; }, 3s));
  CHECK(d.count_admitted() == 0);
  // The door still admits a castor peer.
  auto ok = dial_with("", d.port);
  REQUIRE(ok.ok());
  ::close(ok.fd);
}

TEST_CASE("door: a scanner and a silent client cost a socket for the greeting timeout, then are gone") {
  namespace probe = castor::test::probe;
  TestDoor d("", 300ms);
  probe::port_scan("127.0.0.1", d.port);
  auto seen = probe::send_bytes("127.0.0.1", d.port, {}, 3000ms);  // says nothing
  CHECK(seen.closed_by_worker);
  CHECK(castor::test::eventually([&] { return refused(*d.door, Refusal::timeout) == 1; }, 3s));
  CHECK(castor::test::eventually([&] { return refused(*d.door, Refusal::closed) == 1; }, 3s));
}

TEST_CASE("door: one host cannot hold more greetings open than its share, others still get in") {
  TestDoor d("", 5000ms, 4);
  std::vector<int> silent;
  for (int i = 0; i < 6; ++i) {
    std::string why;
    int fd = net::connect_tcp("127.0.0.1", d.port, net::Clock::now() + 2s, why);
    REQUIRE(fd >= 0);
    silent.push_back(fd);
  }
  CHECK(castor::test::eventually([&] { return refused(*d.door, Refusal::overload) == 2; }, 3s));
  for (int fd : silent) ::close(fd);
  CHECK(castor::test::eventually([&] { return refused(*d.door, Refusal::closed) == 4; }, 3s));
  auto ok = dial_with("", d.port);
  CHECK(ok.ok());
  if (ok.ok()) ::close(ok.fd);
}

TEST_CASE("dialer: something that is not a castor door is named as such") {
  int fd = -1;
  std::string why;
  int server = net::listen_tcp("127.0.0.1", 0, false, why);
  REQUIRE(server >= 0);
  auto port = net::local_port(server);
  std::thread answer([&] {
    pollfd p{server, POLLIN, 0};
    if (::poll(&p, 1, 3000) != 1) return;
    fd = ::accept(server, nullptr, nullptr);
    const char* http = "HTTP/1.1 400 Bad Request\r\n\r\n";
    (void)!::write(fd, http, std::strlen(http));
  });
  auto d = dial_with("", port);
  answer.join();
  CHECK(d.failure == DialFailure::not_castor);
  CHECK(d.error.find("it is not a castor worker's door (it sent \"HTTP/1.1 400 Bad") == 0);
  if (fd >= 0) ::close(fd);
  ::close(server);
}
