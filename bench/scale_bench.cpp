// castor-bench scale: worlds of 8 to 128 worker processes on this machine:
// init time, an all-to-all round, the RRef protocol's three-party case from
// every worker (and no RRef left afterwards), memory per worker (RSS and
// PSS), shutdown, and the peers' exit after it.
#include <chrono>
#include <fstream>
#include <thread>

#include "actors/api/worker.hpp"

#include "bench_suites.hpp"

namespace castor::bench {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

// The value of `key` (in kB) in one of /proc's files of a process (0 = this
// one), in MiB; 0 if unreadable.
double proc_mib(int pid, const char* file, const std::string& key) {
  std::ifstream in("/proc/" + (pid ? std::to_string(pid) : std::string("self")) + "/" + file);
  std::string name;
  while (in >> name) {
    if (name == key) {
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
  for (int n : {8, 16, 32, 64, 128}) {
    auto suffix = "_w" + std::to_string(n);
    // The floor: the n-1 peer processes' start alone, each exec'd. Each
    // loads libtorch (about 1 s of CPU on this machine, most of it the
    // dynamic linker's relocations and libtorch's operator registry), so on
    // few cores the start of many exec'd workers is bound by the CPU before
    // castor says a word. The world's peers fork from one loaded copy
    // instead (Note [Fork server]): its init may go well under this floor.
    double floor = process_start_ms(opts, n - 1);
    out.push_back({"scale_process_start_floor_ms" + suffix, floor});
    auto t0 = Clock::now();
    BenchWorld world(opts, n);
    double init = ms_since(t0);
    out.push_back({"scale_init_ms" + suffix, init});
    out.push_back({"scale_init_over_floor" + suffix, init / floor});
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
    // Once more: the first round also paid for what a pair does on first
    // contact (CAF's connection, maybe a bulk link: B11 of Note [Bulk path]).
    auto t_again = Clock::now();
    if (round("scale_fan_out") != sum) throw std::runtime_error("scale: the second all-to-all round differs");
    out.push_back({"scale_all_to_all_again_ms" + suffix, ms_since(t_again)});

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

    // RSS counts libtorch's and CAF's shared pages once per worker; PSS
    // splits them among the processes that map them, so n workers' PSS adds
    // up to what they take from the machine.
    double rss = 0, pss = 0;
    for (int r = 0; r < n; ++r) {
      int pid = r ? world.peer_pid(r) : 0;
      rss += proc_mib(pid, "status", "VmRSS:");
      pss += proc_mib(pid, "smaps_rollup", "Pss:");
    }
    out.push_back({"scale_rss_MiB_per_worker" + suffix, rss / n});
    out.push_back({"scale_pss_MiB_per_worker" + suffix, pss / n});
    auto t2 = Clock::now();
    w.shutdown();
    out.push_back({"scale_shutdown_ms" + suffix, ms_since(t2)});
    // Until every peer process has ended: a forked worker skips the
    // libraries' teardown (FS7 of Note [Fork server]).
    auto t3 = Clock::now();
    world.reap_peers();
    out.push_back({"scale_exit_ms" + suffix, ms_since(t3)});
  }
  return out;
}

}  // namespace castor::bench
