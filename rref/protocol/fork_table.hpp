// ForkTable: one worker's user side of Note [RRef protocol] (in
// rref/rref_context.hpp): the forks it gave to a non-owner that the owner has
// not confirmed yet (pending children, G2), and the forks it received from
// another user that the owner has not confirmed yet (pending users, with the
// calls waiting on them). Plain data: each method takes one protocol event
// and returns what to send; the RRef context actor does the sending, and
// unit tests drive it through a simulated network.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "messages/rref_proto.hpp"
#include "messages/value.hpp"
#include "rref/protocol/outbox.hpp"
#include "rref/protocol/owner_forks.hpp"
#include "rref/protocol/table_gauge.hpp"
#include "rref/rref_state.hpp"

namespace castor::detail {

/// An incoming call held back until its RRef arguments are usable (see
/// rref/calls/prepared_calls.hpp); 0 is no call.
using PreparedCallId = uint64_t;

/// Who a fork arriving here came from, relative to the value's owner: the
/// sharing cases of Note [RRef protocol] as the receiver sees them.
enum class Arrival {
  at_owner,    // user -> owner: we own the value and use our own OwnerRRef
  from_owner,  // owner -> user: the owner counted the fork before sending it
  from_user,   // user -> user: the owner must confirm the fork first
};

/// A fork arrived at its owner.
struct ArrivedAtOwner {
  OwnerEvent local_ref;                         // the new handle here: +1
  std::optional<ControlToSend> release_parent;  // child_accept to the parent, unless we are it
};

/// The last handle of an RRef here is gone.
struct Released {
  std::optional<OwnerEvent> owner;   // the owner's handle: one local reference less
  std::optional<ControlToSend> send; // a user's fork: user_delete to the owner (G1)
};

/// A fork arrived from another user.
struct ArrivedFromUser {
  std::optional<ControlToSend> fork_request;  // to the owner; nothing if this fork was pending already
  bool owner_dead = false;  // the owner is known dead: nothing is recorded, the waiting call fails now
};

/// The owner confirmed a fork of ours.
struct ForkConfirmed {
  ControlToSend release_parent;        // child_accept to the parent (its G2 may end)
  std::vector<PreparedCallId> calls;   // calls that waited for this confirmation
};

class ForkTable {
 public:
  /// The gauges are kept equal to the two tables and changed only here.
  ForkTable(WorkerId self, TableGauge& pending_users, TableGauge& pending_children);
  ForkTable(const ForkTable&) = delete;
  ForkTable& operator=(const ForkTable&) = delete;

  // -- a fork leaves (fork_for), before the message carrying it is sent -------

  /// `state` (a handle here) is shared with worker `to` as `fork`. An owner
  /// counts the fork now, before anyone can use or delete it: the returned
  /// event goes to the value's owner (Note [Light owners]). A user keeps `state` until `to`'s
  /// child_accept arrives (G2). A fork for a worker known dead is neither
  /// counted nor kept: the call carrying it fails, and no peer_down would
  /// come again to release it.
  std::optional<OwnerEvent> fork_registered(const RRefStatePtr& state, ForkId fork, WorkerId to);

  // -- a fork arrives ----------------------------------------------------------

  Arrival arrival_of(const RRefForkData& d) const;
  /// user -> owner: we own it; the parent's pending child may go, since the
  /// local reference is counted before the child_accept leaves.
  ArrivedAtOwner arrived_at_owner(const RRefForkData& d) const;
  /// owner -> user: confirmed on arrival.
  void arrived_from_owner(RRefState& state) const;
  /// user -> user: pending until the owner's ack; `waiting` (if any) runs
  /// only after it, so confirmed_by_owner() is true inside it. If the owner
  /// is known dead no confirmation can come: `waiting` must fail at once
  /// (else it would wait forever, found by the simulation).
  ArrivedFromUser arrived_from_user(const RRefStatePtr& state, WorkerId parent, PreparedCallId waiting);

