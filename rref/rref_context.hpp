// The RRef context: one actor per worker that runs the RRef protocol's I/O
// (control messages, acks, retries, owner actors) around the plain classes of
// rref/protocol/ that keep its rules, and holds incoming calls that involve
// RRefs until they may run (rref/calls/).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include "actors/hooks/rref_hooks.hpp"
#include "messages/atoms.hpp"
#include "rref/owner_rref_actor.hpp"
#include "rref/protocol/outbox.hpp"
#include "rref/rref_state.hpp"

namespace castor::detail {

// Note [RRef protocol]
// ~~~~~~~~~~~~~~~~~~~~
// A value lives on its owner (in the RRef context's slot for it, and in an
// OwnerRRef actor once it has method calls: Note [Light owners]); every
// other worker that refers to it holds a fork (a UserRRef: rref id + fork id). There is no
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
//  - user -> user, where the function takes the value (an RRef<T> passed
//    for a T): the child borrows the fork (G3) instead of adopting it.
//
//  G3. A borrowed fork is never counted: the child fetches the value from
//      the owner and sends child_accept to the parent only when the fetch
//      is answered (or failed), then runs the function with the value. The
//      parent's pending child (G2) keeps the parent's fork, and so the
//      value, alive until then; after it nobody needs the value for this
//      fork. So a borrow costs the fetch and the child_accept, where an
//      adopted fork costs a fork_request, a child_accept and a user_delete,
//      each acknowledged: four messages fewer per RRef argument taken by
//      value, and the call no longer waits for the owner's confirmation.
//      Borrowed only when adopting is not needed: the owner and the parent
//      alive as far as the child knows (else the usual path settles it),
//      and the fork not restartable (RS4 re-registers forks). If the parent
//      dies before the fetch is answered, the owner may end the value: the
//      fetch fails, and so does the call, with the owner's error (its
//      caller, who would get the reply, is gone).
//
// Messages: fork_request (child -> owner; ack = confirmation), child_accept
// (child -> parent), user_delete (user -> owner), and their acks. Each carries
// a ControlId, is retried with backoff until acknowledged, and is handled
// idempotently: the owner remembers deleted forks (a late or repeated add
// is ignored, a delete that overtakes its add cancels it) and this context
// remembers ended owners (a late message never revives one). Delivery order
// between workers is not assumed anywhere. A dead worker's forks count as
// deleted, its pending children are dropped, and an owner whose creator died
// before creating it ends with an error. A death is remembered: what comes
// after it and involves the dead worker is settled at once, since no second
// peer_down will release it (a fork from a user of a dead owner fails its
// call, a fork given to a dead worker is neither counted nor kept, an owner
// made after its creator's death hears of it when it is made: three leaks
// the simulation found).
//
// Where the rules are kept: in plain classes (no actor, no thread, no clock),
// each unit-tested through a simulated network that delays, reorders,
// duplicates and drops (tests/unit/test_rref_protocol_unit.cpp):
//  - rref/protocol/fork_table: the sharing cases as the sender and the
//    receiver see them, G2's pending children, G3's borrows, pending users
//    and the calls waiting on them, and what a dead peer means for them;
//  - rref/protocol/outbox: retries with backoff until acknowledged, and
//    nothing kept for a dead peer;
//  - rref/protocol/owner_forks: the owner's count (G1: the value ends when
//    the last fork and local handle are gone), idempotent adds and deletes,
//    a dead worker's forks;
//  - rref/protocol/owner_directory: an ended owner is never revived.
// The RRef context actor (rref_context.cpp, adoption.cpp) and the owner
// actors (owner_rref_actor.cpp) deliver events to them and send what they
// return.

class CreationJoin;

/// A request that involves RRefs, with where its reply goes. `started`: a
/// remote() whose function already runs (V2 of Note [Values on arrival]);
/// the request comes without its arguments and the join has its reply.
struct IncomingCall {
  CallRequest request;
  caf::strong_actor_ptr reply_to;
  std::shared_ptr<CreationJoin> started;
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
  uint32_t owner_incarnation = 1;  // RJ5 of Note [Rejoin]
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
/// `release_parent`: the child_accept that ends a borrowed fork (G3).
struct ArgumentReady {
  uint64_t call = 0;
  size_t index = 0;
  Outcome outcome;
  std::optional<ControlToSend> release_parent;
};

/// RS1 of Note [Restartable values]: the owner's new life answered this
/// worker's re-registration of `fork` (or the request failed).
struct ReRegistered {
  std::weak_ptr<RRefState> state;
  std::shared_ptr<RestartPolicy> policy;
  RRefId rref;
  ForkId fork;
  WorkerId owner = -1;
  WorkerId parent = -1;  // RS4: the parent whose pending child this fork was, or -1
  uint32_t incarnation = 0;
  Outcome outcome;
};

/// A bound that is due: `fire` runs on the context (RRefRuntime::after).
struct Deadline {
  std::function<void()> fire;
};

}  // namespace castor::detail

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(castor::detail::Deadline)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(castor::detail::IncomingCall)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(castor::detail::ReRegistered)
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
    caf::reacts_to<ReRegistered>,       // Note [Restartable values], RS1
    caf::reacts_to<Deadline>,           // RRefRuntime::after
    caf::reacts_to<peer_down_atom, WorkerId>,
    caf::reacts_to<rejoined_atom, WorkerId, uint32_t>,  // Note [Rejoin]
    caf::reacts_to<shutdown_atom>,      // graceful shutdown began: release every local handle
    caf::reacts_to<retry_atom>,         // resend unacknowledged control messages
    caf::reacts_to<owner_gone_atom, RRefId>,
    caf::reacts_to<create_by_atom, RRefId, int64_t>>;  // remote()'s bound for creating a value is due

class RRefRuntime;

/// Spawns the RRef context of the worker whose rref/ layer is `rr`.
rref_context_actor spawn_rref_context(RRefRuntime* rr);

}  // namespace castor::detail
