// The execution unit that runs, on castor's own threads, the actors their
// messages wake (Note [Actors run where their messages arrive]).
#include "actors/hooks/arrival_runner.hpp"

#include <deque>
#include <thread>

#include <c10/core/InferenceMode.h>

#include <caf/execution_unit.hpp>
#include <caf/logger.hpp>
#include <caf/resumable.hpp>

#include "actors/calls/thread_context.hpp"
#include "actors/hooks/thread_autograd_context.hpp"

namespace castor::detail {
namespace {

// How many messages an actor handles before the next queued actor gets the
// thread (D2); one that has more goes to the back of the queue.
constexpr size_t kThroughput = 64;

class ArrivalRunner final : public caf::execution_unit {
 public:
  explicit ArrivalRunner(caf::actor_system& sys) : caf::execution_unit(&sys) {}

  // CAF calls this with a reference to `job` taken for us.
  void exec_later(caf::resumable* job) override { jobs_.push_back(job); }

  void run_all() {
    while (!jobs_.empty()) {
      auto* job = jobs_.front();
      jobs_.pop_front();
      switch (job->resume(this, kThroughput)) {
        case caf::resumable::resume_later:
          jobs_.push_back(job);
          break;
        default:  // done, or waiting for its next message: our reference goes
          intrusive_ptr_release(job);
          break;
      }
    }
  }

 private:
  std::deque<caf::resumable*> jobs_;
};

thread_local ArrivalRunner* tl_runner = nullptr;

}  // namespace

bool running_arrivals() { return tl_runner != nullptr; }

void deliver_here(caf::actor_system& sys, caf::abstract_actor* dest, caf::mailbox_element_ptr msg) {
  if (on_caf_thread()) return dest->enqueue(std::move(msg), nullptr);  // D4
  if (tl_runner) {
    // D2: a handler's delivery joins the queue; another system's actor (two
    // workers in one process) is scheduled by its own system.
    return dest->enqueue(std::move(msg), &tl_runner->system() == &sys ? tl_runner : nullptr);
  }
  ArrivalRunner runner(sys);
  tl_runner = &runner;
  struct Reset {
    ContextId callers_context;
    ~Reset() {
      tl_runner = nullptr;
      exchange_thread_autograd_context(callers_context);  // D7
      caf::logger::set_current_actor_system(nullptr);     // D5
    }
  } reset{exchange_thread_autograd_context(ContextId{})};
  c10::InferenceMode default_autograd_state(false);  // D7
  dest->enqueue(std::move(msg), &runner);
  runner.run_all();
}

void post_here(caf::actor_system& sys, caf::abstract_actor* dest, caf::mailbox_element_ptr msg) {
  bool queue = !on_caf_thread() && tl_runner && &tl_runner->system() == &sys;
  dest->enqueue(std::move(msg), queue ? tl_runner : nullptr);  // D9
}

void ArrivalGate::close() {
  int open = kOpen;
  state_.compare_exchange_strong(open, kClosed);  // never unseals
}

void ArrivalGate::wait_running(std::chrono::milliseconds bound) {
  auto until = std::chrono::steady_clock::now() + bound;
  while (running_.load() > 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

void ArrivalGate::close_and_wait(std::chrono::milliseconds bound) {
  close();
  wait_running(bound);
}

void ArrivalGate::seal_and_wait(std::chrono::milliseconds bound) {
  state_.store(kSealed);
  wait_running(bound);
}

}  // namespace castor::detail
