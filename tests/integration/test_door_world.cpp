// Strangers at a running world's doors (Note [The door]): real workers on
// loopback keep calling each other -- small calls, bulk tensors -- while
// garbage, a crafted BASP header (which crashed a worker before the door),
// scanners, silent clients, other secrets, refused and broken TLS sessions
// and inspection clients come and go. Every call must return its value and
// every stranger must be counted as refused for its cause.
#include <doctest/doctest.h>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "actors/transport/bulk/bulk_path.hpp"
#include "actors/observe/inspector.hpp"
#include "actors/runtime/testing.hpp"
#include "actors/transport/greeting.hpp"
#include "actors/transport/tls.hpp"
#include "support/certs.hpp"
#include "support/cluster.hpp"
#include "support/door_probes.hpp"

using namespace castor;
using namespace std::chrono_literals;
namespace probe = castor::test::probe;

namespace {

const std::string kSecret = "door-world-test-secret-0123456789";

// worker1 calls worker0 until told to stop: small calls and, every tenth, a
// bulk tensor (Note [Bulk path]); every answer is checked.
struct Traffic {
  explicit Traffic(Worker& caller) : thread([this, &caller] { run(caller); }) {}
  ~Traffic() { stop(); }
  void run(Worker& w) {
    auto big = at::arange(300000, at::kFloat);  // 1.2 MB: the bulk link when there is one
    for (int64_t i = 0; !stopping.load(); ++i) {
      try {
        if (i % 10 == 9) {
          auto back = w.rpc_sync<at::Tensor>("worker0", "identity", big);
          if (!back.equal(big)) wrong.fetch_add(1);
        } else if (w.rpc_sync<int64_t>("worker0", "add_ints", i, int64_t(1)) != i + 1) {
          wrong.fetch_add(1);
        }
        done.fetch_add(1);
      } catch (const std::exception& e) {
        failed.fetch_add(1);
        std::fprintf(stderr, "traffic: %s\n", e.what());
      }
    }
  }
  void stop() {
    stopping = true;
    if (thread.joinable()) thread.join();
  }
  std::atomic<bool> stopping{false};
  std::atomic<int64_t> done{0}, wrong{0}, failed{0};
  std::thread thread;
};

nlohmann::json inspect(uint16_t port, const TlsOptions& tls, const std::string& secret) {
  InspectionClient client("127.0.0.1", port, tls, secret, 5000ms);
  return nlohmann::json::parse(client.snapshot());
}

std::string inspect_error(uint16_t port, const TlsOptions& tls, const std::string& secret) {
  try {
    InspectionClient client("127.0.0.1", port, tls, secret, 5000ms);
    client.snapshot();
  } catch (const RpcError& e) {
    return e.what();
  }
  return "";
}

// The probes every door must shrug off; `port` is a castor or bulk port.
void knock_with_strangers(uint16_t port) {
  for (int i = 0; i < 3; ++i) CHECK(probe::send_bytes("127.0.0.1", port, probe::crafted_basp_header()).closed_by_worker);
  CHECK(probe::send_bytes("127.0.0.1", port, probe::garbage(8192, 11)).closed_by_worker);
  CHECK(probe::send_bytes("127.0.0.1", port, probe::http_get()).closed_by_worker);
  CHECK(probe::send_bytes("127.0.0.1", port, probe::tls_client_hello()).closed_by_worker);
  CHECK(probe::send_bytes("127.0.0.1", port, probe::garbage(3, 5), 5000ms, true).received.size() ==
        castor::detail::door::kServerHelloBytes);
  for (int i = 0; i < 5; ++i) probe::port_scan("127.0.0.1", port);
}

TlsOptions files_of(const std::string& dir, const std::string& name) { return test::tls_files(dir, name); }

std::string make_certs(const std::string& tag) { return test::make_certs("door-" + tag, {"worker0", "worker1"}); }

uint64_t refused(const nlohmann::json& snap, const char* cause) { return snap["door"]["refused"][cause].get<uint64_t>(); }

}  // namespace

