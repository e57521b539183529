// Test support: start a world of real workers (each its own CAF actor system
// and middleman, talking over loopback TCP), in this process or as child
// processes; bounded waits everywhere.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "actors/api/worker.hpp"

namespace castor::test {

/// A free TCP port on 127.0.0.1, random, below the kernel's ephemeral range
/// (never a fixed port; see cluster.cpp for why not the OS's own pick).
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
  /// SIGSTOP, and waits (bounded) until every thread of it has stopped:
  /// kill() returns before they do, and on a loaded machine its other
  /// threads can go on serving for milliseconds. True once all are stopped.
  bool freeze(std::chrono::milliseconds limit = std::chrono::milliseconds(10000));
  int wait_exit(std::chrono::milliseconds limit);  // exit code, or -1 on timeout
  int pid() const { return pid_; }

 private:
  int pid_ = -1;
};

/// A TCP relay on a free loopback port to 127.0.0.1:`target`. Until open(),
/// connections to it wait unanswered in its listen backlog (a worker that
/// dials it waits for the door's greeting); from open() on, each is relayed
/// to the target both ways until either side closes. A test gives a worker
/// this port for a peer to hold back that one link until it has seen the
/// event it wants first.
class GatedRelay {
 public:
  explicit GatedRelay(uint16_t target);
  ~GatedRelay();
  GatedRelay(const GatedRelay&) = delete;
  GatedRelay& operator=(const GatedRelay&) = delete;
  uint16_t port() const { return port_; }
  void open();

 private:
  void accept_loop();
  void pump(int a, int b);
  uint16_t target_;
  uint16_t port_ = 0;
  int listener_ = -1;
  std::atomic<bool> stop_{false};
  std::mutex mtx_;
  std::vector<std::thread> threads_;
};

/// Stands in for a worker that has not started, on 127.0.0.1:`port`: accepts
/// connections and keeps them open until `n` are open at once, then closes
/// them and stops listening. A worker's dial waits for a greeting on its open
/// connection and makes no other meanwhile, so `n` open connections are `n`
/// different workers trying to reach this port (they retry once closed).
/// False if fewer came within `limit`.
bool await_dialers(uint16_t port, size_t n, std::chrono::milliseconds limit);

/// Polls `cond` every 5 ms until it holds or `limit` has passed; returns its
/// last value (every wait in a test is bounded).
bool eventually(const std::function<bool()>& cond, std::chrono::milliseconds limit = std::chrono::milliseconds(20000));

/// Opens the direct lanes between world[0] and world[1] both ways (B8 of
/// Note [Bulk path]): a small message does not wait for a link, so calls go
/// through CAF until each link's writer has opened it, and a message sent
/// on a lane may overtake one sent earlier through CAF. False if not open
/// within `eventually`'s bound.
bool open_lanes(LocalWorld& world);

}  // namespace castor::test