  /// user -> user, where the function takes the value, not the RRef (G3 of
  /// Note [RRef protocol]): the fork may be borrowed instead of adopted. If
  /// so, returns the child_accept that ends the borrow, to send once the
  /// owner answered the fetch (or failed it); nothing is recorded here, and
  /// no fork_request or user_delete will be sent for this fork. Nothing if
  /// it must be adopted: not from a user, its owner or parent known dead,
  /// or restartable (RS4 re-registers a fork, so it must be one).
  std::optional<ControlToSend> borrowed(const RRefForkData& d) const;

  // -- a handle's last copy here is gone ----------------------------------------

  Released released(RRefId rref, ForkId fork, WorkerId owner, bool owner_side) const;

  // -- control messages from peers, and acks of ours -----------------------------

  /// A peer's control message: what the owner here must count, if anything.
  /// The caller acknowledges every control message, even a repeated one.
  std::optional<OwnerEvent> control_received(const RRefControl& msg);
  /// Our message `acked` was acknowledged (Outbox::acknowledge): the ack of a
  /// fork_request confirms that fork. Nothing for other messages or a fork
  /// not pending (confirmed already, or its owner died).
  std::optional<ForkConfirmed> acknowledged(const RRefControl& acked);

  /// Worker `rank` died (remembered: later events that involve it are
  /// settled at once, see above). Pending children it held go (its forks count as
  /// deleted at the owner), and so do pending children of values it owned
  /// (nothing is left to protect). Pending users whose owner it was go, and
  /// the calls that waited on them are returned: they fail.
  std::vector<PreparedCallId> peer_down(WorkerId rank);

  /// Whether worker `rank`'s peer_down arrived here. An owner made after its
  /// creator's death (by a late delete or fork_request) must hear of that
  /// death at once: no create will come, and no second peer_down.
  bool is_dead(WorkerId rank) const { return dead_.count(rank) > 0; }
  /// Note [Rejoin]: `rank` lives again (after its peer_down): events that
  /// involve its new life are no longer settled as dead. (Ids of its
  /// earlier lives still are: the RRef context checks their incarnation.)
  void peer_rejoined(WorkerId rank) { dead_.erase(rank); }

  size_t pending_users() const { return pending_users_.size(); }
  size_t pending_children() const { return pending_children_.size(); }
  bool is_pending_user(ForkId fork) const { return pending_users_.count(fork) > 0; }
  bool is_pending_child(ForkId fork) const { return pending_children_.count(fork) > 0; }

 private:
  struct PendingUser {
    std::vector<RRefStatePtr> states;     // kept alive, and confirmed, when the owner acks
    WorkerId parent = -1;                 // told with child_accept once confirmed
    std::vector<PreparedCallId> waiting;  // calls that start only when confirmed
  };
  struct PendingChild {
    RRefStatePtr state;  // G2: our fork stays alive until the child is confirmed
    WorkerId child = -1;
  };

  void drop_user(std::unordered_map<ForkId, PendingUser>::iterator it);
  void drop_child(std::unordered_map<ForkId, PendingChild>::iterator it);

  const WorkerId self_;
  // Workers whose current life's peer_down arrived; a rejoin takes its
  // rank out again.
  std::unordered_set<WorkerId> dead_;
  TableGauge& pending_users_gauge_;     // == pending_users_.size()
  TableGauge& pending_children_gauge_;  // == pending_children_.size()
  // Added by arrived_from_user, removed by acknowledged (the owner's ack)
  // and peer_down (the owner died).
  std::unordered_map<ForkId, PendingUser> pending_users_;
  // Added by fork_registered, removed by control_received (child_accept) and
  // peer_down (the child or the owner died). Removing one may drop the last
  // reference to our state, which then sends its user_delete (G1).
  std::unordered_map<ForkId, PendingChild> pending_children_;
};

}  // namespace castor::detail
