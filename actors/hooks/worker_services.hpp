// What a worker lends the layers above actors/ (rref/, engine/, optimizer/).
// They never see the worker's runtime (private to actors/): each service
// here is one named thing the runtime owns, with one job.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include <caf/actor_control_block.hpp>
#include <caf/fwd.hpp>

#include "actors/api/future.hpp"
#include "actors/api/registry.hpp"
#include "actors/api/worker_failure.hpp"
#include "actors/api/worker_options.hpp"
#include "actors/calls/executor.hpp"
#include "actors/cluster/message_counters.hpp"
#include "actors/cluster/world.hpp"
#include "messages/call.hpp"
#include "messages/protocol_fwd.hpp"

namespace castor {
class Worker;
}

namespace castor::detail {

class Runtime;
class RRefHooks;
class AutogradHooks;
class OptimizerHooks;

class WorkerServices {
 public:
  explicit WorkerServices(Runtime& rt) : rt_(rt) {}
  WorkerServices(const WorkerServices&) = delete;
  WorkerServices& operator=(const WorkerServices&) = delete;

  // -- who and where ---------------------------------------------------------
  /// The world now (Note [World] in actors/cluster/world.cpp): a snapshot,
  /// never changed in place; keep the reference for one decision.
  const World& world() const;
  WorkerId rank() const;
  const std::string& name() const;
  /// "worker1", or "rank 7" for a rank the world does not have.
  std::string name_of(WorkerId r) const { return world().name_of(r); }
  /// As init_rpc resolved them; fixed for the worker's life.
  const WorkerOptions& options() const;
  /// Not stopped (a worker keeps serving while it shuts down).
  bool running() const;

  // -- where work runs ---------------------------------------------------------
  caf::actor_system& system() const;
  /// Runs user code or blocking work on the executor; false if it refused.
  bool post(Executor::Task task, Executor::Task reject = {}) const;
  /// Runs short user code that never waits on this thread, as this worker's
  /// (current_worker()), unless the executor has stopped taking work: then
  /// false, and `task` did not run (Note [Methods run on arrival]).
  bool run_here(const Executor::Task& task) const;
  /// Where then-callbacks of this worker's futures run.
  CallbackRunner callback_runner() const;

  // -- calls -------------------------------------------------------------------
  /// Starts a call from any thread (Note [Direct sends]); `done` runs once.
  void start_call(WorkerId to, CallRequest&& req, std::chrono::milliseconds timeout, Completion done) const;
  CallId next_call_id() const;
  /// Counted messages of termination detection (Note [Graceful shutdown]).
  MessageCounters& counters() const;
  /// Records what this worker released after worker `dead` died (for
  /// castor inspect): "calls_failed", "rref_forks", "autograd_contexts"...
  void note_released(WorkerId dead, const std::string& what, int64_t n = 1) const;
  /// Supervision (Note [Failure handlers]): `only` scopes the handler to
  /// one worker (an RRef's owner).
  FailureHandlerId add_failure_handler(WorkerFailureHandler handler, std::optional<WorkerId> only) const;
  bool remove_failure_handler(FailureHandlerId id) const;
  /// Asks the worker actor to sweep deadlines now (Note [Graph task watchdog]).
  void request_sweep() const;
  /// The callee side, for a request the rref/ layer prepared: its reply
  /// path (exactly once, from any thread) ...
  Completion replier(caf::strong_actor_ptr caller, const CallRequest& req) const;
  /// ... and running a function, builtin or ATen operator for it.
  void execute(CallRequest&& req, Completion done) const;

  // -- protocol messages -------------------------------------------------------
  /// Sends one to the worker actor of peer `to`: on the direct lane when
  /// its link is open, else through CAF (B10 of Note [Bulk path]); dropped
  /// when `to` is not a live peer. From any thread; never waits.
  void send_to_peer(WorkerId to, BackwardGrad&& msg) const;
  void send_to_peer(WorkerId to, BackwardDone&& msg) const;
  void send_to_peer(WorkerId to, ContextControl&& msg) const;
  void send_to_peer(WorkerId to, RRefControl&& msg) const;
  void send_to_peer(WorkerId to, RRefControlAck&& msg) const;

  // -- the layers, and the handle user code sees -------------------------------
  RRefHooks* rrefs() const;
  AutogradHooks* autograd() const;
  OptimizerHooks* optimizer() const;
  /// The Worker that current_worker() gives user code on this worker.
  Worker& worker() const;

  /// Expires when the worker is torn down; handles that may outlive it (RRef
  /// states) keep this, and it also tells whose they are.
  std::weak_ptr<WorkerServices> lifetime() const;

 private:
  friend Runtime& runtime_of(const Worker& w);
  Runtime& rt_;
};

/// The upper layers' per-worker state that actors/ only starts and stops.
class OptimizerHooks {
 public:
  virtual ~OptimizerHooks() = default;
  virtual void stop() = 0;
};

}  // namespace castor::detail
