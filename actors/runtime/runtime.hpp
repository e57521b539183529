// Runtime: one worker's shared machinery (actor system, executor, world table,
// counters), owned by the Worker handle and used by the worker actor and the
// executor's tasks.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include "actors/calls/executor.hpp"
#include "actors/observe/metrics.hpp"
#include "actors/calls/pending_calls.hpp"
#include "actors/hooks/autograd_hooks.hpp"
#include "actors/hooks/rref_hooks.hpp"
#include "actors/runtime/worker_actor.hpp"
#include "actors/api/worker_options.hpp"
#include "messages/ids.hpp"
#include "messages/rendezvous.hpp"

namespace castor {
class Worker;
}

namespace castor::detail {

class BulkPath;
class Transport;

/// Counters for termination detection (see Note [Graceful shutdown] in
/// actors/cluster/shutdown.cpp). Written by the actor and by executor threads.
struct MessageCounters {
  std::atomic<uint64_t> sent{0};      // counted messages sent to any worker (self included)
  std::atomic<uint64_t> received{0};  // counted messages handled
  std::atomic<int64_t> in_flight{0};  // requests received whose reply is not sent yet
};

enum class RunState : int { starting, running, shutting_down, stopped };

class Runtime : public std::enable_shared_from_this<Runtime> {
 public:
  explicit Runtime(WorkerOptions opts);
  ~Runtime();

  // -- set once by init_rpc, then read-only ----------------------------------
  WorkerOptions opts;
  WorkerId rank = -1;
  std::string name;
  std::vector<WorkerRecord> world;  // by rank
  std::unordered_map<std::string, WorkerId> rank_by_name;
  std::unique_ptr<caf::actor_system_config> cfg;
  std::unique_ptr<caf::actor_system> system;
  std::shared_ptr<Executor> executor;
  worker_actor actor;
  std::vector<worker_peer> peer_handles;  // by rank, set when init completes (read-only after)
  std::unique_ptr<Worker> view;  // non-owning Worker, for current_worker()
  std::unique_ptr<RRefHooks> rrefs;             // the rref/ layer (install_layers)
  std::unique_ptr<AutogradHooks> autograd;      // the engine/ layer (install_layers)
  std::function<bool(const std::string&)> class_known;  // for error messages
  std::unique_ptr<Transport> transport;  // Note [The door]: every port this worker listens on
  std::unique_ptr<BulkPath> bulk;  // Note [Bulk path]; none with TLS or bulk_threshold 0
  caf::actor inspector;       // answers castor inspect (actors/observe/inspector.cpp)
  caf::actor metrics_server;  // the optional metrics port

  // -- shared, thread-safe ----------------------------------------------------
  IdGenerator<CallId> call_ids;
  PendingCalls pending;                     // see Note [Direct sends]
  std::unique_ptr<std::atomic<bool>[]> peer_dead;  // by rank; set by the actor, never cleared
  IdGenerator<TransferId> transfer_ids;
  MessageCounters counters;
  MessageStats stats;  // inspection: messages by type, call latencies
  const std::chrono::steady_clock::time_point started_at = std::chrono::steady_clock::now();
  std::atomic<RunState> state{RunState::starting};

 private:
  std::mutex services_mtx_;
  std::map<std::string, std::shared_ptr<void>> services_;

 public:

  /// Name of a rank for messages ("worker1"), or "rank N" if unknown.
  std::string name_of(WorkerId r) const;

  /// Stops the executor, the actors and the actor system. Idempotent.
  void teardown();

  /// Starts a call from any thread (see Note [Direct sends]); `done` runs
  /// exactly once, on the actor's thread or, for early failures, right here.
  void start_call(WorkerId to, CallRequest&& req, std::chrono::milliseconds timeout, Completion done);

  /// Posts to the executor; false if it refused (saturated or stopped).
  bool post(Executor::Task task, Executor::Task reject = {});

  /// A per-worker service of a higher layer (e.g. the local optimizer actor),
  /// made by `make` on first use. Thread-safe.
  std::shared_ptr<void> service(const std::string& key, const std::function<std::shared_ptr<void>()>& make);

  /// Where then-callbacks of this worker's futures run.
  CallbackRunner callback_runner() const;
};

/// What this worker sends to the name store (rank 0 keeps its own as the
/// reference every joiner must match).
JoinRequest make_join_request(const Runtime& rt);

}  // namespace castor::detail
