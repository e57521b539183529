// The RRef context: one actor per worker that keeps the RRef protocol's
// bookkeeping (owners here, pending users, pending children, retried control
// messages) and prepares incoming calls that involve RRefs.
#pragma once

#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/io/typed_broker.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include "actors/runtime/fault_injection.hpp"
#include "actors/hooks/rref_hooks.hpp"
#include "messages/atoms.hpp"
#include "rref/owner_rref_actor.hpp"
#include "rref/rref_counters.hpp"
#include "rref/rref_state.hpp"

namespace castor::detail {

// Note [RRef protocol]
// ~~~~~~~~~~~~~~~~~~~~
// A value lives on its owner in an OwnerRRef actor; every other worker that
// refers to it holds a fork (a UserRRef: rref id + fork id). There is no
// global master: the owner counts forks, and deletes the value when no fork
// and no local handle is left.
//
//  G1. The owner is told when any fork is deleted: a user's last local
//      handle going away sends user_delete(rref, fork) to the owner
//      (retried until acknowledged).
//  G2. A parent does not delete its fork until a child fork it created is
//      confirmed by the owner: the parent keeps its state in
//      `pending_children` until the child's child_accept arrives, so the
//      value cannot be deleted while the child's fork is still unknown to
//      the owner.
//
// Sharing, by who sends to whom (fork_for makes the fork on the sender):
//  - owner -> user: the owner adds the fork before sending; the user's fork
//    is confirmed on arrival.
//  - user -> owner (argument or return value): the parent makes a fork and
//    keeps it as a pending child; the owner does not count it, uses its own
//    OwnerRRef, and sends child_accept to the parent.
//  - user -> user: the parent keeps a pending child; the child sends
//    fork_request to the owner, whose ack confirms the fork; the child then
//    sends child_accept to the parent, and only then runs the function that
//    received the fork, so confirmed_by_owner() is true inside it.
//  - remote(): the caller makes the rref id and its own fork; the request
//    carries both, and the owner counts that fork when the request arrives.
//
// Messages: fork_request (child -> owner; ack = confirmation), child_accept
// (child -> parent), user_delete (user -> owner), and their acks. Each carries
// a ControlId, is retried with backoff until acknowledged, and is handled
// idempotently: the owner remembers deleted forks (a late or repeated add
// is ignored, a delete that overtakes its add cancels it) and this context
// remembers ended owners (a late message never revives one). Delivery order
// between workers is not assumed anywhere. A dead worker's forks count as
// deleted, its pending children are dropped, and an owner whose creator died
// before creating it ends with an error.

/// A request that involves RRefs, with where its reply goes.
struct IncomingCall {
  CallRequest request;
  caf::strong_actor_ptr reply_to;
};

/// A fork leaves this worker (fork_for): counted at the owner or kept as a
/// pending child (G2) before the message carrying it is sent.
struct ForkRegistration {
  RRefStatePtr state;
  ForkId fork;
  WorkerId to = -1;
};

/// The last handle of an RRef on this worker is gone.
struct StateDropped {
  RRefId rref;
  ForkId fork;
  WorkerId owner = -1;
  bool owner_side = false;
};

/// make_rref, or remote() to ourselves: a new owned value and one local handle.
struct OwnerRegistration {
  RRefId rref;
  std::shared_ptr<Holder> holder;
};

/// A reply carrying RRefs: adopt them, then complete the call.
struct AdoptReply {
  Value value;
  Completion done;
};

/// A value an incoming call waited for (RRef passed where T is expected).
struct ArgumentReady {
  uint64_t call = 0;
  size_t index = 0;
  Outcome outcome;
};

}  // namespace castor::detail

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(castor::detail::IncomingCall)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(castor::detail::ForkRegistration)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(castor::detail::StateDropped)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(castor::detail::OwnerRegistration)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(castor::detail::AdoptReply)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(castor::detail::ArgumentReady)

namespace castor::detail {

using rref_context_actor = caf::typed_actor<
    caf::reacts_to<RRefControl>,        // from a peer
    caf::reacts_to<RRefControlAck>,     // from a peer
    caf::reacts_to<IncomingCall>,       // a request that involves RRefs
    caf::reacts_to<ForkRegistration>,   // a fork leaves
    caf::reacts_to<StateDropped>,       // a handle's last copy is gone
    caf::reacts_to<OwnerRegistration>,  // a value owned here, with a local handle
    caf::reacts_to<AdoptReply>,         // a reply with RRefs in it
    caf::reacts_to<ArgumentReady>,      // a prepared call's argument arrived
    caf::reacts_to<peer_down_atom, WorkerId>,
    caf::reacts_to<shutdown_atom>,      // graceful shutdown began: release every local handle
    caf::reacts_to<retry_atom>,         // resend unacknowledged control messages
    caf::reacts_to<owner_gone_atom, RRefId>>;

/// The rref/ layer's RRefHooks: the entry points the worker runtime calls,
/// plus what RRef handles on any thread need.
class RRefRuntime : public RRefHooks {
 public:
  explicit RRefRuntime(WorkerServices& rt);
  ~RRefRuntime() override;

  // RRefHooks
  void fork_for(Value& v, WorkerId to) override;
  void convert_arguments(const CallRequest& req, std::vector<Value>& args) override;
  bool wants(const CallRequest& req) const override;
  std::optional<std::string> foreign_rref(const std::vector<Value>& args) const override;
  void handle_request(CallRequest&& req, caf::strong_actor_ptr reply_to) override;
  void handle_control(RRefControl&& msg) override;
  void handle_ack(RRefControlAck&& ack) override;
  void on_peer_down(WorkerId rank) override;
  void on_shutdown_begin() override;
  bool idle() const override;
  std::map<std::string, int64_t> debug_info() const override;
  RRefInspection inspect() const override;
  void stop() override;

  void adopt_then(Value v, Completion done) override;

  /// Handles (RRef<T>) on any thread.
  RRefStatePtr new_user_state(RRefId id, WorkerId owner, ForkId fork, std::string type_name);
  RRefStatePtr new_owner_state(RRefId id, std::shared_ptr<Holder> holder, std::string type_name);
  void register_owner(RRefId id, std::shared_ptr<Holder> holder);
  void state_dropped(RRefState& s);
  /// The context actor's owners, mirrored for inspection from any thread.
  void owner_added(RRefId id, std::shared_ptr<Holder> holder, std::shared_ptr<OwnerStats> stats);
  void owner_removed(RRefId id);
  /// Every handle state alive here now (shutdown releases them).
  std::vector<RRefStatePtr> take_live_states();
  FaultInjector& faults() { return faults_; }

  WorkerServices& services() { return rt_; }
  RRefCounters& counters() { return *counters_; }
  std::shared_ptr<RRefCounters> counters_ptr() { return counters_; }
  IdGenerator<RRefId> rref_ids;
  IdGenerator<ForkId> fork_ids;

 private:
  WorkerServices& rt_;
  std::shared_ptr<RRefCounters> counters_;
  rref_context_actor context_;
  // Every handle state created here (weak), so that shutdown can release them.
  void track(const RRefStatePtr& s);
  mutable std::mutex live_mtx_;
  std::vector<std::weak_ptr<RRefState>> live_;
  size_t live_alive_hint_ = 0;
  FaultInjector faults_;

  struct OwnerEntry {
    std::shared_ptr<Holder> holder;
    std::shared_ptr<OwnerStats> stats;
  };
  mutable std::mutex owners_mtx_;
  std::unordered_map<RRefId, OwnerEntry> owners_;
};

RRefRuntime& rref_runtime(WorkerServices& rt);

}  // namespace castor::detail
