// Executor implementation: a mutex-guarded queue; threads start on demand and
// the surplus started for blocked threads retires when idle.
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
  if (idle_ > 0)
    work_cv_.notify_one();
  else if (runnable < opts_.threads && threads_ < opts_.max_threads)
    spawn_locked();
  return true;
}

void Executor::spawn_locked() {
  ++threads_;
  std::thread([this] { thread_main(); }).detach();
}

void Executor::thread_main() {
  tl_current = this;
  if (opts_.on_thread_start) opts_.on_thread_start();
  std::unique_lock<std::mutex> lock(mtx_);
  for (;;) {
    if (queue_.empty()) {
      if (stopping_) break;
      ++idle_;
      bool surplus = threads_ - blocked_ > opts_.threads;
      bool woke = surplus ? work_cv_.wait_for(lock, kSurplusIdle, [&] { return !queue_.empty() || stopping_; })
                          : (work_cv_.wait(lock, [&] { return !queue_.empty() || stopping_; }), true);
      --idle_;
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
    // Keep the pool's runnable size while this thread waits, if work is queued.
    if (!queue_.empty() && idle_ == 0 && threads_ - blocked_ < opts_.threads && threads_ < opts_.max_threads)
      spawn_locked();
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
