// Runtime: what one worker owns -- its actor system, executor, world, calls,
// transport and the layers above -- private to actors/. The public Worker
// holds it; the layers above see it only through WorkerServices
// (actors/hooks/worker_services.hpp), the rest of actors/ through this header.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <shared_mutex>
#include <string>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include "actors/api/worker_options.hpp"
#include "actors/calls/executor.hpp"
#include "actors/calls/pending_calls.hpp"
#include "actors/calls/running_calls.hpp"
#include "actors/cluster/death_ledger.hpp"
#include "actors/cluster/failure_handlers.hpp"
#include "actors/cluster/world.hpp"
#include "actors/hooks/autograd_hooks.hpp"
#include "actors/hooks/rref_hooks.hpp"
#include "actors/hooks/worker_services.hpp"
#include "actors/observe/metrics.hpp"
#include "actors/runtime/worker_actor.hpp"
#include "messages/ids.hpp"
#include "messages/rendezvous.hpp"

namespace castor {
class Worker;
}

namespace castor::detail {

class BulkPath;
class Transport;

enum class RunState : int { starting, running, shutting_down, stopped };

class Runtime : public std::enable_shared_from_this<Runtime> {
 public:
  /// `opts` as resolve_options left them (RANK, MASTER_ADDR, ... applied).
  explicit Runtime(WorkerOptions opts);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // -- fixed for the worker's life ---------------------------------------------
  const WorkerOptions opts;
  WorkerId rank() const { return WorkerId(opts.rank); }
  const std::string& name() const { return opts.name; }
  const std::chrono::steady_clock::time_point started_at = std::chrono::steady_clock::now();

  // -- the world (Note [World]): published by the join, then by liveness -------
  Membership membership;
  const World& world() const { return membership.current(); }
  /// Name of a rank for messages ("worker1"), or "rank N" if unknown.
  std::string name_of(WorkerId r) const { return world().name_of(r); }

  // -- parts, each made once by init_rpc (in this order); teardown() ends
  //    them in the reverse order ---------------------------------------------
  std::unique_ptr<Transport> transport;  // Note [The door]: every port this worker listens on
  std::unique_ptr<caf::actor_system_config> cfg;
  std::unique_ptr<caf::actor_system> system;
  std::unique_ptr<Worker> view;          // non-owning Worker, for current_worker()
  std::shared_ptr<Executor> executor;    // user code (Note [Executor sizing])
  std::unique_ptr<RRefHooks> rrefs;          // the rref/ layer (install_layers)
  std::unique_ptr<AutogradHooks> autograd;   // the engine/ layer (install_layers)
  std::unique_ptr<OptimizerHooks> optimizer; // the optimizer/ layer (install_layers)
  std::function<bool(const std::string&)> class_known;  // for error messages (install_layers)
  std::unique_ptr<BulkPath> bulk;  // Note [Bulk path]; none with bulk_threshold 0
  worker_actor actor;
  caf::actor inspector;       // answers castor inspect (actors/observe/inspector.cpp)
  caf::actor metrics_server;  // the optional metrics port
  WorkerServices services{*this};

  // -- shared, thread-safe -------------------------------------------------------
  IdGenerator<CallId> call_ids;
  PendingCalls pending;  // see Note [Direct sends]
  RunningCalls running;  // requests from others served here (Note [Shutdown bound])
  DeathLedger released;  // what dead workers left and we released (castor inspect)
  FailureHandlers failures;  // the app's supervision hooks (Note [Failure handlers])
  IdGenerator<TransferId> transfer_ids;
  MessageCounters counters;
  MessageStats stats;  // inspection: messages by type, call latencies
  std::atomic<RunState> state{RunState::starting};

  /// Stops the door, the executor, the actors and the actor system. Idempotent.
  /// User code still running at `user_code_deadline` is abandoned (E5 of
  /// Note [Executor sizing]); `abandoned_threads` then says how many.
  void teardown(std::chrono::steady_clock::time_point user_code_deadline =
                    std::chrono::steady_clock::time_point::max());
  size_t abandoned_threads = 0;

  /// Held (shared) by every reply to a request served here; teardown takes
  /// it exclusively to close it: user code that returns after teardown
  /// (abandoned, Note [Shutdown bound]) sends nothing into a system gone.
  std::shared_mutex teardown_gate;
  bool torn_down = false;  // guarded by teardown_gate

  /// Starts a call from any thread (see Note [Direct sends]); `done` runs
  /// exactly once, on the actor's thread or, for early failures, right here.
  void start_call(WorkerId to, CallRequest&& req, std::chrono::milliseconds timeout, Completion done);

  /// Posts to the executor; false if it refused (saturated or stopped).
  bool post(Executor::Task task, Executor::Task reject = {});

  /// Where then-callbacks of this worker's futures run.
  CallbackRunner callback_runner() const;
};

/// What this worker sends to the name store (rank 0 keeps its own as the
/// reference every joiner must match).
JoinRequest make_join_request(const Runtime& rt);

/// "'f' on worker1, called by worker0, running for 3.2 s".
std::string describe_running_call(const Runtime& rt, const RunningCalls::Entry& call,
                                  std::chrono::steady_clock::time_point now);

/// The runtime behind a Worker (actors/ only).
Runtime& runtime_of(const Worker& w);

}  // namespace castor::detail
