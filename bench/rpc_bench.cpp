// castor-bench rpc: the figures of PyTorch's RPC benchmark, castor's side.
#include <ATen/ATen.h>
#include <caf/scoped_actor.hpp>

#include "actors/runtime.hpp"

#include "bench_suites.hpp"

namespace castor::bench {

std::vector<Figure> bench_rpc(const Options& opts) {
  std::vector<Figure> out;
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
    auto& rt = w.runtime();
    caf::scoped_actor self{*rt.system};
    auto peer = rt.peer_handles[1];
    int64_t round = 0;
    out.push_back(Figure{"caf_request_response_us", median_us(3000 * r, [&] {
                     self->request(peer, std::chrono::seconds(10), probe_atom::value, ++round)
                         .receive([](TerminationReport&) {}, [](caf::error&) {});
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
  return out;
}

}  // namespace castor::bench
