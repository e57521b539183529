// Inspection of a running 3-worker job: `castor inspect` (a separate process
// that connects through CAF's middleman) and the metrics port must show the
// same numbers as the workers' own rref_debug_info() / autograd_debug_info().
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdio>
#include <set>
#include <string>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "engine/context.hpp"
#include "rref/rref.hpp"
#include "support/cluster.hpp"

using namespace castor;
using namespace castor::test;
using nlohmann::json;

namespace {

struct Run {
  int exit_code = -1;
  std::string out;
};

// Runs the castor command (stdout and stderr together), killed after 60 s.
Run castor_cli(const std::string& args) {
  Run r;
  auto cmd = std::string("timeout -s KILL 60 ") + CASTOR_CLI_PATH + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// GET `path` from 127.0.0.1:port with a 10 s receive limit.
std::string http_get(uint16_t port, const std::string& path) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  auto req = "GET " + path + " HTTP/1.1\r\nHost: localhost\r\n\r\n";
  REQUIRE(::send(fd, req.data(), req.size(), 0) == ssize_t(req.size()));
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) out.append(buf, size_t(n));
  ::close(fd);
  return out;
}

// The value of the Prometheus sample whose name and labels are `series`.
std::string sample(const std::string& text, const std::string& series) {
  auto at = text.find("\n" + series + " ");
  if (at == std::string::npos) return "<missing " + series + ">";
  auto begin = at + series.size() + 2;
  return text.substr(begin, text.find('\n', begin) - begin);
}

}  // namespace

