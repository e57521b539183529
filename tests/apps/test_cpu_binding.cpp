// The pipeline's stages bound to a CPU each (P1 of Note [Pipeline]): the
// binding itself, in this process, and the app's decision, through castor run.
#include <doctest/doctest.h>

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "actors/api/worker.hpp"
#include "actors/transport/sockets.hpp"
#include "apps/cli_runs.hpp"
#include "apps/common/cpu_binding.hpp"
#include "apps/in_process_workers.hpp"
#include "apps/pipeline/pipeline.hpp"
#include "support/errors.hpp"

using castor::test::contains;
using castor::test::in_process;
using castor::test::run_castor;

namespace {

std::vector<int> cpus_of(pthread_t thread) {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (pthread_getaffinity_np(thread, sizeof set, &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

// A folder of this test process's own for the runs' curves, removed at the end.
struct Scratch {
  std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("castor-test-binding-" + std::to_string(::getpid()));
  Scratch() { std::filesystem::create_directories(dir); }
  ~Scratch() {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }
  std::string operator()(const std::string& name) const { return (dir / name).string(); }
};

}  // namespace

// Binds this test's process for good: ctest runs each case in a process of
// its own, and a run of the whole binary only runs the cases after it on one
// CPU.
TEST_CASE("a process bound to a CPU slot: every thread, those before and after, runs there, and another slot is refused") {
  auto id = castor::apps::host_identity();
  CHECK(id.size() == 36);  // the kernel's boot id, a UUID
  CHECK(castor::apps::host_identity() == id);
  const auto allowed = cpus_of(pthread_self());
  std::string why;
  CHECK_FALSE(castor::apps::bind_process_to_cpu_slot(int(allowed.size()), why));
  CHECK(why == "this process may run on " + std::to_string(allowed.size()) + " CPU(s), too few to give it CPU slot " +
                   std::to_string(allowed.size()) + " of its own");
  if (allowed.size() < 2) {
    MESSAGE("one CPU here: nothing to bind to");
    return;
  }
  // A thread already running when the process is bound; it ends when the
  // case does, a failed REQUIRE included.
  struct Running {
    std::atomic<bool> go{false};
    std::thread thread{[this] {
      while (!go.load()) std::this_thread::yield();
    }};
    ~Running() {
      go = true;
      thread.join();
    }
  } before;
  why.clear();
  REQUIRE_MESSAGE(castor::apps::bind_process_to_cpu_slot(1, why), why);
  const std::vector<int> second{allowed[1]};
  CHECK(cpus_of(pthread_self()) == second);
  CHECK(cpus_of(before.thread.native_handle()) == second);
  std::vector<int> seen_after;
  std::thread after([&] { seen_after = cpus_of(pthread_self()); });
  after.join();
  CHECK(seen_after == second);
  // Bound once: the same slot again is a no-op, another is refused by name.
  CHECK(castor::apps::bind_process_to_cpu_slot(1, why));
  CHECK_FALSE(castor::apps::bind_process_to_cpu_slot(0, why));
  CHECK(why == "this process is bound to CPU " + std::to_string(allowed[1]) + " (slot 1) already");
}

TEST_CASE("pipeline app: stages on one host are bound to a CPU each, unless both are on one worker or told not to") {
  const auto allowed = cpus_of(pthread_self());
  Scratch scratch;
  const std::vector<std::string> common{"--epochs", "1", "--limit", "256", "--test-limit", "100", "--batch-size", "64",
                                        "--no-progress"};
  auto run = [&](std::vector<std::string> args, const std::string& out) {
    args.insert(args.end(), common.begin(), common.end());
    args.insert(args.end(), {"--out", scratch(out)});
    return run_castor(args);
  };
  {
    auto r = run({"run", "pipeline", "--workers", "3"}, "pipeline-bound");
    INFO(r.output);
    REQUIRE(r.code == 0);
    if (allowed.size() >= 2)
      CHECK(contains(r.output, "pipeline: stages bound to a CPU each (they share a host): worker1 to the first it "
                               "may use, worker2 to the second\n"));
    else
      CHECK(contains(r.output, "pipeline: stages not bound to CPUs: on worker1, this process may run on 1 CPU(s)"));
  }
  {
    auto r = run({"run", "pipeline", "--workers", "3", "--no-stage-binding"}, "pipeline-unbound");
    INFO(r.output);
    REQUIRE(r.code == 0);
    CHECK(contains(r.output, "pipeline: stages not bound to CPUs (--no-stage-binding)\n"));
  }
  {
    auto r = run({"run", "pipeline", "--workers", "2"}, "pipeline-one-stage-worker");
    INFO(r.output);
    REQUIRE(r.code == 0);
    CHECK(contains(r.output, "pipeline: stages not bound to CPUs: both are on worker1\n"));
  }
}

TEST_CASE("pipeline: a stage in the driver's own process is left free, the process unbound") {
  const auto allowed = cpus_of(pthread_self());
  auto port = castor::detail::net::free_local_port();
  auto second = std::async(std::launch::async, [port] { return castor::init_rpc(in_process(1, port)); });
  auto driver = castor::init_rpc(in_process(0, port));
  auto stage = second.get();
  castor::apps::pipeline::PipelineConfig cfg;
  cfg.stage1_rank = 0;
  cfg.stage2_rank = 1;
  CHECK(castor::apps::pipeline::bind_stages(driver, cfg) ==
        "stages not bound to CPUs: a stage runs in the driver's process");
  cfg.stage1_rank = 1;
  cfg.stage2_rank = 0;
  CHECK(castor::apps::pipeline::bind_stages(driver, cfg) ==
        "stages not bound to CPUs: a stage runs in the driver's process");
  CHECK(cpus_of(pthread_self()) == allowed);
  auto stopping = std::async(std::launch::async, [&stage] { stage.shutdown(); });
  driver.shutdown();
  stopping.get();
}