TEST_CASE("a world with a cluster secret keeps working while strangers knock at its castor and bulk ports") {
  test::LocalWorld world(2, [](WorkerOptions& o) {
    o.secret = kSecret;
    o.greeting_timeout = 3000ms;  // the silent clients below outlast it; a real greeting, even slowed by load, does not
  });
  auto port = world.master_port();  // worker0's castor port
  auto bulk_port = castor::testing::runtime(world[0]).bulk->port();
  Traffic traffic(world[1]);
  REQUIRE(test::eventually([&] { return traffic.done.load() > 20; }, 10s));

  knock_with_strangers(port);
  knock_with_strangers(bulk_port);
  // Silent clients hold a socket each until the greeting timeout, no more.
  std::vector<std::thread> silent;
  for (int i = 0; i < 4; ++i)
    silent.emplace_back([port] { CHECK(probe::send_bytes("127.0.0.1", port, {}, 6000ms).closed_by_worker); });
  // Other secrets, and none: refused by name.
  CHECK(probe::greeted("127.0.0.1", port, "not-the-cluster-secret-01", {}, {}, false) ==
        "it refused our greeting: the cluster secret differs (or one side has none)");
  CHECK(probe::greeted("127.0.0.1", port, "", {}, probe::crafted_basp_header(), false) ==
        "it refused our greeting: the cluster secret differs (or one side has none)");
  // A peer with the secret that dies mid-session (its connection reset).
  CHECK(probe::greeted("127.0.0.1", port, kSecret, {}, {}, true) == "");
  // castor inspect with the secret works; without it, it is told why.
  auto snap = inspect(port, {}, kSecret);
  CHECK(snap["worker"]["name"] == "worker0");
  CHECK(inspect_error(port, {}, "") ==
        "cannot inspect 127.0.0.1:" + std::to_string(port) +
            ": it refused our greeting: the cluster secret differs (or one side has none)");
  for (auto& t : silent) t.join();

  auto before = traffic.done.load();
  CHECK(test::eventually([&] { return traffic.done.load() > before + 20; }, 10s));  // still calling
  traffic.stop();
  CHECK(traffic.wrong.load() == 0);
  CHECK(traffic.failed.load() == 0);
  snap = inspect(port, {}, kSecret);
  INFO(snap["door"].dump());
  CHECK(snap["door"]["authenticated"] == true);
  CHECK(refused(snap, "not_castor") == 7 + 7);  // both ports
  CHECK(refused(snap, "secret") == 3);
  CHECK(refused(snap, "closed") >= 10);  // the scans
  CHECK(test::eventually([&] { return refused(inspect(port, {}, kSecret), "timeout") == 4; }, 15s));
  CHECK(snap["bulk"]["messages_received"].get<uint64_t>() > 0);  // the bulk link carried tensors meanwhile
  world.shutdown_all();
  CHECK_FALSE(world.leaked());
}

TEST_CASE("TLS through an intermediate CA: a certificate file with its chain passes init_rpc's check and every handshake, the certificate alone is refused naming why") {
  auto certs = test::make_chained_certs("door-chain", {"worker0", "worker1"});
  test::LocalWorld world(2, [&](WorkerOptions& o) {
    o.secret = kSecret;
    o.tls = files_of(certs, o.name);
  });
  REQUIRE(castor::testing::runtime(world[0]).bulk != nullptr);
  auto big = at::arange(300000, at::kFloat);  // the TLS bulk link's handshake too
  CHECK(world[1].rpc_sync<at::Tensor>("worker0", "identity", big).equal(big));
  CHECK(world[0].rpc_sync<int64_t>("worker1", "add_ints", int64_t(40), int64_t(2)) == 42);
  CHECK(inspect(world.master_port(), files_of(certs, "worker1"), kSecret)["worker"]["name"] == "worker0");
  WorkerOptions alone;
  alone.name = "worker2";
  alone.tls = files_of(certs, "worker0");
  alone.tls.certificate = certs + "/worker0-alone.pem";
  std::string why;
  try {
    castor::detail::check_tls(alone);
  } catch (const RpcError& e) {
    why = e.what();
  }
  CHECK(why == "init_rpc(worker2): TLS: the certificate " + alone.tls.certificate + " is not signed by the CA " +
                   alone.tls.ca + ": unable to get local issuer certificate");
  world.shutdown_all();
  CHECK_FALSE(world.leaked());
}

