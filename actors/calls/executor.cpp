// Executor implementation: a mutex-guarded queue; threads start on demand and
// the surplus started for blocked threads retires when idle.
//
// Note [Executor sizing]
// ~~~~~~~~~~~~~~~~~~~~~~
// `threads` (num_worker_threads, 16 as in PyTorch) bounds the runnable
// threads.
//  E1 A post wakes or starts a thread only while fewer than `threads` run
//     or are on their way to the queue (coming_: notified or just started).
//     The pool used to notify an idle thread on every post, also while
//     earlier notified ones had not yet woken. (A first version waited with
//     a predicate, so a notified thread that found the queue drained kept
//     waiting with its count never taken back; the pool then stopped
//     waking threads. Its rpc_async figure, 64-72 k calls/s, was that bug
//     limiting the threads; fixed, it is 39 k as before.)
//  E2 Only `eager_threads` (the cores) run at once while their tasks make
//     progress: a flood of small calls on two cores ran at 39 k calls/s
//     with 16 runnable threads, most of the time lost to the kernel
//     switching between them. A monitor thread, awake only while work
//     waits for a thread, raises the limit by one each millisecond in which
//     no task finished, up to `threads`: tasks stuck in user code (a sleep,
//     a lock, a wait outside a BlockingScope) still get threads, as they
//     did with 16, one millisecond later. Once the queue drains the limit
//     falls back to what is in use, but not below the eager size.
//  E3 A thread blocked in a nested call (BlockingScope) does not count, and
//     is replaced at once as in E1, so fan-in cannot deadlock.
//  E4 Threads beyond `threads` (started for blocked ones) retire after 2 s idle.
//  E5 Stopping waits for user code only until a deadline (the shutdown
//     bound): a function stuck for ten minutes must not keep its process
//     from exiting. Past the deadline, queued tasks are dropped and the
//     threads still running are abandoned: each leaves once its task
//     returns and touches nothing but this executor, which its owner keeps
//     alive (the Runtime is then never freed, Note [Shutdown bound]).
//  E6 A post notifies the thread it counted in after letting go of the
//     lock. Notified under it, the woken thread took the core from the
//     poster (the lane's reader, on two cores), found the lock still held,
//     slept on it and was woken again when the poster let go: perf sched
//     of a parameter server's round showed two more switches per post
//     (the server's reader and executor threads: 3.1 and 4.7 switches a
//     round, 2.0 and 2.7 after). castor run -n 3 parameter-server, six
//     alternating pairs on a 2-core VM: 1.04x samples/s (0.96-1.06).
#include "actors/calls/executor.hpp"

#include <pthread.h>

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
constexpr auto kStallTick = std::chrono::milliseconds(1);  // E2
}  // namespace

Executor::Executor(Options opts) : opts_(std::move(opts)) {
  if (opts_.threads == 0) opts_.threads = 1;
  if (opts_.max_threads < opts_.threads) opts_.max_threads = opts_.threads;
  if (opts_.eager_threads == 0) opts_.eager_threads = std::max(1u, std::thread::hardware_concurrency());
  opts_.eager_threads = std::min(opts_.eager_threads, opts_.threads);
  limit_ = opts_.eager_threads;
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
  bool wake = add_runnable_locked();  // E1
  watch_for_stall_locked();
  lock.unlock();
  if (wake) work_cv_.notify_one();  // E6
  return true;
}

// Work waits for a thread it may not get yet: the monitor watches (E2).
void Executor::watch_for_stall_locked() {
  if (limit_ >= opts_.threads || !saturated_locked()) return;
  if (!monitor_.joinable())
    monitor_ = std::thread([this] { monitor_main(); });
  else if (monitor_waiting_)
    monitor_cv_.notify_one();
}

// Work waits that no thread is on its way to, and every allowed thread is
// taken (E2). A task with a thread coming for it (notified, or just
// started) does not wait on a stall: counting it woke the monitor for
// nothing on most rounds of a parameter server (two pushes, or a push and
// its round's reply, queued while one task ran): three wakes a round.
bool Executor::saturated_locked() const {
  return queue_.size() > coming_ && running_ - blocked_ + coming_ >= limit_;
}

void Executor::monitor_main() {
  ::pthread_setname_np(::pthread_self(), "castor-exec-mon");  // else it bears its creator's name
  std::unique_lock<std::mutex> lock(mtx_);
  while (!stopping_) {
    if (!saturated_locked() || limit_ >= opts_.threads) {
      monitor_waiting_ = true;
      monitor_cv_.wait(lock);
      monitor_waiting_ = false;
      continue;
    }
    size_t seen = finished_;
    monitor_cv_.wait_for(lock, kStallTick);
    if (!stopping_ && finished_ == seen && saturated_locked() && limit_ < opts_.threads) {
      ++limit_;  // a millisecond without progress: the running tasks are stuck
      if (add_runnable_locked()) work_cv_.notify_one();
    }
  }
}

