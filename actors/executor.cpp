// Executor implementation: a mutex-guarded queue; threads start on demand and
// the surplus started for blocked threads retires when idle.
//
// Note [Executor sizing]
// ~~~~~~~~~~~~~~~~~~~~~~
// `threads` (num_worker_threads, 16 as in PyTorch) bounds the runnable
// threads.
//  E1 A post wakes or starts a thread only while fewer than `threads` run
//     or are on their way to the queue (coming_: notified or just started).
//     The pool used to notify an idle thread on every post; a flood of
//     20,000 calls then woke threads that found the queue drained by the
//     ones already awake. Counting the ones on their way took castor-bench
//     rpc's rpc_async from 40 k to 64-72 k calls/s.
//  E2 Waking fewer (as many as cores, more only when no task finished for a
//     millisecond) was tried and dropped: a 1 MiB echo went from 0.5 to
//     2.2 ms, as work that waits without a BlockingScope held the few.
//  E3 A thread blocked in a nested call (BlockingScope) does not count, and
//     is replaced at once as in E1, so fan-in cannot deadlock.
//  E4 Threads beyond `threads` (started for blocked ones) retire after 2 s idle.
#include "actors/executor.hpp"

#include <chrono>
#include <cstdio>
#include <exception>
#include <thread>
#include <vector>

namespace castor::detail {
namespace {
thread_local Executor* tl_current = nullptr;
constexpr auto kSurplusIdle = std::chrono::seconds(2);
}  // namespace

Executor::Executor(Options opts) : opts_(std::move(opts)) {
  if (opts_.threads == 0) opts_.threads = 1;
  if (opts_.max_threads < opts_.threads) opts_.max_threads = opts_.threads;
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
  add_runnable_locked();  // E1
  return true;
}

void Executor::spawn_locked() {
  ++threads_;
  ++coming_;
  std::thread([this] { thread_main(); }).detach();
}

// Wakes or starts one thread for queued work if fewer than `threads` would run.
void Executor::add_runnable_locked() {
  if (queue_.empty() || running_ - blocked_ + coming_ >= opts_.threads) return;
  if (idle_ > coming_) {
    ++coming_;
    work_cv_.notify_one();
  } else if (threads_ < opts_.max_threads) {
    spawn_locked();
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
      bool surplus = threads_ - blocked_ > opts_.threads;  // E4
      bool woke = surplus ? work_cv_.wait_for(lock, kSurplusIdle, [&] { return !queue_.empty() || stopping_; })
                          : (work_cv_.wait(lock, [&] { return !queue_.empty() || stopping_; }), true);
      --idle_;
      if (coming_ > 0) --coming_;
      if (!woke && threads_ - blocked_ > opts_.threads) break;  // retire a surplus thread
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
  }
  --threads_;
  tl_current = nullptr;
  exit_cv_.notify_all();
}

void Executor::stop() {
  std::unique_lock<std::mutex> lock(mtx_);
  stopping_ = true;
  work_cv_.notify_all();
  exit_cv_.wait(lock, [&] { return threads_ == 0; });
}

void Executor::enter_blocking() {
  std::vector<Task> rejected;
  {
    std::lock_guard<std::mutex> lock(mtx_);
    ++blocked_;
    // Keep the pool's runnable size while this thread waits, if work is queued (E3).
    add_runnable_locked();
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
