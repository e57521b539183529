// Counters that the test functions update, for assertions.
#pragma once

namespace torch::serialize {
class OutputArchive;
class InputArchive;
}  // namespace torch::serialize

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "actors/api/current_worker.hpp"
#include "actors/api/worker.hpp"

namespace castor::test {
extern std::atomic<int64_t> finished_slow_calls;
extern std::atomic<int> counter_overlap;

/// A gate that registered functions wait at (gated_value) until the test
/// opens it: the test holds a call at a point it chooses, observes what it
/// wants while the call is held, then lets it go, with no sleep deciding the
/// order. Process-wide, one per name; every wait is bounded.
class Gate {
 public:
  /// Lets every waiting and later caller through.
  void open();
  /// Closed again, nobody arrived (for a test that reuses a name).
  void reset();
  /// Called by the held code: counts its arrival, then waits until open()
  /// (true) or until `limit` has passed (false).
  bool pass(std::chrono::milliseconds limit);
  /// Waits until `n` callers have arrived at pass(), at most `limit`.
  bool wait_arrived(int n, std::chrono::milliseconds limit);
  int arrived() const;

 private:
  mutable std::mutex mtx_;
  std::condition_variable cv_;
  bool open_ = false;
  int arrived_ = 0;
};

/// The gate called `name` (made on first use).
Gate& gate(const std::string& name);

/// Opens a gate when it goes out of scope: a test that fails while a call
/// waits at the gate does not leave it waiting out its limit.
struct OpenOnExit {
  Gate& g;
  ~OpenOnExit() { g.open(); }
};
}  // namespace castor::test

// A remote object: calls run one at a time unless the class says otherwise.
// An object whose constructor waits at gate `name` (test::gate), for a
// remote() whose creation the test holds.
class GatedObject {
 public:
  explicit GatedObject(std::string name) {
    if (!castor::test::gate(name).pass(std::chrono::seconds(30)))
      throw std::runtime_error("gate '" + name + "' was not opened within 30 s");
  }
  int64_t get() const { return 7; }
};

class Counter {
 public:
  explicit Counter(int64_t start) : value_(start) {}
  int64_t add(int64_t x) { return value_ += x; }
  int64_t get() const { return value_; }
  int64_t slow_add(int64_t ms, int64_t x) {
    if (castor::test::counter_overlap.fetch_add(1) != 0) overlapped_ = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    castor::test::counter_overlap.fetch_sub(1);
    return value_ += x;
  }
  bool overlapped() const { return overlapped_; }
  // Blocks in a nested call to `worker` that waits at gate `gate`
  // (castor::test::gate) until the test opens it: only this object waits.
  int64_t wait_at(std::string worker, std::string gate) {
    return castor::current_worker().rpc_sync<at::Tensor>(worker, "gated_value", gate, at::ones({1})).numel();
  }
  castor::Future<int64_t> later(int64_t ms) {
    castor::Promise<int64_t> p;
    auto v = value_;
    std::thread([p, ms, v] {
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      p.set_value(v);
    }).detach();
    return p.future();
  }
  at::Tensor as_tensor() const { return at::full({1}, double(value_)); }

 private:
  int64_t value_;
  bool overlapped_ = false;
};

// Note [Methods run on arrival]: rounds of pushes kept as a parameter
// server keeps them. push, close, whose, raise and wait_inside are
// registered runs_on_arrival; close_in and hold_at run on the executor.
class ArrivalRound {
 public:
  explicit ArrivalRound(int64_t size) : size_(size) {}
  /// Completes with the round's sum once `size` pushes came (or close()):
  /// the last push completes every pusher's call, on the thread it runs on.
  castor::Future<int64_t> push(int64_t v) {
    log_.push_back(v);
    sum_ += v;
    auto round = round_.future();
    if (++pushed_ == size_) close();
    return round;
  }
  /// Ends the round with the pushes it has; returns how many there were.
  int64_t close() {
    auto round = round_;
    auto pushed = pushed_;
    round_ = castor::Promise<int64_t>();
    pushed_ = 0;
    round.set_value(std::exchange(sum_, 0));
    return pushed;
  }
  /// On the executor: holds the object for `ms`, then closes the round.
  int64_t close_in(int64_t ms) {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    return close();
  }
  /// Holds the object at gate `gate` (castor::test::gate), then logs -1.
  int64_t hold_at(std::string gate) {
    if (!castor::test::gate(gate).pass(std::chrono::seconds(30)))
      throw std::runtime_error("gate '" + gate + "' was not opened within 30 s");
    log_.push_back(-1);
    return -1;
  }
  std::vector<int64_t> log() const { return log_; }
  std::string whose() const { return castor::current_worker().name(); }
  int64_t raise(std::string why) { throw std::runtime_error(why); }
  /// Waits on a call to `worker` (M2 refuses it).
  int64_t wait_inside(std::string worker) {
    return castor::current_worker().rpc_sync<int64_t>(worker, "sleep_ms", int64_t(1));
  }

 private:
  int64_t size_;
  int64_t pushed_ = 0;
  int64_t sum_ = 0;
  castor::Promise<int64_t> round_;
  std::vector<int64_t> log_;  // pushes' values, -1 for hold_at, in the order they ran
};

// The same, but calls may overlap (it synchronizes itself).
class SharedCounter {
 public:
  SharedCounter() = default;
  SharedCounter(const SharedCounter&) = delete;  // objects need not be copyable or movable
  // Waits up to `ms` for another call to be in flight at the same time (so
  // that a loaded machine cannot make concurrent calls look serialized).
  int64_t slow_add(int64_t ms, int64_t x) {
    int now = ++in_flight_;
    int seen = max_.load();
    while (now > seen && !max_.compare_exchange_weak(seen, now)) {
    }
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (max_.load() < 2 && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    --in_flight_;
    return total_ += x;
  }
  int64_t max_in_flight() const { return max_.load(); }

 private:
  std::atomic<int> in_flight_{0}, max_{0};
  std::atomic<int64_t> total_{0};
};

// A remote object that opted in to castor::Checkpoint (Note [Checkpoint]):
// a total and a tensor. `fail_saves` makes its next save throw; `save_delay_ms`
// makes saves slow (to kill its owner in the middle of one).
class Ledger {
 public:
  explicit Ledger(int64_t start);
  int64_t add(int64_t x);
  int64_t total() const { return total_; }
  at::Tensor weights() const { return weights_; }
  bool fail_saves(bool yes);
  bool slow_saves(int64_t ms);
  void save(torch::serialize::OutputArchive& archive) const;
  void load(torch::serialize::InputArchive& archive);

 private:
  int64_t total_;
  at::Tensor weights_;
  bool fail_ = false;
  int64_t save_delay_ms_ = 0;
};
