// The worker actor's state and the handler implementations, split by job:
// call_routing.cpp (our calls out), call_dispatch.cpp (calls in), liveness.cpp
// (peers), shutdown.cpp (termination detection). All `*_impl` functions run
// inside the actor: no locks.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>
#include <vector>

#include <caf/actor_addr.hpp>
#include <caf/typed_response_promise.hpp>

#include "actors/calls/large_payloads.hpp"
#include "actors/cluster/name_store.hpp"
#include "actors/calls/pending_calls.hpp"
#include "actors/runtime/worker_actor.hpp"

namespace castor::detail {

/// A peer as the actor met it during init (liveness is the world's: Note [World]).
struct PeerSlot {
  worker_peer handle;  // set when the peer connected
};

/// Graceful shutdown bookkeeping, see Note [Graceful shutdown] in actors/cluster/shutdown.cpp.
struct ShutdownState {
  bool requested = false;  // set by the local ShutdownCommand
  std::function<void(std::optional<ErrorInfo>)> done;  // reset once called
  // Coordinator (rank 0) only:
  std::set<WorkerId> entered;  // ranks that asked to shut down
  int64_t round = 0;           // current termination wave
  std::vector<TerminationReport> reports;
  size_t reports_expected = 0;  // the ranks probed this wave (Note [Shutdown with survivors])
  bool wave_running = false;
  bool have_previous = false;  // the previous wave was balanced and idle
  uint64_t previous_sent = 0, previous_received = 0;
  std::set<WorkerId> awaiting;  // S4: peers whose answer (done, or the deadline) is still expected
  std::optional<ErrorInfo> finish_error;  // what rank 0's shutdown ends with once they answered
  bool finishing = false;   // done was broadcast: peers leaving now is expected
  bool deadline_armed = false;  // Note [Shutdown bound]: counted from the last entry
  std::map<WorkerId, std::vector<std::string>> running;  // each rank's last report of its running calls
};

struct worker_state {
  static inline const char* name = "castor.worker";

  Runtime* rt = nullptr;
  name_store_actor name_store;  // rank 0 only

  // Peers by rank, filled during init (peer/hello messages); self's slot unused.
  std::vector<std::optional<PeerSlot>> peers;
  std::unordered_map<caf::actor_addr, WorkerId> rank_by_addr;
  // RJ6 of Note [Rejoin]: the nodes of peers' dead lives (only those still
  // connected can speak: a frozen host that wakes up).
  std::set<caf::node_id> dead_nodes;
  std::vector<caf::typed_response_promise<std::vector<worker_peer>>> ready_waiters;  // init threads
  // Calls that arrived while our init was still joining (a peer may finish
  // first and call us); run once init says running_atom. See J3 in
  // Note [Masterless join].
  std::vector<std::pair<CallRequest, caf::strong_actor_ptr>> held_calls;  // with whom to answer
  // Masterless: what we check peers' join requests against, built on the
  // first check-in (the signature list is long) and kept.
  std::optional<JoinRequest> own_join_request;

  ShutdownState shutdown;

  // The sweep scheduled by delayed_send (calls' and graph tasks' deadlines):
  // one chain of timers however many boards ask for sweeps.
  std::optional<std::chrono::steady_clock::time_point> sweep_planned;

  ChunkAssembler chunks;  // large tensors in transit to us
};

using worker_pointer = caf::stateful_actor<worker_state, worker_broker>*;

// call_routing.cpp
void handle_reply_impl(worker_pointer self, CallReply&& reply);
void sweep_impl(worker_pointer self);
void fail_pending_impl(worker_pointer self, const std::function<bool(const PendingCall&)>& which,
                       const std::function<ErrorInfo(const PendingCall&)>& why);

// call_dispatch.cpp
/// `sender` gets the reply (the peer's actor, or a held call's recorded sender).
void handle_request_impl(worker_pointer self, CallRequest&& request, const caf::strong_actor_ptr& sender);
void handle_chunk_impl(worker_pointer self, TensorChunk&& chunk);

// malformed.cpp: drop (and log, naming the peer) a message that arrived
// malformed; true when dropped. See Note [Hostile input] in messages/wire_checks.hpp.
bool drop_malformed(worker_pointer self, CallRequest& req);
bool drop_malformed(worker_pointer self, CallReply& reply);
bool drop_malformed(worker_pointer self, TensorChunk& chunk);
bool drop_malformed(worker_pointer self, RRefControl& msg);
bool drop_malformed(worker_pointer self, BackwardGrad& grad);
bool drop_malformed(worker_pointer self, BackwardDone& done);
bool drop_malformed(worker_pointer self, ContextControl& msg);
/// The default handler: a message of a type the worker does not handle.
caf::result<caf::message> drop_unexpected(worker_pointer self, caf::message_view& x);

// liveness.cpp
bool add_peer_impl(worker_pointer self, WorkerId rank, worker_peer handle);
bool all_peers_known(worker_pointer self);
std::vector<worker_peer> peer_handles(worker_pointer self);
void on_peer_down_impl(worker_pointer self, const caf::down_msg& dm);
/// The peer at `rank` (its current life) is dead: published, its calls
/// failed, every layer cleaned up, the app told with `cause`. Idempotent.
void declare_dead_impl(worker_pointer self, WorkerId rank, const std::string& cause);

// rejoin.cpp
/// RJ2-RJ3 of Note [Rejoin]: a restarted rank asks to come back.
JoinReply accept_rejoin_impl(worker_pointer self, const JoinRequest& req);
bool peer_usable(worker_pointer self, WorkerId rank);
/// RJ6 of Note [Rejoin]: the current message comes from a dead life of a
/// peer; refused and counted (true), never applied.
bool drop_stale(worker_pointer self);

// shutdown.cpp
void begin_shutdown_impl(worker_pointer self, ShutdownCommand&& cmd);
void on_shutdown_entered_impl(worker_pointer self, WorkerId rank);
TerminationReport local_report_impl(worker_pointer self, int64_t round);
void start_wave_impl(worker_pointer self);
void finish_shutdown_impl(worker_pointer self, std::optional<ErrorInfo> error);
void on_peer_lost_during_shutdown_impl(worker_pointer self, WorkerId rank);
void fail_shutdown_impl(worker_pointer self, WorkerId lost);
void on_shutdown_deadline_impl(worker_pointer self);
void on_shutdown_deadline_from_coordinator_impl(worker_pointer self, const std::string& summary);

}  // namespace castor::detail