void Executor::spawn_locked() {
  ++threads_;
  ++coming_;
  std::thread([this] { thread_main(); }).detach();
}

// Counts one thread in for queued work if fewer than `threads` would run:
// starts it, or returns true when an idle one is to be notified (E6).
bool Executor::add_runnable_locked() {
  if (queue_.empty() || running_ - blocked_ + coming_ >= limit_) return false;
  if (idle_ > coming_) {
    ++coming_;
    return true;
  }
  if (threads_ < opts_.max_threads) spawn_locked();
  return false;
}

void Executor::thread_main() {
  ::pthread_setname_np(::pthread_self(), "castor-exec");  // else it bears its creator's name (any thread may grow the pool)
  tl_current = this;
  if (opts_.on_thread_start) opts_.on_thread_start();
  std::unique_lock<std::mutex> lock(mtx_);
  --coming_;  // started by spawn_locked
  for (;;) {
    if (queue_.empty()) {
      if (stopping_) break;
      limit_ = std::max(opts_.eager_threads, running_ - blocked_ + coming_);  // E2: stall over
      ++idle_;
      bool surplus = threads_ - blocked_ > opts_.threads;  // E4
      // No predicate wait: a notified thread that finds the queue drained by
      // another must still leave the wait, or its coming_ count would stay
      // forever and the pool would stop waking threads (E1).
      bool timed_out = false;
      if (surplus)
        timed_out = work_cv_.wait_for(lock, kSurplusIdle) == std::cv_status::timeout;
      else
        work_cv_.wait(lock);
      --idle_;
      if (coming_ > 0) --coming_;
      if (timed_out && queue_.empty() && threads_ - blocked_ > opts_.threads) break;  // retire a surplus thread
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
    ++finished_;
    if (abandoned_) break;  // E5: nothing more runs here
  }
  --threads_;
  tl_current = nullptr;
  exit_cv_.notify_all();
}

void Executor::stop() { stop_until(std::chrono::steady_clock::time_point::max()); }

size_t Executor::stop_until(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mtx_);
  stopping_ = true;
  // Queued work must still run, and the monitor is gone: every allowed
  // thread may run it now (tasks stuck on queued ones would wait forever).
  limit_ = opts_.threads;
  for (size_t i = 0; i < queue_.size(); ++i) (void)add_runnable_locked();
  work_cv_.notify_all();  // every count taken above
  monitor_cv_.notify_all();
  size_t left = 0;
  if (deadline == std::chrono::steady_clock::time_point::max())
    exit_cv_.wait(lock, [&] { return threads_ == 0; });
  else if (!exit_cv_.wait_until(lock, deadline, [&] { return threads_ == 0; }))
    left = abandon_locked();
  std::thread monitor = std::move(monitor_);
  std::deque<Entry> dropped = std::move(queue_);
  queue_.clear();
  lock.unlock();
  dropped.clear();  // their captures are released outside the lock
  if (monitor.joinable()) monitor.join();
  return left;
}

// E5: the idle threads leave at once (the queue is empty for them now);
// those in user code leave when it returns.
size_t Executor::abandon_locked() {
  abandoned_ = true;
  work_cv_.notify_all();
  return running_;
}

void Executor::enter_blocking() {
  // Taken out whole and destroyed after the lock: a task's captures may hold
  // the last reference to something whose end runs castor code (an RRef
  // handle's), which must not find this pool locked.
  std::vector<Entry> rejected;
  {
    std::lock_guard<std::mutex> lock(mtx_);
    ++blocked_;
    // Keep the pool's runnable size while this thread waits, if work is queued (E3).
    if (add_runnable_locked()) work_cv_.notify_one();
    // Saturated: every thread up to the bound now waits, so queued work that
    // can be refused is refused rather than left to wait forever.
    if (threads_ == blocked_ && threads_ >= opts_.max_threads) {
      for (auto it = queue_.begin(); it != queue_.end();) {
        if (it->reject) {
          rejected.push_back(std::move(*it));
          it = queue_.erase(it);
        } else {
          ++it;
        }
      }
    }
  }
  for (auto& r : rejected) r.reject();
}

void Executor::leave_blocking() {
  std::lock_guard<std::mutex> lock(mtx_);
  --blocked_;
  watch_for_stall_locked();  // it runs again, and may be the one that stalls
}

Executor::BlockingScope::BlockingScope() : pool_(tl_current) {
  if (pool_) pool_->enter_blocking();
}

Executor::BlockingScope::~BlockingScope() {
  if (pool_) pool_->leave_blocking();
}

Executor::Stats Executor::stats() const {
  std::lock_guard<std::mutex> lock(mtx_);
  return Stats{threads_, idle_, blocked_, running_, queue_.size(), limit_};
}

bool Executor::idle() const {
  std::lock_guard<std::mutex> lock(mtx_);
  return queue_.empty() && running_ == 0;
}

bool Executor::accepting() const {
  std::lock_guard<std::mutex> lock(mtx_);
  return !stopping_;
}

}  // namespace castor::detail
