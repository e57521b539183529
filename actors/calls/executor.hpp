// Executor: the bounded thread pool that runs user functions, then-callbacks
// and backward nodes, never on CAF scheduler threads. Threads blocked in
// nested calls do not count against the pool (managed blocking), so fan-in of
// nested calls cannot deadlock; past a hard bound new work is refused.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace castor::detail {

class Executor : public std::enable_shared_from_this<Executor> {
 public:
  using Task = std::function<void()>;

  struct Options {
    size_t threads = 16;       // most runnable threads (Note [Executor sizing])
    size_t max_threads = 256;  // hard bound, blocked threads included
    std::string name = "castor";
    std::function<void()> on_thread_start;  // e.g. sets current_worker()
    size_t eager_threads = 0;  // runnable threads while tasks progress; 0 = the cores (E2)
  };

  explicit Executor(Options opts);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  /// Queues a task. Returns false (and drops it) when every thread up to the
  /// hard bound is blocked, or after stop(): the caller reports the error.
  /// `reject`, if given, runs instead of `task` should the pool saturate
  /// while the task waits in the queue.
  bool post(Task task, Task reject = {});

  /// Finishes queued tasks, then ends every thread (also blocked ones must
  /// return first). Idempotent.
  void stop();

  /// As stop(), but waits for running tasks only until `deadline` (E5).
  /// Returns how many threads were still running user code then: they are
  /// abandoned (each ends once its task returns; queued tasks are dropped),
  /// and the executor must outlive them: its owner then never destroys it.
  size_t stop_until(std::chrono::steady_clock::time_point deadline);

  /// Held by a pool thread while it blocks (Future::wait, rpc_sync): the pool
  /// may start another thread so that queued work keeps running.
  class BlockingScope {
   public:
    BlockingScope();  // no-op on threads that are not pool threads
    ~BlockingScope();
    BlockingScope(const BlockingScope&) = delete;
    BlockingScope& operator=(const BlockingScope&) = delete;

   private:
    Executor* pool_;
  };

  /// The executor that owns the calling thread, or nullptr.
  static Executor* current();

  /// A runner that posts to this executor while it lives (inline after).
  std::function<void(std::function<void()>)> runner();

  struct Stats {
    size_t threads = 0, idle = 0, blocked = 0, running = 0, queued = 0;
    size_t runnable_limit = 0;  // E2: eager_threads, raised while tasks stall
  };
  Stats stats() const;

  /// No task queued or running.
  bool idle() const;

  /// Not stopped: user code may still run for this worker (M4 of Note
  /// [Methods run on arrival] asks before it runs a method off the pool).
  bool accepting() const;

  const Options& options() const { return opts_; }

 private:
  void spawn_locked();
  [[nodiscard]] bool add_runnable_locked();  // true: notify work_cv_ (E6)
  void thread_main();
  void enter_blocking();
  void leave_blocking();
  void monitor_main();
  bool saturated_locked() const;
  void watch_for_stall_locked();
  size_t abandon_locked();

  Options opts_;
  mutable std::mutex mtx_;
  std::condition_variable work_cv_;
  std::condition_variable exit_cv_;
  struct Entry {
    Task run;
    Task reject;
  };
  std::deque<Entry> queue_;
  size_t threads_ = 0;  // alive pool threads
  size_t idle_ = 0;     // waiting for work
  size_t blocked_ = 0;  // inside a BlockingScope
  size_t running_ = 0;  // executing a task (blocked ones included)
  size_t coming_ = 0;   // woken or started, not yet running a task (E1)
  size_t limit_ = 0;    // runnable threads wanted now (E2)
  size_t finished_ = 0; // tasks completed, the monitor's sign of progress (E2)
  bool stopping_ = false;
  bool abandoned_ = false;  // E5: stop_until gave up on running tasks
  bool monitor_waiting_ = false;
  std::condition_variable monitor_cv_;
  std::thread monitor_;  // started on the first saturation (E2)
};

}  // namespace castor::detail
