// The door (Note [The door]): the greeting's checks as pure functions, then
// the door and the dialer over loopback sockets -- who gets in, who is
// refused and why, and that strangers cost nothing lasting.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <optional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "actors/transport/cluster_secret.hpp"
#include "actors/transport/dialer.hpp"
#include "actors/transport/door.hpp"
#include "actors/transport/greeting.hpp"
#include "actors/transport/refusal_log.hpp"
#include "support/cluster.hpp"
#include "support/captured_output.hpp"
#include "support/descriptors.hpp"
#include "support/door_probes.hpp"

using namespace castor::detail;
using namespace std::chrono_literals;

namespace {

constexpr uint16_t kWire = 4;

door::Key key(const std::string& s) { return door::Key{s}; }

// A door on 127.0.0.1 that keeps what it admits.
struct TestDoor {
  explicit TestDoor(const std::string& secret, std::chrono::milliseconds timeout = 2000ms, size_t per_host = 32,
                    const std::string& host = "127.0.0.1") {
    DoorOptions o;
    o.worker = "test";
    o.key = key(secret);
    o.wire_version = kWire;
    o.greeting_timeout = timeout;
    o.max_pending_per_host = per_host;
    door = std::make_unique<Door>(std::move(o));
    port = door->listen(host, 0, false, door::Purpose::basp, false, [this](Admitted a) {
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

TEST_CASE("door: a host is counted by its network, an IPv4 address or an IPv6 /64 (D3)") {
  CHECK(net::network_of("10.0.0.9") == "10.0.0.9");
  CHECK(net::network_of("::ffff:127.0.0.1") == "127.0.0.1");  // a dual-stack listener's IPv4 peer
  CHECK(net::network_of("64:ff9b::c000:221") == "192.0.2.33");  // an IPv4 peer through NAT64
  CHECK(net::network_of("64:ff9b::c000:222") == "192.0.2.34");
  CHECK(net::network_of("2001:db8:1:2:aaaa:bbbb:cccc:dddd") == "2001:db8:1:2::/64");
  CHECK(net::network_of("2001:db8:1:2::1") == "2001:db8:1:2::/64");
  CHECK(net::network_of("2001:db8:1:2:ffff:ffff:ffff:ffff") == "2001:db8:1:2::/64");
  CHECK(net::network_of("2001:db8:1:3::1") == "2001:db8:1:3::/64");
  CHECK(net::network_of("::1") == "::/64");
  CHECK(net::network_of("fe80::1c2d:3eff:fe4f:5a6b") == "fe80::/64");
  CHECK(net::network_of("?") == "?");  // getpeername failed: as it is
  CHECK(net::network_of("") == "");
}

// A socket from `source` (a loopback address: all of 127/8 is this host's)
// connected to `port` on 127.0.0.1, or -1.
int connect_from(const char* source, uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in from{}, to{};
  from.sin_family = to.sin_family = AF_INET;
  ::inet_pton(AF_INET, source, &from.sin_addr);
  ::inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
  to.sin_port = htons(port);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from) != 0 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
    if (fd >= 0) ::close(fd);
    return -1;
  }
  return fd;
}

TEST_CASE("door: on a dual-stack listener an IPv4 peer is counted by its IPv4 address, not by its mapped /64") {
  // Counted by the mapped address's /64 (::/64, as ::1), every IPv4 peer of
  // a dual-stack door would share one host's share.
  std::string why;
  int probe = net::listen_tcp("::", 0, false, why);
  if (probe < 0) {
    MESSAGE("not run: this host cannot listen on IPv6 (" << why << ")");
    return;
  }
  ::close(probe);
  std::ifstream v6only("/proc/sys/net/ipv6/bindv6only");
  int only = 0;
  if (v6only >> only && only == 1) {
    MESSAGE("not run: this host's IPv6 listeners take no IPv4 peers (net.ipv6.bindv6only = 1)");
    return;
  }
  TestDoor d("", 5000ms, 4, "::");
  std::vector<int> silent;
  for (int i = 0; i < 6; ++i) {
    int fd = connect_from("127.0.0.1", d.port);
    REQUIRE(fd >= 0);
    silent.push_back(fd);
  }
  CHECK(castor::test::eventually([&] { return refused(*d.door, Refusal::overload) == 2; }, 3s));
  for (const char* other : {"127.0.0.2", "127.0.0.3"}) {
    int fd = connect_from(other, d.port);
    REQUIRE(fd >= 0);
    silent.push_back(fd);
    // Another host's greeting is its own: the door greets it (its hello
    // comes only after D3's count let it in) rather than close it.
    pollfd p{fd, POLLIN, 0};
    REQUIRE(::poll(&p, 1, 3000) == 1);
    uint8_t byte = 0;
    CHECK(::recv(fd, &byte, 1, 0) == 1);
  }
  // And the first host's four still greet (none closed).
  CHECK(refused(*d.door, Refusal::overload) == 2);
  CHECK(refused(*d.door, Refusal::closed) == 0);
  for (int fd : silent) ::close(fd);
  CHECK(castor::test::eventually([&] { return refused(*d.door, Refusal::closed) == 6; }, 3s));
}

// The CPU time (user + system, in clock ticks) of the thread whose stat
// file `stat_fd` is open on; -1 if it cannot be read.
long thread_ticks(int stat_fd) {
  char buf[1024];
  auto n = ::pread(stat_fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return -1;
  buf[n] = 0;
  const char* p = std::strrchr(buf, ')');  // the name may hold spaces
  if (!p) return -1;
  long utime = 0, stime = 0;
  // Fields 3..13 come before utime (14) and stime (15).
  if (std::sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %ld %ld", &utime, &stime) != 2) return -1;
  return utime + stime;
}

// The stat file of this process's thread named `name`, open; -1 if none.
int open_thread_stat(const std::string& name) {
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string line;
    std::getline(comm, line);
    if (line == name) return ::open((task.path() / "stat").c_str(), O_RDONLY | O_CLOEXEC);
  }
  return -1;
}

TEST_CASE("door: out of descriptors, a listener rests instead of spinning, then accepts what waited (D7)") {
  TestDoor d("");
  int stat_fd = -1;  // the door's thread names itself once it runs
  CHECK(castor::test::eventually([&] { return (stat_fd = open_thread_stat("castor-door")) >= 0; }, 3s));
  REQUIRE(stat_fd >= 0);
  std::vector<int> clients;
  for (int i = 0; i < 3; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd >= 0);
    clients.push_back(fd);
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(d.port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  castor::test::DescriptorsLeft none(0);
  REQUIRE(none.ok());
  // The kernel completes the connections; the door cannot take them.
  bool connected = true;
  for (int fd : clients) connected = connected && ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  auto ticks_before = thread_ticks(stat_fd);
  std::this_thread::sleep_for(600ms);
  auto ticks_after = thread_ticks(stat_fd);
  none.restore();
  REQUIRE(connected);
  REQUIRE(ticks_before >= 0);
  CHECK(ticks_after - ticks_before < 15);  // resting: a spinning thread takes most of the 60 ticks of 600 ms
  CHECK(d.count_admitted() == 0);
  // Descriptors again: each waiting connection gets the door's hello.
  for (int fd : clients) {
    pollfd p{fd, POLLIN, 0};
    CHECK(::poll(&p, 1, 3000) == 1);
    char byte = 0;
    CHECK(::recv(fd, &byte, 1, 0) == 1);
    ::close(fd);
  }
  ::close(stat_fd);
}

TEST_CASE("a signal while a bounded read waits is not a timeout: the read goes on and gets its bytes") {
  struct sigaction quiet {}, before {};
  quiet.sa_handler = [](int) {};
  quiet.sa_flags = 0;  // no SA_RESTART: poll() returns EINTR
  REQUIRE(::sigaction(SIGUSR1, &quiet, &before) == 0);
  int pair[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) == 0);
  net::set_nonblocking(pair[0], true);
  std::atomic<bool> waiting{false};
  bool read = false;
  std::string why;
  char got[4] = {0};
  std::thread reader([&] {
    waiting = true;
    read = net::recv_exact(pair[0], got, sizeof got, net::Clock::now() + 5s, why);
  });
  while (!waiting) std::this_thread::sleep_for(1ms);
  std::this_thread::sleep_for(100ms);
  ::pthread_kill(reader.native_handle(), SIGUSR1);
  std::this_thread::sleep_for(100ms);
  REQUIRE(::send(pair[1], "abcd", 4, MSG_NOSIGNAL) == 4);
  reader.join();
  ::sigaction(SIGUSR1, &before, nullptr);
  CHECK(read);
  CHECK(why.empty());
  CHECK(std::string(got, 4) == "abcd");
  ::close(pair[0]);
  ::close(pair[1]);
}


TEST_CASE("the user's secret file: made once, private, and one that others may read or that another user owns is refused, saying why") {
  namespace fs = std::filesystem;
  auto dir = fs::temp_directory_path() / ("castor-secret-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  auto path = (dir / "secret").string();
  ::setenv("CASTOR_SECRET_FILE", path.c_str(), 1);
  CHECK_FALSE(castor::detail::user_secret(false).has_value());  // none yet, none made
  auto made = castor::detail::user_secret(true);
  REQUIRE(made.has_value());
  CHECK(made->size() == 64);
  CHECK((fs::status(path).permissions() & fs::perms::all) == (fs::perms::owner_read | fs::perms::owner_write));
  CHECK(castor::detail::user_secret(true) == made);  // the same one again
  // Readable by others: refused and said, and not replaced by a new one.
  fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read | fs::perms::others_read);
  std::optional<std::string> got;
  auto said = castor::test::output_of(2, [&] { got = castor::detail::user_secret(true); });
  CHECK_FALSE(got.has_value());
  CHECK(said == "castor: not using the secret file " + path + ": other users may read or change it (mode 644; chmod 600 it)\n");
  fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write);
  CHECK(castor::detail::user_secret(false) == made);
  // A FIFO where the file should be: refused at once, not waited on.
  fs::remove(path);
  REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
  said = castor::test::output_of(2, [&] { got = castor::detail::user_secret(true); });
  CHECK_FALSE(got.has_value());
  CHECK(said == "castor: not using the secret file " + path + ": it is not a regular file\n");
  fs::remove(path);
  { std::ofstream(path) << *made << "\n"; }
  fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write);
  // Owned by another user (only root can give a file away).
  if (::geteuid() == 0) {
    REQUIRE(::chown(path.c_str(), 4242, 4242) == 0);
    said = castor::test::output_of(2, [&] { got = castor::detail::user_secret(false); });
    CHECK_FALSE(got.has_value());
    CHECK(said == "castor: not using the secret file " + path + ": it belongs to user 4242, not to this one (0)\n");
  }
  ::unsetenv("CASTOR_SECRET_FILE");
  fs::remove_all(dir);
}

TEST_CASE("refusal lines: a flood from many hosts shows 200 lines, then a line a second, and the next line says how many went unsaid (R3)") {
  std::string burst = castor::test::output_of(2, [] {
    for (int i = 0; i < 300; ++i)
      castor::detail::log_refusal("w", "198.51.100." + std::to_string(i) + ":4000", "test flood", "refused a test");
  });
  auto shown = size_t(std::count(burst.begin(), burst.end(), '\n'));
  CHECK(shown >= 150);  // this test process's earlier refusals took some of the 200
  CHECK(shown <= 202);  // 200, and what a second's refill adds
  std::this_thread::sleep_for(1100ms);
  auto next = castor::test::output_of(2, [] { castor::detail::log_refusal("w", "203.0.113.1:4000", "test flood", "refused one more"); });
  long long unsaid = 0;
  REQUIRE(std::sscanf(next.c_str(), "castor[w]: %lld refusal line(s) not shown: past 200 at once, a line a second",
                      &unsaid) == 1);
  CHECK(shown + size_t(unsaid) >= 300);  // every line of the burst shown or counted
  CHECK(next.find("castor[w]: refused one more\n") != std::string::npos);
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
