// Executor implementation: a mutex-guarded queue; threads start on demand and
// the surplus started for blocked threads retires when idle.
//
// Note [Executor sizing]
// ~~~~~~~~~~~~~~~~~~~~~~
// `threads` (num_worker_threads, 16 as in PyTorch) bounds the runnable
// threads, but running 16 on two cores only adds context switches: with
// 20,000 small calls in flight a callee ran 40 k calls/s on 16 threads and
// 66 k on 2 (castor-bench rpc). So:
//  E1 A post wakes or starts a thread at once only while fewer than
//     `eager_` = min(threads, cores) run (threads on their way count too:
//     coming_).
//  E2 Beyond that a monitor thread adds one runnable thread per tick (1 ms)
//     in which queued work waited and no task finished: the running ones
//     are stuck (a user function that sleeps or waits), not busy.
//  E3 A thread blocked in a nested call (BlockingScope) does not count, and
//     is replaced at once as in E1, so fan-in cannot deadlock.
//  E4 Threads beyond `eager_` retire after 2 s idle.
#include "actors/executor.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <thread>
#include <vector>

namespace castor::detail {
namespace {
thread_local Executor* tl_current = nullptr;
constexpr auto kSurplusIdle = std::chrono::seconds(2);
constexpr auto kMonitorTick = std::chrono::milliseconds(1);
}  // namespace

Executor::Executor(Options opts) : opts_(std::move(opts)) {
  if (opts_.threads == 0) opts_.threads = 1;
  if (opts_.max_threads < opts_.threads) opts_.max_threads = opts_.threads;
  eager_ = std::min<size_t>(opts_.threads, std::max(1u, std::thread::hardware_concurrency()));
  if (eager_ < opts_.threads) monitor_ = std::thread([this] { monitor_main(); });
}

Executor::~Executor() { stop(); }

Executor* Executor::current() { return tl_current; }

std::function<void(std::function<void()>)> Executor::runner() {
  std::weak_ptr<Executor> weak = weak_from_this();
  return [weak](std::function<void()> cb) {
    if (auto ex = weak.lock())
      if (ex->post(cb)) return;
    cb();  // the executor is gone or stopping: run here rather than lose it
  };
}

bool Executor::post(Task task, Task reject) {
  std::unique_lock<std::mutex> lock(mtx_);
  if (stopping_) return false;
  size_t runnable = threads_ - blocked_;
  if (runnable == 0 && threads_ >= opts_.max_threads) return false;  // saturated
  queue_.push_back(Entry{std::move(task), std::move(reject)});
  add_runnable_locked(eager_);  // E1
  if (monitor_parked_) {
    monitor_parked_ = false;
    monitor_cv_.notify_one();
  }
  return true;
}

void Executor::spawn_locked() {
  ++threads_;
  ++coming_;
  std::thread([this] { thread_main(); }).detach();
}

// Wakes or starts one thread for queued work if fewer than `limit` would run.
void Executor::add_runnable_locked(size_t limit) {
  if (queue_.empty() || running_ - blocked_ + coming_ >= limit) return;
  if (idle_ > coming_) {
    ++coming_;
    work_cv_.notify_one();
  } else if (threads_ < opts_.max_threads) {
    spawn_locked();
  }
}

void Executor::monitor_main() {
  std::unique_lock<std::mutex> lock(mtx_);
  while (!stopping_) {
    if (queue_.empty()) {
      monitor_parked_ = true;
      monitor_cv_.wait(lock, [&] { return stopping_ || !monitor_parked_; });
      continue;
    }
    auto seen = completed_;
    monitor_cv_.wait_for(lock, kMonitorTick);
    if (!stopping_ && completed_ == seen) add_runnable_locked(opts_.threads);  // E2
  }
}

void Executor::thread_main() {
  tl_current = this;
  if (opts_.on_thread_start) opts_.on_thread_start();
  std::unique_lock<std::mutex> lock(mtx_);
  --coming_;  // started by spawn_locked
  for (;;) {
    if (queue_.empty()) {
      if (stopping_) break;
      ++idle_;
      bool surplus = threads_ - blocked_ > eager_;  // E4
      bool woke = surplus ? work_cv_.wait_for(lock, kSurplusIdle, [&] { return !queue_.empty() || stopping_; })
                          : (work_cv_.wait(lock, [&] { return !queue_.empty() || stopping_; }), true);
      --idle_;
      if (coming_ > 0) --coming_;
      if (!woke && threads_ - blocked_ > eager_) break;  // retire a surplus thread
      continue;
    }
    auto task = std::move(queue_.front().run);
    queue_.pop_front();
    ++running_;
    lock.unlock();
    try {
      task();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "castor[%s]: a task escaped with an exception: %s\n", opts_.name.c_str(), e.what());
    } catch (...) {
      std::fprintf(stderr, "castor[%s]: a task escaped with an unknown exception\n", opts_.name.c_str());
    }
    task = nullptr;  // release captures outside the lock
    lock.lock();
    --running_;
    ++completed_;
  }
  --threads_;
  tl_current = nullptr;
  exit_cv_.notify_all();
}

void Executor::stop() {
  std::unique_lock<std::mutex> lock(mtx_);
  stopping_ = true;
  work_cv_.notify_all();
  monitor_cv_.notify_all();
  exit_cv_.wait(lock, [&] { return threads_ == 0; });
  lock.unlock();
  if (monitor_.joinable() && monitor_.get_id() != std::this_thread::get_id()) monitor_.join();
}

void Executor::enter_blocking() {
  std::vector<Task> rejected;
  {
    std::lock_guard<std::mutex> lock(mtx_);
    ++blocked_;
    // Keep the pool's runnable size while this thread waits, if work is queued (E3).
    add_runnable_locked(eager_);
    // Saturated: every thread up to the bound now waits, so queued work that
    // can be refused is refused rather than left to wait forever.
    if (threads_ == blocked_ && threads_ >= opts_.max_threads) {
      for (auto it = queue_.begin(); it != queue_.end();) {
        if (it->reject) {
          rejected.push_back(std::move(it->reject));
          it = queue_.erase(it);
        } else {
          ++it;
        }
      }
    }
  }
  for (auto& r : rejected) r();
}

void Executor::leave_blocking() {
  std::lock_guard<std::mutex> lock(mtx_);
  --blocked_;
}

Executor::BlockingScope::BlockingScope() : pool_(tl_current) {
  if (pool_) pool_->enter_blocking();
}

Executor::BlockingScope::~BlockingScope() {
  if (pool_) pool_->leave_blocking();
}

Executor::Stats Executor::stats() const {
  std::lock_guard<std::mutex> lock(mtx_);
  return Stats{threads_, idle_, blocked_, running_, queue_.size()};
}

bool Executor::idle() const {
  std::lock_guard<std::mutex> lock(mtx_);
  return queue_.empty() && running_ == 0;
}

}  // namespace castor::detail
