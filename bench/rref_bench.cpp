// castor-bench rref: remote() + to_here() round trips, 100,000
// create/fetch/drop cycles with the owner's memory before and after, and an
// RRef passed on to a third worker.
#include <fstream>
#include <thread>

#include <ATen/ATen.h>

#include "bench_suites.hpp"
#include "rref/rref.hpp"

CASTOR_FUNCTION(bench_owner_count, [] {
  return castor::current_worker().rref_debug_info().at("num_owner_rrefs");
});
// An RRef passed on to a third worker (the pipeline app's pattern): taken by
// value, the fork is borrowed (G3 of Note [RRef protocol]); taken as an RRef
// and fetched inside (PyTorch's way), it is adopted.
CASTOR_FUNCTION(bench_sum_of_value, [](at::Tensor t) { return t.sum(); });
CASTOR_FUNCTION(bench_sum_of_rref, [](castor::RRef<at::Tensor> r) { return r.to_here().sum(); });

namespace castor::bench {
namespace {

double rss_mib(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  return 0;
}

}  // namespace

std::vector<Figure> bench_rref(const Options& opts) {
  std::vector<Figure> out;
  auto x = at::ones({2});
  int r = opts.reps;
  {
    BenchWorld world(opts, 2);
    auto& w = world.self();
    out.push_back({"remote_to_here_us",
                   median_us(2000 * r, [&] { w.remote<at::Tensor>("worker1", "bench_add", x, x).to_here(); }, 100)});
    const int cycles = 100000;
    auto pid = world.peer_pid(1);
    for (int i = 0; i < 2000; ++i) w.remote<at::Tensor>("worker1", "bench_ident", x).to_here();  // warm up
    double before = rss_mib(pid);
    auto t = std::chrono::steady_clock::now();
    for (int i = 0; i < cycles; ++i) w.remote<at::Tensor>("worker1", "bench_ident", x).to_here();
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
    int64_t owners = -1;
    for (int i = 0; i < 500; ++i) {  // the last deletes are still on their way
      owners = w.rpc_sync<int64_t>("worker1", "bench_owner_count");
      if (owners == 0) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    double after = rss_mib(pid);
    out.push_back({"rref_cycles_per_s", cycles / secs, Better::higher});
    out.push_back({"owner_rss_growth_MiB", after - before});
    out.push_back({"owner_rrefs_after_cycles", double(owners)});
  }
  // A value made on worker1 with remote(), its RRef passed to worker2, which
  // sums it: each call on worker2 includes its fetch from worker1.
  BenchWorld world(opts, 3);
  auto& w = world.self();
  auto passed_on = [&](const char* function) {
    return median_us(1000 * r, [&] {
      w.rpc_sync<at::Tensor>("worker2", function, w.remote<at::Tensor>("worker1", "bench_ident", x));
    }, 100);
  };
  out.push_back({"rref_passed_on_by_value_us", passed_on("bench_sum_of_value")});
  out.push_back({"rref_passed_on_as_rref_us", passed_on("bench_sum_of_rref")});
  return out;
}

}  // namespace castor::bench
