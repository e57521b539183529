// castor-bench rpc: the figures of PyTorch's RPC benchmark, castor's side.
#include <ATen/ATen.h>
#include <caf/scoped_actor.hpp>

#include <cstring>

#include "actors/runtime/testing.hpp"

#include "bench_suites.hpp"
#include "floors.hpp"

namespace castor::bench {

namespace {

double value_of(const std::vector<Figure>& figures, const std::string& name) {
  for (auto& f : figures)
    if (f.name == name) return f.castor;
  return 0;
}

}  // namespace

std::vector<Figure> bench_rpc(const Options& opts) {
  auto out = bench_floors(opts);
  int r = opts.reps;
  // The floors that figures are read against live beside them (their peers
  // are forked before any worker starts), and each group of figures is
  // timed in turns with its floors (paired_medians_us): a ratio of two
  // figures taken minutes apart swung by up to 2x on this VM.
  PingPongFloor pingpong;
  EchoFloor echo_floor(size_t(64) << 20);
  AesFloor aes(size_t(64) << 20);
  std::vector<char> copy_from(size_t(64) << 20, 'a'), copy_to(copy_from.size());
  BenchCerts certs(2);
  BenchWorld world(opts, 2);
  // The call with the direct lane off (B8 of Note [Bulk path]): this worker
  // has no bulk path, so both ways go through CAF's BASP link.
  BenchWorld caf_world(opts, 2, [](WorkerOptions& o) { o.bulk_threshold = 0; });
  // The echo with the tensors on the socket (B7 of Note [Bulk path] off):
  // what two hosts would see, against the TCP floor.
  BenchWorld tcp_world(opts, 2, [](WorkerOptions& o) { o.bulk_same_host = false; });
  // The same in a TLS cluster (B6 of Note [Bulk path]): small calls, the
  // same-host echo (B7: the bytes move kernel to kernel, addresses inside
  // the session) and the echo with its bytes encrypted on the socket.
  BenchWorld tls_world(opts, 2, {}, AutogradMode::smart, certs.dir());
  BenchWorld tls_tcp_world(opts, 2, [](WorkerOptions& o) { o.bulk_same_host = false; }, AutogradMode::smart,
                           certs.dir());
  auto& w = world.self();
  auto x = at::ones({2});
  auto small_call = [x](Worker& on) { return Turn{[&on, x] { on.rpc_sync<at::Tensor>("worker1", "bench_add", x, x); }}; };
  // CAF's own request/response to the peer's worker actor: the floor of any
  // path through actors (a termination probe needs no user code).
  auto& rt = castor::testing::runtime(w);
  caf::scoped_actor self{*rt.system};
  auto peer = *rt.world().peer(1);
  int64_t round = 0;
  Turn caf_request{[&] {
    self->request(peer, std::chrono::seconds(10), probe_atom::value, ++round)
        .receive([](TerminationReport&) {}, [](caf::error&) {});
  }};
  auto small = paired_medians_us({pingpong.turn(), small_call(w), caf_request, small_call(caf_world.self()),
                                  small_call(tls_world.self())},
                                 15 * r, 200, 200);
  auto big = at::rand({int64_t(64) * 1024 * 1024 / 4});
  auto echo = [&big](Worker& on) { return Turn{[&on, &big] { on.rpc_sync<at::Tensor>("worker1", "bench_ident", big); }}; };
  auto large = paired_medians_us({Turn{[&] { echo_floor.round_trip(); }},
                                  Turn{[&] { std::memcpy(copy_to.data(), copy_from.data(), copy_from.size()); }},
                                  Turn{[&] { aes.pass(); }}, echo(w), echo(tcp_world.self()), echo(tls_world.self()),
                                  echo(tls_tcp_world.self())},
                                 7 * r, 1, 2);
  out.insert(out.begin(), {"floor_tcp_pingpong_us", small[0]});
  out.push_back({"floor_tcp_echo_64MiB_ms", large[0] / 1e3});
  out.push_back({"floor_memcpy_64MiB_ms", large[1] / 1e3});
  out.push_back({"floor_aes256gcm_64MiB_ms", large[2] / 1e3});
  out.push_back({"rpc_sync_udf_us", small[1]});
  out.push_back({"rpc_sync_builtin_us",
                 median_us(3000 * r, [&] { w.rpc_sync<at::Tensor>("worker1", "aten::add", x, x); }, 200)});
  out.push_back({"caf_request_response_us", small[2]});
  out.push_back({"rpc_sync_udf_caf_us", small[3]});
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
  auto one_mib = at::rand({int64_t(1024) * 1024 / 4});
  out.push_back({"echo_1MiB_ms",
                 median_us(50 * r, [&] { w.rpc_sync<at::Tensor>("worker1", "bench_ident", one_mib); }, 2) / 1e3});
  out.push_back({"echo_64MiB_ms", large[3] / 1e3});
  out.push_back({"echo_64MiB_tcp_ms", large[4] / 1e3});
  out.push_back({"rpc_sync_udf_tls_us", small[4]});
  out.push_back({"echo_64MiB_tls_ms", large[5] / 1e3});
  out.push_back({"echo_64MiB_tls_tcp_ms", large[6] / 1e3});
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
