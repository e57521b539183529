// castor-bench scale: worlds of 8 to 64 worker processes on this machine:
// init time, an all-to-all round, the RRef protocol's three-party case from
// every worker (and no RRef left afterwards), memory per worker, shutdown.
#include <chrono>
#include <fstream>
#include <thread>

#include "actors/api/worker.hpp"

#include "bench_suites.hpp"

namespace castor::bench {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

// Resident memory of a process in MiB (0 if unreadable).
double rss_mib(int pid) {
  std::ifstream in("/proc/" + (pid ? std::to_string(pid) : std::string("self")) + "/status");
  std::string key;
  while (in >> key) {
    if (key == "VmRSS:") {
      double kib = 0;
      in >> kib;
      return kib / 1024;
    }
    in.ignore(1 << 16, '\n');
  }
  return 0;
}

}  // namespace

std::vector<Figure> bench_scale(const Options& opts) {
  std::vector<Figure> out;
  for (int n : {8, 16, 32, 64}) {
    auto suffix = "_w" + std::to_string(n);
    auto t0 = Clock::now();
    BenchWorld world(opts, n);
    out.push_back({"scale_init_ms" + suffix, ms_since(t0)});
    auto& w = world.self();

    auto round = [&](const char* fn) {
      std::vector<Future<int64_t>> fs;
      for (int r = 0; r < n; ++r) fs.push_back(w.rpc_async<int64_t>("worker" + std::to_string(r), fn));
      int64_t sum = 0;
      for (auto& f : fs) sum += f.wait();
      return sum;
    };
    auto t1 = Clock::now();
    auto sum = round("scale_fan_out");  // every worker calls every other one: n(n-1) calls
    out.push_back({"scale_all_to_all_ms" + suffix, ms_since(t1)});
    if (sum != int64_t(n - 1) * n * (n - 1) / 2)
      throw std::runtime_error("scale: the all-to-all round of " + std::to_string(n) + " workers returned " +
                               std::to_string(sum));

    std::vector<Future<double>> fs;
    for (int r = 0; r < n; ++r) fs.push_back(w.rpc_async<double>("worker" + std::to_string(r), "scale_rref_round"));
    for (auto& f : fs)
      if (f.wait() != 4.0) throw std::runtime_error("scale: an RRef round fetched the wrong value");
    int64_t left = -1;
    for (int i = 0; i < 100 && left != 0; ++i) {
      if (i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      left = round("scale_rref_state");
    }
    if (left != 0) throw std::runtime_error("scale: " + std::to_string(left) + " RRef states left in " + std::to_string(n) + " workers");

    double rss = rss_mib(0);
    for (int r = 1; r < n; ++r) rss += rss_mib(world.peer_pid(r));
    out.push_back({"scale_rss_MiB_per_worker" + suffix, rss / n});
    auto t2 = Clock::now();
    w.shutdown();
    out.push_back({"scale_shutdown_ms" + suffix, ms_since(t2)});
  }
  return out;
}

}  // namespace castor::bench
