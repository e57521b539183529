// Future support: blocking rules, default callback runner, user exceptions.
#include "actors/api/future.hpp"

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "actors/api/registry.hpp"

#include "actors/calls/executor.hpp"
#include "actors/calls/thread_context.hpp"

namespace castor::detail {

WaitGuard::WaitGuard() : scope_(nullptr) {
  // M2 of Note [Methods run on arrival]: first, since such a method may run
  // on a CAF thread too, and this says why better.
  if (const auto* m = arrival_method())
    throw RpcError(ErrorInfo{ErrorKind::Remote, *m->worker,
                             "worker " + *m->worker + ": method '" + *m->method +
                                 "' runs on arrival (CASTOR_CLASS(...).runs_on_arrival) and must not wait on a "
                                 "Future: the thread it runs on may be the one that reads that Future's reply; "
                                 "use then(), or register the method without runs_on_arrival"});
  if (on_caf_thread())
    throw RpcError(ErrorInfo{ErrorKind::Internal, "",
                             "castor: a blocking wait on a CAF scheduler thread would stall the actor system; "
                             "use Future::then() there instead"});
  if (Executor::current()) scope_ = new Executor::BlockingScope();
}

WaitGuard::~WaitGuard() { delete static_cast<Executor::BlockingScope*>(scope_); }

// Note [Waiting for a reply]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A small call's reply comes back within a few tens of microseconds, and a
// caller asleep on a condition variable costs the completing thread a futex
// wake and itself a trip through the scheduler before it runs again: one of
// the four thread wakes of a call's round trip (B8 of Note [Bulk path]).
//  WR1 So a wait first watches the future's flag for up to 100 µs
//      (spin_limit(); less if its timeout is shorter, more under WR4),
//      yielding the core after every few looks so that another thread on
//      the same core (the reader that will complete it, the peer's
//      executor on two cores) runs first; only then does it sleep on the
//      condition variable. Measured on a 2-core VM, the same build with
//      and without: a small rpc_sync takes 0.63-0.68 of its time without;
//      dist autograd 1-hop 0.87, the parameter-server and pipeline benches
//      unchanged (bench/README.md).
//  WR2 The watch comes after WaitGuard: a wait that would block a CAF
//      thread is refused as before, and an executor thread counts as
//      blocked (E2) while it watches.
//  WR3 What a watch costs is bounded: at most the limit of one core per
//      wait (WR4's cap at most), against a wake that a sleep would cost
//      anyway. CASTOR_WAIT_SPIN_US sets a fixed limit instead (0: sleep at
//      once), for hosts whose cores are all taken by other work.
//  WR4 The limit follows the thread's own waits. A thread whose waits
//      keep ending a little after 100 µs (a parameter-server trainer's
//      round: 0.8-1 ms on two cores) would sleep and be woken every time.
//      So each thread keeps a running mean of how long its waits lasted
//      (weight 1/8, each wait counted up to 4x the cap), and watches for
//      1.5x that mean when the mean lies between WR1's 100 µs and the cap
//      of 2 ms and its last wait ended within the cap; otherwise 100 µs as
//      before. A wait that timed out counts as one beyond the cap: it says
//      nothing of when its future completes, and a loop of short timed
//      waits (a poll) must not watch through each of them. A wait expected
//      to outlast the cap would sleep anyway, and one long wait (a 64 MiB
//      echo's 10 ms, whose copy takes both cores) must not make the next
//      one watch for milliseconds: with the mean alone, castor-bench rpc's
//      echo_64MiB_vs_memcpy_floor_x read 1.43-1.72 against 1.29-1.37 (three
//      runs each). Measured with castor-bench
//      train on a 2-core Intel VM, alternating pairs: a fixed 1 ms limit
//      read 1.02-1.12x the samples/s of 100 µs (eight pairs, median 1.08),
//      2.5 ms no better than 1 ms (four pairs, 0.96-1.00), and this limit
//      1.00-1.20x (eight pairs, median 1.09; six more after the last-wait
//      rule, 0.95-1.21, median 1.05). castor-bench pipeline, autograd and
//      rpc read within their spread (bench/README.md).
//  WR5 A method that returns a Future replies when it completes. The reply
//      used to be a task posted to the executor: on a parameter server's
//      round, the last push's thread completed the round and posted both
//      replies, one woken thread and a monitor wake later (E2). Completed on
//      an executor thread, the reply now leaves from that thread, as it
//      would from the posted task; completed elsewhere (a user's thread, the
//      receiver), it is posted as before, so no thread that must not wait
//      sends it; except from a method running on arrival (M3 of Note
//      [Methods run on arrival]), which sends its replies itself.
void FutureCore::add_executor_callback(std::function<void()> cb) {
  add_inline_callback([this, cb = std::move(cb)]() mutable {
    if (Executor::current() || arrival_method())
      cb();
    else
      run(std::move(cb));
  });
}

namespace {
using Micros = std::chrono::microseconds;
constexpr Micros kSpinFloor{100};     // WR1: a small call's round trip on a 2-core VM
constexpr Micros kSpinCap{2000};      // WR4
constexpr long kMeanWeightShift = 3;  // WR4: each wait moves the mean by 1/8 of its distance

// CASTOR_WAIT_SPIN_US (WR3); nullopt: WR4's adaptive limit.
std::optional<Micros> fixed_spin_limit() {
  static const std::optional<Micros> limit = []() -> std::optional<Micros> {
    const char* v = std::getenv("CASTOR_WAIT_SPIN_US");
    if (!v || !*v) return std::nullopt;
    char* end = nullptr;
    long us = std::strtol(v, &end, 10);
    if (*end != '\0' || us < 0 || us > 1000000) return std::nullopt;
    return Micros(us);
  }();
  return limit;
}

// WR4: this thread's running mean of its waits, and its last, in microseconds.
thread_local long tl_mean_wait_us = kSpinFloor.count();
thread_local long tl_last_wait_us = kSpinFloor.count();

Micros spin_limit() {
  if (auto fixed = fixed_spin_limit()) return *fixed;
  long mean = tl_mean_wait_us;
  if (mean <= kSpinFloor.count() || mean > kSpinCap.count() || tl_last_wait_us > kSpinCap.count()) return kSpinFloor;
  return std::min(kSpinCap, Micros(mean + mean / 2));
}

void note_wait(Micros lasted) {
  long us = std::min<long>(lasted.count(), 4 * kSpinCap.count());
  tl_last_wait_us = us;
  tl_mean_wait_us += (us - tl_mean_wait_us) / (1L << kMeanWeightShift);
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}
}  // namespace

std::chrono::microseconds wait_watch_limit() { return spin_limit(); }

bool FutureCore::wait_not_done(std::optional<std::chrono::milliseconds> timeout) const {
  WaitGuard guard;
  auto start = std::chrono::steady_clock::now();
  auto limit = timeout ? std::min<Micros>(*timeout, spin_limit()) : spin_limit();
  bool done = spin_until_done(limit);
  if (!done) {
    std::unique_lock<std::mutex> lock(mtx_);
    if (!timeout)
      cv_.wait(lock, [&] { return done_; });
    else
      cv_.wait_for(lock, *timeout, [&] { return done_; });
    done = done_;
  }
  note_wait(done ? std::chrono::duration_cast<Micros>(std::chrono::steady_clock::now() - start)
                 : 4 * kSpinCap);  // WR4: a timed-out wait counts as one beyond the cap
  return done;
}

bool FutureCore::spin_until_done(Micros limit) const {
  if (limit.count() == 0) return done_seen_.load(std::memory_order_acquire);
  auto until = std::chrono::steady_clock::now() + limit;
  do {
    for (int i = 0; i < 16; ++i) {
      if (done_seen_.load(std::memory_order_acquire)) return true;
      cpu_relax();
    }
    std::this_thread::yield();
  } while (std::chrono::steady_clock::now() < until);
  return done_seen_.load(std::memory_order_acquire);
}

ErrorInfo error_from_exception(std::exception_ptr e, const std::string& worker, const std::string& ran) {
  auto where = worker.empty() ? std::string() : "worker " + worker + ": ";
  auto raised = ran.empty() ? std::string() : ran + " raised: ";
  try {
    std::rethrow_exception(e);
  } catch (const RpcError& x) {
    return x.info();
  } catch (const CallFailure& f) {
    return ErrorInfo{f.kind, worker, where + f.message};
  } catch (const std::exception& x) {
    return ErrorInfo{ErrorKind::Remote, worker, where + raised + x.what()};
  } catch (...) {
    return ErrorInfo{ErrorKind::Remote, worker,
                     where + (ran.empty() ? std::string("an exception") : ran + " raised an exception") +
                         " that is not a std::exception"};
  }
}

void wait_all_or_first_error(const std::vector<FutureCore*>& futures) {
  // Each future tells this board when it completes, on its completing
  // thread; the board is shared, so a future that completes after we left
  // (we threw) still finds it.
  struct Board {
    std::mutex mtx;
    std::condition_variable cv;
    size_t left = 0;
    std::optional<ErrorInfo> first_error;  // the first failure to arrive
  };
  auto board = std::make_shared<Board>();
  board->left = futures.size();
  for (auto* core : futures)
    core->add_inline_callback([board, core] {
      auto error = core->error();
      bool over;
      {
        std::lock_guard<std::mutex> lock(board->mtx);
        --board->left;
        if (error && !board->first_error) board->first_error = std::move(error);
        over = board->left == 0 || board->first_error.has_value();
      }
      // Only the last one (or the first failure) can end the wait: waking
      // the waiter for each of 20,000 replies only to let it sleep again
      // cost the replies' thread a futex call and the waiter a switch each.
      if (over) board->cv.notify_all();
    });
  auto over = [&] { return board->left == 0 || board->first_error.has_value(); };
  bool blocks;
  {
    std::lock_guard<std::mutex> lock(board->mtx);
    blocks = !over();
  }
  std::optional<ErrorInfo> failed;
  {
    // A wait that blocks follows Future::wait's rules; its guard comes before
    // the board's lock, as Holder::wait's does.
    std::optional<WaitGuard> guard;
    if (blocks) guard.emplace();
    std::unique_lock<std::mutex> lock(board->mtx);
    board->cv.wait(lock, over);
    failed = board->first_error;
  }
  if (failed) throw_rpc_error(std::move(*failed));
}

}  // namespace castor::detail