TEST_CASE("a TLS world keeps working through refused, plain, certificate-less and broken TLS sessions") {
  auto certs = make_certs("good"), other = make_certs("other");
  test::LocalWorld world(2, [&](WorkerOptions& o) {
    o.secret = kSecret;
    o.tls = files_of(certs, o.name);
  });
  auto port = world.master_port();
  auto bulk_port = castor::testing::runtime(world[0]).bulk->port();  // B6: a TLS bulk link
  Traffic traffic(world[1]);
  REQUIRE(test::eventually([&] { return traffic.done.load() > 20; }, 10s));

  knock_with_strangers(port);  // a TLS ClientHello straight at the door among them
  knock_with_strangers(bulk_port);
  // With the secret but without a certificate, with another CA's, or
  // without TLS at all: the handshake fails in the door, and only there.
  CHECK(probe::greeted_tls_without_certificate("127.0.0.1", port, kSecret) != "the worker accepted a TLS client without a certificate");
  CHECK(probe::greeted("127.0.0.1", port, kSecret, files_of(other, "worker1"), {}, false).find(
            "the TLS handshake failed") == 0);
  CHECK(probe::greeted_plain_at_tls_port("127.0.0.1", port, kSecret, probe::crafted_basp_header()) == "");
  CHECK(probe::greeted("127.0.0.1", port, kSecret, {}, {}, false) ==
        "it requires TLS, and we have no TLS files (give the cluster's certificate, key and CA)");
  // A TLS peer of the cluster whose session ends without close_notify (it
  // was killed): before T6, this dropped every other link of the worker.
  for (int i = 0; i < 3; ++i)
    CHECK(probe::greeted("127.0.0.1", port, kSecret, files_of(certs, "worker1"), probe::garbage(5, 3), true) == "");
  // The bulk port's door is the same: another CA's certificate or no TLS is
  // refused there; a cluster peer that sends garbage inside its session
  // loses that link (B5) and nothing else.
  CHECK(probe::greeted("127.0.0.1", bulk_port, kSecret, files_of(other, "worker1"), {}, false, true).find(
            "the TLS handshake failed") == 0);
  CHECK(probe::greeted("127.0.0.1", bulk_port, kSecret, {}, {}, false, true) ==
        "it requires TLS, and we have no TLS files (give the cluster's certificate, key and CA)");
  CHECK(probe::greeted("127.0.0.1", bulk_port, kSecret, files_of(certs, "worker1"), probe::garbage(64, 7), true, true) == "");
  // castor inspect with the files works; without them it is told why.
  auto snap = inspect(port, files_of(certs, "worker1"), kSecret);
  CHECK(snap["door"]["tls"] == true);
  CHECK(inspect_error(port, {}, kSecret).find("it requires TLS, and we have no TLS files") != std::string::npos);

  auto before = traffic.done.load();
  CHECK(test::eventually([&] { return traffic.done.load() > before + 20; }, 10s));
  traffic.stop();
  CHECK(traffic.wrong.load() == 0);
  CHECK(traffic.failed.load() == 0);
  snap = inspect(port, files_of(certs, "worker1"), kSecret);
  INFO(snap["door"].dump());
  CHECK(refused(snap, "not_castor") == 7 + 7);  // both ports
  // No certificate, another CA's, plain bytes, no TLS at all (a probe,
  // castor inspect); at the bulk port another CA's and no TLS.
  CHECK(refused(snap, "tls") == 5 + 2);
  CHECK(snap["door"]["admitted"].get<uint64_t>() >= 8);  // worker1 (twice), the broken sessions, the inspectors
  // The traffic's large tensors went on worker1's TLS bulk link.
  CHECK(snap["bulk"]["tls"] == true);
  CHECK(snap["bulk"]["messages_received"].get<uint64_t>() > 0);
  world.shutdown_all();
  CHECK_FALSE(world.leaked());
}