TEST_CASE("castor inspect and the metrics port agree with rref_debug_info and autograd_debug_info") {
  uint16_t metrics = free_port();
  LocalWorld world(3, [metrics](WorkerOptions& o) {
    if (o.rank == 0) o.metrics_port = metrics;
  });
  auto& w0 = world[0];
  const int kCalls = 7;
  for (int i = 0; i < kCalls; ++i)
    REQUIRE(w0.rpc_sync<int64_t>("worker1", "add_ints", int64_t(i), int64_t(1)) == i + 1);
  // Owned by worker0: one value kept here, one held by worker1 (a fork).
  auto kept = w0.make_rref(at::ones({2, 3}));
  auto held = world[1].remote<at::Tensor>("worker0", "aten::zeros", std::vector<int64_t>{4, 4});
  REQUIRE(held.to_here().sum().item<double>() == 0);
  // The value may be answered before worker0's context has counted it and
  // worker1's fork (V2 of Note [Values on arrival]); the owner's
  // confirmation leaves after that count.
  REQUIRE(eventually([&] { return held.confirmed_by_owner(); }, std::chrono::milliseconds(10000)));
  autograd::Context ctx(w0);  // one context alive on worker0 while we look

  auto rrefs = w0.rref_debug_info();
  auto ag = w0.autograd_debug_info();
  REQUIRE(rrefs.at("num_owner_rrefs") == 2);
  REQUIRE(ag.at("num_autograd_contexts") == 1);

  auto where = "127.0.0.1:" + std::to_string(world.master_port());
  auto run = castor_cli("inspect " + where + " --json");
  INFO(run.out);
  REQUIRE(run.exit_code == 0);
  auto s = json::parse(run.out);

  CHECK(s["worker"]["name"] == "worker0");
  REQUIRE(s["workers"].size() == 3);
  for (int r = 0; r < 3; ++r) {
    CHECK(s["workers"][r]["name"] == "worker" + std::to_string(r));
    CHECK(s["workers"][r]["alive"] == true);
  }
  CHECK(s["rrefs"]["owned"].size() == size_t(rrefs.at("num_owner_rrefs")));
  int64_t forks = 0;
  for (auto& o : s["rrefs"]["owned"]) forks += o["forks"].get<int64_t>();
  CHECK(forks == rrefs.at("num_forks"));
  CHECK(forks == 1);
  std::multiset<std::string> types;
  for (auto& o : s["rrefs"]["owned"]) types.insert(o["type"].get<std::string>());
  CHECK(types == std::multiset<std::string>{"Tensor[Float 2x3]", "Tensor[Float 4x4]"});
  CHECK(s["rrefs"]["pending_users"].size() == size_t(rrefs.at("num_pending_users")));
  for (auto& [k, v] : rrefs) CHECK(s["rrefs"]["debug_info"][k] == v);
  CHECK(s["autograd"]["contexts"].size() == size_t(ag.at("num_autograd_contexts")));
  CHECK(s["autograd"]["running_graph_tasks"] == ag.at("num_running_graph_tasks"));
  CHECK(s["latency_us"]["rpc"]["count"] == kCalls);
  CHECK(s["latency_us"]["rpc"]["p50"].get<double>() > 0);
  CHECK(s["latency_us"]["rpc"]["p50"].get<double>() <= s["latency_us"]["rpc"]["p99"].get<double>());
  CHECK(s["messages"]["call_reply"].get<int64_t>() >= kCalls);
  CHECK(s["messages"]["call_request"].get<int64_t>() >= 1);  // worker1's remote()
  CHECK(s["calls"]["outgoing_in_flight"].empty());
  CHECK(s["executor"]["threads"].get<int64_t>() >= 1);

  // The page for people, and --watch with a bounded number of redraws.
  auto page = castor_cli("inspect " + where);
  INFO(page.out);
  CHECK(page.exit_code == 0);
  CHECK(page.out.find("worker0 (rank 0) at ") != std::string::npos);
  CHECK(page.out.find("OWNED RREFS (2)") != std::string::npos);
  CHECK(page.out.find("AUTOGRAD  contexts 1, running graph tasks 0") != std::string::npos);
  auto watch = castor_cli("inspect " + where + " --watch --interval 0.2 --count 2");
  CHECK(watch.exit_code == 0);
  size_t pages = 0;
  for (size_t at = 0; (at = watch.out.find("OWNED RREFS", at)) != std::string::npos; ++at) ++pages;
  CHECK(pages == 2);

  // The metrics port: the same counters as Prometheus text.
  auto text = http_get(metrics, "/metrics");
  INFO(text);
  REQUIRE(text.rfind("HTTP/1.1 200 OK", 0) == 0);
  CHECK(sample(text, "castor_rref{worker=\"worker0\",key=\"num_owner_rrefs\"}") == "2");
  CHECK(sample(text, "castor_rref{worker=\"worker0\",key=\"num_forks\"}") == "1");
  CHECK(sample(text, "castor_autograd{worker=\"worker0\",key=\"num_autograd_contexts\"}") == "1");
  CHECK(sample(text, "castor_peer_alive{worker=\"worker0\",peer=\"worker2\"}") == "1");
  CHECK(sample(text, "castor_call_latency_microseconds_count{worker=\"worker0\",kind=\"rpc\"}") == std::to_string(kCalls));
  CHECK(http_get(metrics, "/nope").rfind("HTTP/1.1 404 Not Found", 0) == 0);
}

TEST_CASE("castor inspect names the address and the cause when nothing answers") {
  auto port = free_port();
  auto run = castor_cli("inspect 127.0.0.1:" + std::to_string(port) + " --timeout-ms 3000");
  INFO(run.out);
  CHECK(run.exit_code == 1);
  CHECK(run.out.find("castor inspect: cannot inspect 127.0.0.1:" + std::to_string(port) + ": ") != std::string::npos);
  auto bad = castor_cli("inspect nowhere");
  CHECK(bad.exit_code == 2);
  CHECK(bad.out.find("'nowhere' is not host:port (a worker name needs --config)") != std::string::npos);
}

TEST_CASE("a metrics port that cannot be opened fails init_rpc, naming the worker and the port") {
  // Occupy a port, then ask a single worker to serve metrics on it.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(::listen(fd, 1) == 0);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  auto busy = ntohs(addr.sin_port);
  auto opts = local_options(0, 1, free_port());
  opts.metrics_port = busy;
  opts.metrics_host = "127.0.0.1";
  try {
    auto w = bounded(std::chrono::seconds(60), "init_rpc", [&] { return init_rpc(opts); });
    FAIL("init_rpc served metrics on a busy port");
  } catch (const UnreachableError& e) {
    CHECK(std::string(e.what()).find("worker worker0: cannot serve metrics on 127.0.0.1:" + std::to_string(busy)) == 0);
  }
  ::close(fd);
}
