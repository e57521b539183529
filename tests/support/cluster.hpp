// Test support: start a world of real workers (each its own CAF actor system
// and middleman, talking over loopback TCP), in this process or as child
// processes; bounded waits everywhere.
#pragma once

#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "actors/api/worker.hpp"

namespace castor::test {

/// A free TCP port on 127.0.0.1 (asks the OS; never a fixed port).
uint16_t free_port();

/// Options for rank `rank` of a loopback world.
WorkerOptions local_options(int rank, int world_size, uint16_t master_port);

/// Runs `f` on its own thread and waits at most `limit`; a hang fails the
/// test with `what` instead of stalling CI (the thread is abandoned).
template <class F>
auto bounded(std::chrono::milliseconds limit, const std::string& what, F&& f) {
  auto task = std::make_shared<std::packaged_task<decltype(f())()>>(std::forward<F>(f));
  auto fut = task->get_future();
  std::thread([task] { (*task)(); }).detach();
  if (fut.wait_for(limit) != std::future_status::ready) {
    std::fprintf(stderr, "TEST HANG: %s did not finish within %lld ms\n", what.c_str(), (long long)limit.count());
    std::fflush(stderr);
    std::_Exit(3);
  }
  return fut.get();
}

/// `n` workers in this process, started concurrently (ranks 0..n-1, names
/// worker0..). `tweak` may adjust each rank's options.
class LocalWorld {
 public:
  explicit LocalWorld(int n, std::function<void(WorkerOptions&)> tweak = {});
  ~LocalWorld();
  Worker& operator[](size_t i) { return workers_[i]; }
  size_t size() const { return workers_.size(); }
  uint16_t master_port() const { return port_; }
  /// Graceful shutdown of every worker at once (bounded); then checks that no
  /// worker still owns an RRef (see leaked()).
  void shutdown_all();
  bool leaked() const { return leaked_; }

 private:
  bool leaked_ = false;
  uint16_t port_;
  std::vector<Worker> workers_;
};

/// A worker in a child process (tests/support/test_worker_main.cpp).
class ChildWorker {
 public:
  ChildWorker(int rank, int world_size, uint16_t master_port, std::vector<std::string> extra_args = {});
  ~ChildWorker();
  void kill();             // SIGKILL, at once
  int wait_exit(std::chrono::milliseconds limit);  // exit code, or -1 on timeout
  int pid() const { return pid_; }

 private:
  int pid_ = -1;
};

/// Polls `cond` every 5 ms until it holds or `limit` has passed; returns its
/// last value (every wait in a test is bounded).
bool eventually(const std::function<bool()>& cond, std::chrono::milliseconds limit = std::chrono::milliseconds(20000));

}  // namespace castor::test
