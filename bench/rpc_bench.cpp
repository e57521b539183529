// castor-bench rpc: the figures of PyTorch's RPC benchmark, castor's side.
#include <ATen/ATen.h>
#include <caf/scoped_actor.hpp>

#include "actors/runtime/testing.hpp"

#include "bench_suites.hpp"

namespace castor::bench {

namespace {

double value_of(const std::vector<Figure>& figures, const std::string& name) {
  for (auto& f : figures)
    if (f.name == name) return f.castor;
  return 0;
}

}  // namespace

std::vector<Figure> bench_rpc(const Options& opts) {
  auto out = bench_floors(opts);  // before any worker: the floors' peer is a plain fork
  BenchWorld world(opts, 2);
  auto& w = world.self();
  auto x = at::ones({2});
  int r = opts.reps;
  out.push_back({"rpc_sync_udf_us",
                 median_us(3000 * r, [&] { w.rpc_sync<at::Tensor>("worker1", "bench_add", x, x); }, 200)});
  out.push_back({"rpc_sync_builtin_us",
                 median_us(3000 * r, [&] { w.rpc_sync<at::Tensor>("worker1", "aten::add", x, x); }, 200)});
  {
    // CAF's own request/response to the peer's worker actor: the floor of any
    // path through actors (a termination probe needs no user code).
    auto& rt = castor::testing::runtime(w);
    caf::scoped_actor self{*rt.system};
    auto peer = *rt.world().peer(1);
    int64_t round = 0;
    out.push_back(Figure{"caf_request_response_us", median_us(3000 * r, [&] {
                     self->request(peer, std::chrono::seconds(10), probe_atom::value, ++round)
                         .receive([](TerminationReport&) {}, [](caf::error&) {});
                   }, 200)});
  }
  {
    // The same call with the direct lane off (B8 of Note [Bulk path]): this
    // worker has no bulk path, so both ways go through CAF's BASP link.
    BenchWorld caf_world(opts, 2, [](WorkerOptions& o) { o.bulk_threshold = 0; });
    out.push_back({"rpc_sync_udf_caf_us", median_us(3000 * r, [&] {
                     caf_world.self().rpc_sync<at::Tensor>("worker1", "bench_add", x, x);
                   }, 200)});
  }
  std::vector<double> rates;
  for (int rep = 0; rep < 5; ++rep) {
    const int n = 20000;
    auto t = std::chrono::steady_clock::now();
    std::vector<Future<at::Tensor>> fs;
    fs.reserve(n);
    for (int i = 0; i < n; ++i) fs.push_back(w.rpc_async<at::Tensor>("worker1", "bench_add", x, x));
    wait_all(fs);
    rates.push_back(n / std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count());
  }
  out.push_back({"rpc_async_calls_per_s", median(rates), Better::higher});
  for (auto [mib, n] : {std::pair<int, int>{1, 50}, std::pair<int, int>{64, 7}}) {
    auto big = at::rand({int64_t(mib) * 1024 * 1024 / 4});
    out.push_back({"echo_" + std::to_string(mib) + "MiB_ms",
                   median_us(n * r, [&] { w.rpc_sync<at::Tensor>("worker1", "bench_ident", big); }, 2) / 1e3});
  }
  {
    // The same echo with the tensors on the socket (B7 of Note [Bulk path]
    // off): what two hosts would see, against the TCP floor.
    BenchWorld tcp_world(opts, 2, [](WorkerOptions& o) { o.bulk_same_host = false; });
    auto big = at::rand({int64_t(64) * 1024 * 1024 / 4});
    out.push_back({"echo_64MiB_tcp_ms",
                   median_us(7 * r, [&] { tcp_world.self().rpc_sync<at::Tensor>("worker1", "bench_ident", big); }, 2) / 1e3});
  }
  {
    // The same in a TLS cluster (B6 of Note [Bulk path]): small calls, the
    // same-host echo (B7: the bytes move kernel to kernel, addresses inside
    // the session) and the echo with its bytes encrypted on the socket.
    BenchCerts certs(2);
    {
      BenchWorld tls_world(opts, 2, {}, AutogradMode::smart, certs.dir());
      auto& t = tls_world.self();
      out.push_back({"rpc_sync_udf_tls_us",
                     median_us(3000 * r, [&] { t.rpc_sync<at::Tensor>("worker1", "bench_add", x, x); }, 200)});
      auto big = at::rand({int64_t(64) * 1024 * 1024 / 4});
      out.push_back({"echo_64MiB_tls_ms",
                     median_us(7 * r, [&] { t.rpc_sync<at::Tensor>("worker1", "bench_ident", big); }, 2) / 1e3});
    }
    BenchWorld tls_tcp_world(opts, 2, [](WorkerOptions& o) { o.bulk_same_host = false; }, AutogradMode::smart,
                             certs.dir());
    auto big = at::rand({int64_t(64) * 1024 * 1024 / 4});
    out.push_back({"echo_64MiB_tls_tcp_ms",
                   median_us(7 * r, [&] { tls_tcp_world.self().rpc_sync<at::Tensor>("worker1", "bench_ident", big); }, 2) /
                       1e3});
  }
  out.push_back({"rpc_sync_udf_lane_over_caf_x", value_of(out, "rpc_sync_udf_us") / value_of(out, "rpc_sync_udf_caf_us")});
  // TLS against plain, same run (issue 21's target: <= 1.5x).
  out.push_back({"rpc_sync_udf_tls_over_plain_x", value_of(out, "rpc_sync_udf_tls_us") / value_of(out, "rpc_sync_udf_us")});
  out.push_back({"echo_64MiB_tls_over_plain_x", value_of(out, "echo_64MiB_tls_ms") / value_of(out, "echo_64MiB_ms")});
  out.push_back({"echo_64MiB_tcp_tls_over_plain_x",
                 value_of(out, "echo_64MiB_tls_tcp_ms") / value_of(out, "echo_64MiB_tcp_ms")});
  // An echo crosses twice; each way one core encrypts while the other
  // decrypts, so TLS adds at least two AES passes to the plain echo.
  out.push_back({"echo_64MiB_tcp_tls_vs_crypto_floor_x",
                 value_of(out, "echo_64MiB_tls_tcp_ms") /
                     (value_of(out, "echo_64MiB_tcp_ms") + 2 * value_of(out, "floor_aes256gcm_64MiB_ms"))});
  // castor against the machine (issue 8's targets: <= 1.8x, <= 1.15x, <= 3x).
  out.push_back({"rpc_sync_udf_vs_tcp_floor_x", value_of(out, "rpc_sync_udf_us") / value_of(out, "floor_tcp_pingpong_us")});
  out.push_back({"echo_64MiB_tcp_vs_tcp_floor_x",
                 value_of(out, "echo_64MiB_tcp_ms") / value_of(out, "floor_tcp_echo_64MiB_ms")});
  out.push_back({"echo_64MiB_vs_memcpy_floor_x",
                 value_of(out, "echo_64MiB_ms") / value_of(out, "floor_memcpy_64MiB_ms")});
  return out;
}

}  // namespace castor::bench
